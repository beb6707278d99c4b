package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/beanpole/beanpole/admin"
	"github.com/beanpole/beanpole/cluster"
	"github.com/beanpole/beanpole/config"
	"github.com/beanpole/beanpole/engine"
	"github.com/beanpole/beanpole/loop"
	"github.com/beanpole/beanpole/route"
)

// leaderWait bounds how long a client's command waits for its group to
// have a leader: a failover, with room for a loaded machine.
const leaderWait = 10 * time.Second

// runGroups runs a node of a cluster whose tubes are spread over data
// groups (--groups): for the node's whole life, a router serves the
// clients on the client listeners (package route), and for each data
// group, while this node leads it, an engine serves the routers of every
// node on an internal listener beside the raft port. With the links' TLS
// files, the internal listeners and the routers' connections to them use
// the links' mutual TLS. A node removed from group 0 exits with
// config.ExitRemoved once the data groups have removed it too.
func (s *Server) runGroups(host *cluster.Host) int {
	cfg, log := s.cfg, s.log
	n := len(host.Groups) - 1
	var linkTLS func() *tls.Config
	if files := s.linkFiles; files != nil {
		linkTLS = func() *tls.Config {
			c := files.Loaded()
			return cluster.NodeOnlyTLS(c.Certificates[0], c.ClientCAs)
		}
	}
	dial := func(addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: 5 * time.Second}
		if linkTLS != nil {
			return tls.DialWithDialer(&d, "tcp", addr, linkTLS())
		}
		return d.Dial("tcp", addr)
	}
	// The router holds its clients' input while their reserves wait, and
	// long list replies, against the input budget, as one server holds
	// its waiting connections' input.
	_, budget := s.memoryLimits()
	rt := route.New(route.Config{Groups: n, Dial: dial, MaxJobSize: uint32(cfg.MaxJobSize), LeaderWait: leaderWait, Log: log,
		ReserveFDs: routerReserveFDs(cfg), Budget: budget,
		Leader: func(g int) string { _, addr := host.Leader(g); return addr }})
	s.watchGroups(host, rt)
	for _, ln := range s.lns {
		go func() { _ = rt.Serve(ln) }()
	}
	if s.tlsLn != nil {
		go func() { _ = rt.ServeTLS(s.tlsLn, s.tlsFiles.Config) }()
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	hosted := 0
	for _, nd := range host.Groups[1:] {
		if nd != nil {
			hosted++
		}
	}
	for g := 1; g <= n; g++ {
		if host.Groups[g] == nil {
			continue // another node's: its leader serves this node's router
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.leadGroup(ctx, host.Groups[g], g, n, hosted, linkTLS)
		}()
	}
	s.takes(CallStop)
	s.takes(CallDrain)
	s.adm.SetState(admin.Ready)
	if err := config.SdNotify("READY=1"); err != nil {
		log.Warn().Err(err).Msg("could not tell systemd the server is ready")
	}
	log.Info().Str("node", cfg.NodeID).Int("groups", n).Msg("cluster: serving clients; each command runs at the leader of its tube's group")
	removed := s.awaitStopOrRemoval(host)
	s.adm.SetState(admin.Stopping)
	_ = config.SdNotify("STOPPING=1")
	rt.Stop()
	cancel()
	wg.Wait()
	code := leaveCluster(host, log)
	if removed {
		fmt.Fprintf(s.stderr, "beanpole: %v\n", errRemoved)
		return config.ExitRemoved
	}
	return code
}

// leaveWait bounds how long a node removed from group 0 stays for the
// data groups to remove it too.
const leaveWait = 10 * time.Second

// awaitStopOrRemoval takes drains until a stop, or until this node is
// removed from group 0 (true): it then stays, serving, until every data
// group has removed it too (Host.AwaitLeft), within leaveWait.
func (s *Server) awaitStopOrRemoval(host *cluster.Host) bool {
	log := s.log
	for {
		select {
		case <-host.Groups[0].Removed():
			log.Warn().Msg("cluster: this node was removed from group 0; it exits once the data groups have removed it too")
			if !host.AwaitLeft(leaveWait) {
				log.Warn().Dur("waited", leaveWait).Msg("cluster: a data group still names this node; it exits all the same")
			}
			return true
		case c := <-s.calls:
			if c.stop {
				log.Info().Str("signal", c.why).Msg("stopping: no new connections")
				return false
			}
			// Drain mode, as upstream: the groups this node leads refuse
			// puts from now on, and so does each it leads later.
			s.draining.Store(true)
			s.groupEngines.Range(func(k, _ any) bool {
				k.(*engine.Engine).SetDraining()
				return true
			})
			s.adm.SetState(admin.Draining)
			log.Info().Msg("drain mode (SIGUSR1): the groups this node leads refuse puts from now on")
		}
	}
}

