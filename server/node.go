package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/rs/zerolog"

	"github.com/beanpole/beanpole/admin"
	"github.com/beanpole/beanpole/cluster"
	"github.com/beanpole/beanpole/config"
	"github.com/beanpole/beanpole/persist"
	"github.com/beanpole/beanpole/server/clusterctl"
)

// runNode runs a node of the group (--cluster-dir) until a stop: it
// forwards its clients to the leader while it follows, and while it leads
// loads a new engine from the replicated state and serves it with the
// engine logging through raft. A node that loses the lead closes its
// clients' connections (a client sees what it sees when a beanstalkd
// server dies, and reconnects) and follows again, in the same process:
// raft goes on all the while, so the node keeps voting and the group
// keeps its majority.
func (s *Server) runNode() int {
	cfg, log := s.cfg, s.log
	host, code := s.openNode()
	if host == nil {
		return code
	}
	node := host.Groups[0]
	s.hup.node.Store(node)
	if cfg.Groups > 0 {
		return s.runGroups(host)
	}
	// From here on the node takes Drain and Stop: following takes a stop
	// and remembers a drain (the node's clients are served elsewhere; it
	// drains each time it leads); leading, serve takes both. A signal
	// sent once the node says it leads is never lost.
	s.takes(CallDrain)
	s.takes(CallStop)
	seeded := false
	for {
		jl, stopped, err := s.follow(node)
		if errors.Is(err, errRemoved) {
			if jl != nil {
				node.StepDown(jl)
			}
			host.Close()
			fmt.Fprintf(s.stderr, "beanpole: %v\n", err)
			return config.ExitRemoved
		}
		if err != nil {
			host.Close()
			fmt.Fprintf(s.stderr, "beanpole: %v\n", err)
			return 1
		}
		if stopped {
			if jl != nil {
				node.StepDown(jl)
			}
			return leaveCluster(host, log)
		}
		if cfg.ClusterImport != "" && !seeded {
			if code := seed(node, cfg.ClusterImport, log, s.stderr); code != 0 {
				host.Close()
				return code
			}
			seeded = true
		}
		var self, selfTLS string
		if ln, _ := clientListener(s.lns); ln != nil {
			self = clientAddr(ln, cfg.RaftAddr)
		}
		if s.tlsLn != nil {
			selfTLS = clientAddr(s.tlsLn, cfg.RaftAddr)
		}
		if err := node.Announce(self, selfTLS); err != nil {
			log.Warn().Err(err).Msg("cluster: could not announce this node as the leader; it follows again")
			node.StepDown(jl)
			continue
		}
		eng, code := s.newEngine()
		if code != 0 {
			node.StepDown(jl)
			host.Close()
			return code
		}
		jobs, maxID := node.FSM.State()
		eng.Restore(jobs, maxID)
		eng.RestorePauses(node.FSM.Pauses())
		eng.SetJournal(jl)
		log.Info().Str("node", cfg.NodeID).Int("jobs", len(jobs)).Uint64("max-id", maxID).Msg("cluster: leading")
		warnFewIDs(log, maxID)
		code, lost := s.serve(eng, nil, host)
		node.StepDown(jl)
		if !lost {
			return code
		}
	}
}

// openNode opens this node's host of the group and, on its first start
// with --join, asks a member to add it, having first asked it how many
// data groups the cluster has (joinGroups). With the links' TLS files, the
// links between nodes use mutual TLS with the files loaded last.
func (s *Server) openNode() (*cluster.Host, int) {
	cfg := s.cfg
	var members []cluster.Member
	if cfg.Bootstrap != "" {
		var err error
		if members, err = cluster.ParseMembers(cfg.Bootstrap); err != nil {
			fmt.Fprintf(s.stderr, "beanpole: --bootstrap: %v\n", err)
			return nil, config.ExitUsage
		}
	}
	var nodeTLS func() *tls.Config
	if files := s.linkFiles; files != nil {
		nodeTLS = func() *tls.Config {
			c := files.Loaded()
			return cluster.NodeTLS(c.Certificates[0], c.ClientCAs)
		}
	}
	if cfg.Join != "" && !cluster.Made(cfg.ClusterDir) {
		if code := joinGroups(cfg, nodeTLS, s.stderr); code != 0 {
			return nil, code
		}
	}
	host, err := cluster.OpenHost(cluster.Config{ID: cfg.NodeID, Dir: cfg.ClusterDir, Raft: cfg.RaftAddr,
		Bootstrap: members, TLS: nodeTLS, Log: s.log}, cfg.Groups, cfg.Replicas)
	if err != nil {
		fmt.Fprintf(s.stderr, "beanpole: %v\n", err)
		return nil, 1
	}
	if cfg.Replicas > 0 {
		s.adm.SetCluster(placedMembers{host.Groups[0]})
	} else {
		s.adm.SetCluster(host.Groups[0])
	}
	s.adm.SetGroups(host.Status)
	if cfg.Join != "" && host.Groups[0].Fresh {
		if code := join(cfg, nodeTLS, s.stderr); code != 0 {
			host.Close()
			return nil, code
		}
	}
	return host, 0
}