// leadGroup serves data group g of n while this node leads it, until ctx
// ends; this node hosts hosted data groups, which share its memory.
func (s *Server) leadGroup(ctx context.Context, node *cluster.Node, g, n, hosted int, linkTLS func() *tls.Config) {
	log := s.log.With().Int("group", g).Logger()
	for {
		jl, err := node.AwaitLeadership(ctx)
		if err != nil {
			if jl != nil {
				node.StepDown(jl)
			}
			return
		}
		if err := s.serveGroup(ctx, node, jl, g, n, hosted, linkTLS); err != nil {
			log.Error().Err(err).Msg("cluster: could not serve the group; another node may lead it")
			node.StepDown(jl)
			if tr := node.TransferLeader(""); tr != nil {
				log.Warn().Err(tr).Msg("cluster: could not hand the group's lead over")
			}
			continue
		}
		node.StepDown(jl)
		if ctx.Err() != nil {
			return
		}
	}
}

// serveGroup loads group g's engine from its replicated state and serves
// it on an internal listener until this node loses the lead or ctx ends.
func (s *Server) serveGroup(ctx context.Context, node *cluster.Node, jl *cluster.Journal, g, n, hosted int, linkTLS func() *tls.Config) error {
	host, _, err := net.SplitHostPort(s.cfg.RaftAddr)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return fmt.Errorf("the group's internal listener: %w", err)
	}
	defer ln.Close()
	eng := engine.New(s.loops)
	eng.SetIDSpace(uint64(g%n), uint64(n))
	s.groupEngines.Store(eng, struct{}{})
	defer s.groupEngines.Delete(eng)
	if s.draining.Load() {
		eng.SetDraining()
	}
	jobs, maxID := node.FSM.State()
	eng.Restore(jobs, maxID)
	eng.RestorePauses(node.FSM.Pauses())
	eng.SetJournal(jl)
	srv, err := loop.New(s.loopConfig(), eng)
	if err != nil {
		return err
	}
	srv.Fence, srv.FenceMayReturn = node.Leads, node.MayLeadAgain
	if err := srv.Start(); err != nil {
		return err
	}
	defer s.groupStats.lead(g, eng, srv)()
	// The node's memory is shared by the groups it may lead: each engine
	// gets a share of the ceiling and of the input budget.
	ceiling, input := s.memoryLimits()
	eng.SetJobMemoryLimit(ceiling / int64(hosted))
	srv.SetInputBudget(input / int64(hosted))
	served := make(chan error, 1)
	go func() {
		if linkTLS != nil {
			served <- srv.ServeInternalTLS(ln, linkTLS())
		} else {
			served <- srv.ServeInternal(ln)
		}
	}()
	if err := node.Announce(ln.Addr().String(), ""); err != nil {
		stopLoops(srv)
		return fmt.Errorf("announcing where the group is served: %w", err)
	}
	s.log.Info().Int("group", g).Str("internal", ln.Addr().String()).Int("jobs", len(jobs)).Msg("cluster: leading a data group")
	select {
	case <-node.LostLeadership():
		s.log.Warn().Int("group", g).Msg("cluster: this node lost the lead of a data group; its routers' connections to it are closed")
	case <-ctx.Done():
	case err := <-served:
		if err != nil {
			s.log.Error().Err(err).Int("group", g).Msg("cluster: the group's internal listener failed")
		}
	}
	stopLoops(srv)
	return nil
}

// stopLoops stops a group's event loops, closing the routers' connections.
func stopLoops(srv *loop.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Stop(ctx)
}

// placedMembers is group 0 as the HTTP side sees it on a node whose data
// groups run on --replicas of the nodes: a change of members would
// re-place the groups' replicas (GroupMembers), which is not built; it is
// refused rather than made in group 0 alone.
type placedMembers struct{ *cluster.Node }

var errPlacedMembers = errors.New("the members of a cluster whose data groups run on --replicas of the nodes are those it was bootstrapped with: " +
	"adding or removing a node would re-place the groups' replicas, which is not built")

func (placedMembers) Add(string, string) (string, error) { return "", errPlacedMembers }
func (placedMembers) Remove(string) (string, error)      { return "", errPlacedMembers }