// errRemoved: this node was removed from the group.
var errRemoved = errors.New("cluster: this node was removed from the group, so it exits and is not restarted by the packaged unit; " +
	"to bring it back, empty its --cluster-dir and start it with --join")

// follow forwards the node's clients to the leader until this node leads
// (it returns the journal of its term) or a Stop stops it
// (stopped; the journal too if the node took the lead meanwhile), or it
// finds itself removed from the group (errRemoved; the journal too).
func (s *Server) follow(node *cluster.Node) (jl *cluster.Journal, stopped bool, err error) {
	s.adm.SetState(admin.Following)
	fw := node.Forward(s.lns, s.tlsLn, reserveFDs(s.cfg))
	defer fw.Stop()
	s.log.Info().Str("node", s.cfg.NodeID).Str("raft", s.cfg.RaftAddr).Msg("cluster: following; clients are forwarded to the leader")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done, watched := make(chan struct{}), make(chan struct{})
	removed := false
	go func() {
		defer close(watched)
		for {
			select {
			case <-node.Removed():
				removed = true
				cancel()
				return
			case c := <-s.calls:
				if !c.stop {
					s.draining.Store(true)
					s.log.Info().Msg("drain mode (SIGUSR1): this node refuses puts whenever it leads, until it restarts; " +
						"the group drains once every member is told")
					continue
				}
				stopped = true
				cancel()
				return
			case <-done:
				return
			}
		}
	}()
	jl, err = node.AwaitLeadership(ctx)
	close(done)
	<-watched
	if removed {
		return jl, false, errRemoved
	}
	if stopped {
		return jl, true, nil
	}
	return jl, false, err
}

// seed replicates the jobs of the binlog in dir into the group, once: a
// group that already holds jobs or ids is left as it is.
func seed(node *cluster.Node, dir string, log zerolog.Logger, stderr io.Writer) int {
	if _, top := node.FSM.State(); top != 0 {
		log.Info().Str("dir", dir).Msg("cluster: the group holds jobs already; --cluster-import is not applied again")
		return 0
	}
	start := time.Now()
	blog, rec, err := persist.Open(persist.Options{Dir: dir}, log.With().Str("component", "binlog").Logger())
	if err != nil {
		fmt.Fprintf(stderr, "beanpole: --cluster-import %s: %v\n", dir, err)
		return 1
	}
	jobs, maxID := rec.Jobs, rec.MaxID
	if err := blog.Close(); err != nil {
		fmt.Fprintf(stderr, "beanpole: --cluster-import %s: %v\n", dir, err)
		return 1
	}
	if err := node.Seed(jobs, maxID); err != nil {
		fmt.Fprintf(stderr, "beanpole: --cluster-import %s: %v\n", dir, err)
		return 1
	}
	log.Info().Str("dir", dir).Int("jobs", len(jobs)).Uint64("max-id", maxID).Dur("took", time.Since(start)).
		Msg("cluster: seeded the group from the binlog")
	return 0
}

// joinClient is the client --join asks its member through, and the
// token it presents. Over HTTPS it trusts the group's CA and presents this
// node's certificate (nodeTLS, the links' configuration), or with no
// nodeTLS the system's CAs.
func joinClient(cfg *config.Config, nodeTLS func() *tls.Config, stderr io.Writer) (*http.Client, string, int) {
	var token string
	if cfg.HTTPTokenFile != "" {
		b, err := config.ReadToken(cfg.HTTPTokenFile)
		if err != nil {
			fmt.Fprintf(stderr, "beanpole: --http-token-file: %v\n", err)
			return nil, "", 1
		}
		token = string(b)
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if nodeTLS != nil {
		conf = nodeTLS()
	}
	return clusterctl.Client(conf), token, 0
}

// joinGroups asks the member --join names how many data groups the
// cluster has (GET /cluster/groups), before this node makes its
// directory: a node joins with the cluster's --groups, since the tubes'
// places and the jobs' ids depend on it.
func joinGroups(cfg *config.Config, nodeTLS func() *tls.Config, stderr io.Writer) int {
	client, token, code := joinClient(cfg, nodeTLS, stderr)
	if code != 0 {
		return code
	}
	var out bytes.Buffer
	if code := clusterctl.Request(client, http.MethodGet, cfg.JoinURL(), "/cluster/groups", token, nil, &out, stderr); code != 0 {
		fmt.Fprintf(stderr, "beanpole: --join %s: could not learn the cluster's number of data groups (above)\n", cfg.Join)
		return code
	}
	var gs []struct{}
	if err := json.Unmarshal(out.Bytes(), &gs); err != nil || len(gs) == 0 {
		fmt.Fprintf(stderr, "beanpole: --join %s: GET /cluster/groups did not list the cluster's groups: %q\n", cfg.Join, out.String())
		return 1
	}
	if n := len(gs) - 1; n != cfg.Groups {
		fmt.Fprintf(stderr, "beanpole: --join %s: the cluster has %d data groups and this node was given --groups %d: "+
			"a node joins with the cluster's number (--groups %d)\n", cfg.Join, n, cfg.Groups, n)
		return config.ExitUsage
	}
	return 0
}

// join asks a member (--join, its --http address) to add this node.
func join(cfg *config.Config, nodeTLS func() *tls.Config, stderr io.Writer) int {
	client, token, code := joinClient(cfg, nodeTLS, stderr)
	if code != 0 {
		return code
	}
	form := url.Values{"id": {cfg.NodeID}, "raft": {cfg.RaftAddr}}
	if code := clusterctl.Request(client, http.MethodPost, cfg.JoinURL(), "/cluster/add", token, form, io.Discard, stderr); code != 0 {
		fmt.Fprintf(stderr, "beanpole: --join %s: this node was not added, or the leader cannot reach it at --raft %s (above)\n", cfg.Join, cfg.RaftAddr)
		return code
	}
	return 0
}

// clientListener is the plaintext listener whose address a leader
// announces: the first TCP one. The other nodes forward their clients
// there, and a UNIX socket is out of their reach, so a node whose
// plaintext listeners are all UNIX sockets is refused (nil and an error);
// one with none (--tls-only) announces none (nil, nil).
func clientListener(lns []net.Listener) (net.Listener, error) {
	for _, ln := range lns {
		if ln.Addr().Network() == "tcp" {
			return ln, nil
		}
	}
	if len(lns) == 0 {
		return nil, nil
	}
	return nil, fmt.Errorf("%s: a cluster node tells the other nodes where its clients connect, and they forward theirs there, "+
		"which a UNIX socket is out of reach for: listen on TCP (-l HOST -p PORT), or with socket activation pass a TCP socket beside it",
		listenerName(lns[0]))
}

// clientAddr is the address other nodes forward this node's clients to:
// ln's (clientListener's, or the TLS one), with an unspecified host
// replaced by --raft's.
func clientAddr(ln net.Listener, raftAddr string) string {
	addr := ln.Addr().String()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		if rh, _, err := net.SplitHostPort(raftAddr); err == nil {
			host = rh
		}
	}
	return net.JoinHostPort(host, port)
}

// leaveCluster hands the leads this node holds to other nodes (so that no
// group waits for an election timeout), then stops raft. It returns the
// process's exit status: 1 if raft's stores did not close.
func leaveCluster(host *cluster.Host, log zerolog.Logger) int {
	if err := host.HandOver(5 * time.Second); err != nil {
		log.Debug().Err(err).Msg("cluster: no leadership transfer")
	}
	if err := host.Close(); err != nil {
		log.Error().Err(err).Msg("cluster: closing")
		return 1
	}
	return 0
}
