package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/rs/zerolog"
)

// logCacheEntries is how many of the newest raft entries stay in memory
// for replication: at most maxInFlight batches of records each.
const logCacheEntries = 512

// Member is one node of the group as --bootstrap names it.
type Member struct {
	ID   string
	Raft string // HOST:PORT of its raft transport
}

// ParseMembers reads --bootstrap's ID=HOST:PORT,... list.
func ParseMembers(s string) ([]Member, error) {
	var out []Member
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("%q is not ID=HOST:PORT", part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("%q: %v", part, err)
		}
		if seen[id] {
			return nil, fmt.Errorf("node id %q is given twice", id)
		}
		seen[id] = true
		out = append(out, Member{ID: id, Raft: addr})
	}
	return out, nil
}

// Config is what a node needs to start.
type Config struct {
	ID  string // --node-id
	Dir string // --cluster-dir: raft's log, snapshots and node state
	// Raft is the transport's bind and advertised address (--raft).
	Raft string
	// Bootstrap are the initial members, used only when Dir holds no state.
	Bootstrap []Member
	// Transport replaces the TCP transport (tests use raft's in-memory one).
	Transport raft.Transport
	// TLS, when set, secures the links between nodes with mutual TLS: it
	// returns the configuration (NodeTLS) for each new link, so that
	// reloaded files take effect without a restart. A node whose
	// certificate the CA did not sign can neither join nor be reached.
	TLS func() *tls.Config
	// Timing: the heartbeat and election timeouts (a follower starts an
	// election after missing heartbeats this long). Zero: 500 ms each.
	HeartbeatTimeout, ElectionTimeout time.Duration
	// Log receives raft's own log lines (warnings and up), in the
	// process's format.
	Log zerolog.Logger
	// links, when set, is a raft port this process opened for its
	// groups: the node's group (group) is carried on it (linkgroups.go),
	// and the node neither listens on Raft itself nor closes the port.
	links *linkLayer
	group uint16
}

// Node is one member of the group.
type Node struct {
	Raft    *raft.Raft
	FSM     *FSM
	cfg     Config
	wal     *wal.WAL
	trans   raft.Transport
	links   *linkLayer // nil with cfg.Transport
	leading chan bool
	m       *metrics
	// Fresh: the directory held no state when the node opened.
	Fresh bool
	// fenced times the RPCs whose answers confirm the lead (fence.go).
	fenced *fencedTransport
	// confirmed is when (boottime) the last round that confirmed the lead
	// started; 0 before the first.
	confirmed atomic.Int64
	// fenceAfter: a round must have started after this (boottime) to
	// confirm the lead: set when a transfer of the lead starts and when
	// one fails, so a failed transfer leaves the node fenced until a new
	// round confirms it.
	fenceAfter atomic.Int64
	// leadTerm is the term AwaitLeadership found this node leading in.
	leadTerm atomic.Uint64
	// handingOver: a transfer of the lead has started (TransferLeader).
	handingOver atomic.Bool
	mem         membership
}

// Made says whether dir was made a node's directory (Open) before.
func Made(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "wal"))
	return err == nil
}

// Open starts a node: its stores under cfg.Dir, its transport, and raft.
// A node whose directory holds no state and that is given Bootstrap
// bootstraps the group with those members (every initial member is given
// the same list; raft makes that safe).
func Open(cfg Config) (*Node, error) {
	if cfg.ID == "" {
		return nil, errors.New("cluster: a node needs an id (--node-id)")
	}
	if cfg.HeartbeatTimeout == 0 {
		cfg.HeartbeatTimeout = 500 * time.Millisecond
	}
	if cfg.ElectionTimeout == 0 {
		cfg.ElectionTimeout = 500 * time.Millisecond
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "wal"), 0o700); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, JSONFormat: true,
		Output: &raftLog{log: cfg.Log}})
	w, err := wal.Open(filepath.Join(cfg.Dir, "wal"))
	if err != nil {
		return nil, fmt.Errorf("cluster: opening the raft log: %w", err)
	}
	m := newMetrics()
	var rp atomic.Pointer[raft.Raft]
	trans := cfg.Transport
	links, ownLinks := cfg.links, false
	var gl *groupLayer
	fail := func(err error) (*Node, error) {
		w.Close()
		if gl != nil {
			gl.Close()
		}
		if ownLinks {
			links.Close()
		}
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, 2, logger)
	if err != nil {
		return fail(fmt.Errorf("cluster: %w", err))
	}
	if trans == nil {
		if links == nil {
			ln, lerr := net.Listen("tcp", cfg.Raft)
			if lerr != nil {
				return fail(fmt.Errorf("cluster: --raft %s: %w", cfg.Raft, lerr))
			}
			adv, err := net.ResolveTCPAddr("tcp", cfg.Raft)
			if err != nil || adv.IP == nil || adv.IP.IsUnspecified() {
				ln.Close()
				return fail(fmt.Errorf("cluster: --raft %s: the other nodes need an address they can reach, not an unspecified one", cfg.Raft))
			}
			links, ownLinks = newLinkLayer(advertised{ln, adv}, cfg.TLS, func() []string { return memberHosts(rp.Load(), cfg.Bootstrap) }, linkGreeting), true
		}
		if gl, err = links.group(cfg.group); err != nil {
			return fail(err)
		}
		m.linksRefused = links.refused.Load
		trans = raft.NewNetworkTransportWithLogger(gl, linkPool, 10*time.Second, logger)
	}
	fenced := newFencedTransport(trans, cfg.ElectionTimeout)
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.Logger = logger
	rc.HeartbeatTimeout, rc.ElectionTimeout = cfg.HeartbeatTimeout, cfg.ElectionTimeout
	// raft's own lease only decides when a leader that hears from no
	// majority steps down; what it may answer rests on the fence
	// (leaseOf, Leads). A whole heartbeat timeout, not half of one: with
	// one node of three down, half a timeout of a starved follower's
	// silence deposed a healthy leader, again and again on a loaded host.
	rc.LeaderLeaseTimeout = cfg.HeartbeatTimeout
	rc.SnapshotThreshold = 8192
	// Pre-vote: a node that was cut off and comes back with a higher term
	// asks before it campaigns, and a healthy leader's followers say no,
	// so it does not depose that leader. raft runs it with a transport
	// that speaks it, as the network transport does.
	rc.PreVoteDisabled = false
	// A node removed from the group follows on, so that it notices its
	// removal and says so (membership.go), rather than stopping raft
	// under the process.
	rc.ShutdownOnRemove = false
	leading := make(chan bool, 16)
	rc.NotifyCh = leading

	fsm := NewFSM()
	fsm.m, fsm.log = m, cfg.Log
	has, err := raft.HasExistingState(w, w, snaps)
	if err != nil {
		return fail(fmt.Errorf("cluster: %w", err))
	}
	if !has && len(cfg.Bootstrap) > 0 {
		var conf raft.Configuration
		for _, m := range cfg.Bootstrap {
			conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.Raft)})
		}
		if err := raft.BootstrapCluster(rc, w, w, snaps, fenced, conf); err != nil {
			return fail(fmt.Errorf("cluster: bootstrap: %w", err))
		}
	}
	// Replication reads the entries it sends back from the log store; the
	// cache keeps the newest in memory, decoded, as Consul and Nomad do.
	logs, err := raft.NewLogCache(logCacheEntries, w)
	if err != nil {
		return fail(fmt.Errorf("cluster: %w", err))
	}
	if has {
		// A node that restarts does not vote for a lease: the lead it
		// confirmed before it died may still be in force, and a vote now
		// could elect a second leader inside that lease.
		time.Sleep(leaseOf(cfg.HeartbeatTimeout))
	}
	r, err := raft.NewRaft(rc, fsm, logs, w, snaps, fenced)
	if err != nil {
		return fail(fmt.Errorf("cluster: %w", err))
	}
	rp.Store(r)
	nd := &Node{Raft: r, FSM: fsm, cfg: cfg, wal: w, trans: fenced, fenced: fenced, links: links, leading: leading, Fresh: !has, m: m}
	// raft hands the FSM the configurations it commits from here on; the
	// latest snapshot holds the one committed before.
	if metas, err := snaps.List(); err == nil && len(metas) > 0 {
		nd.mem.seen = metas[0].Configuration.Servers
	}
	nd.watchLeader()
	nd.watchMembers()
	return nd, nil
}

// The network transport speaks pre-vote (rc.PreVoteDisabled above).
var _ raft.WithPreVote = (*raft.NetworkTransport)(nil)

// advertised is the raft listener with the address the other nodes reach
// it at (--raft), which raft puts in its messages.
type advertised struct {
	net.Listener
	addr net.Addr
}

func (a advertised) Addr() net.Addr { return a.addr }

// memberHosts are the hosts of the group's raft addresses: raft's latest
// configuration, or before raft runs, the bootstrap members'.
func memberHosts(r *raft.Raft, bootstrap []Member) []string {
	var addrs []string
	if r != nil {
		for _, s := range r.GetConfiguration().Configuration().Servers {
			addrs = append(addrs, string(s.Address))
		}
	} else {
		for _, m := range bootstrap {
			addrs = append(addrs, m.Raft)
		}
	}
	hosts := make([]string, 0, len(addrs))
	for _, a := range addrs {
		if h, _, err := net.SplitHostPort(a); err == nil {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

// ReverifyLinks closes the links between nodes whose peer's certificate
// no longer verifies against the TLS files loaded last (after SIGHUP), and
// returns how many it closed.
func (n *Node) ReverifyLinks() int {
	if n.links == nil {
		return 0
	}
	return n.links.Reverify()
}

// AwaitLeadership waits until this node leads and has applied every entry
// committed before its term (a barrier), and returns the journal to give
// the engine and the state to load it from. A node deposed before then
// has served nothing, so it goes back to waiting rather than failing.
func (n *Node) AwaitLeadership(ctx context.Context) (*Journal, error) {
	var start int64
	for {
		for n.Raft.State() != raft.Leader {
			select {
			case <-n.leading:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		term := n.Raft.CurrentTerm()
		err := n.Raft.Barrier(0).Error()
		if err == nil {
			if start, err = n.confirmRound(); err == nil {
				if n.Raft.CurrentTerm() == term {
					n.leadTerm.Store(term)
					break
				}
				continue // led again in a later term: its barrier is still to come
			}
		}
		// Deposed before serving anything: wait to lead again.
		if !errors.Is(err, raft.ErrLeadershipLost) && !errors.Is(err, raft.ErrNotLeader) {
			return nil, fmt.Errorf("cluster: taking the lead: %w", err)
		}
	}
	n.handingOver.Store(false)
	n.confirmed.Store(start)
	go n.confirmLead(n.leadTerm.Load())
	jl := newJournal(n.Raft, n.m.apply)
	lent := jl.Lent
	n.FSM.lent.Store(&lent)
	return jl, nil
}

// confirmRound asks a majority whether this node still leads (raft's
// VerifyLeader: one heartbeat round) until the answers of a majority are to
// RPCs sent after the round began, and returns when (boottime) that round
// began. It fails once raft says the node no longer leads.
func (n *Node) confirmRound() (int64, error) {
	for {
		start := boottime()
		if err := n.Raft.VerifyLeader().Error(); err != nil {
			return 0, err
		}
		if n.heardSince(start) {
			return start, nil
		}
	}
}

// heardSince reports whether a majority of the group's voters answered
// RPCs this node sent at since or later.
func (n *Node) heardSince(since int64) bool {
	return n.fenced.ackedSince(raft.ServerID(n.cfg.ID), n.voters(), since)
}

// voters are the group's voters.
func (n *Node) voters() []raft.ServerID {
	var voters []raft.ServerID
	for _, s := range n.Raft.GetConfiguration().Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, s.ID)
		}
	}
	return voters
}

// confirmLead confirms the lead of term over and over, and records when
// the last confirmed round started (a round that started before fenceAfter
// does not count). It stops once the node no longer leads in term.
//
// A round starts every tenth of a heartbeat timeout, whether the rounds
// before it have ended or not, and lasts until a majority answered RPCs
// sent after it began, or until the lease it would confirm has run out.
// raft's VerifyLeader returns on any answer that comes after it was asked,
// and while entries are replicated that is mostly the answer to an RPC
// sent before the round: a round that ended there confirmed nothing, and a
// leader whose peers answer late (busy or starved, as on a loaded machine)
// lapsed its lease again and again. Its own RPCs' answers come, on such a
// machine, later than the next round would start.
func (n *Node) confirmLead(term uint64) {
	every, lease := n.cfg.HeartbeatTimeout/10, int64(leaseOf(n.cfg.HeartbeatTimeout))
	for n.Raft.State() == raft.Leader && n.Raft.CurrentTerm() == term {
		start := boottime()
		go func() {
			if n.Raft.VerifyLeader().Error() == nil &&
				n.fenced.awaitAckedSince(raft.ServerID(n.cfg.ID), n.voters(), start, start+lease) &&
				start > n.fenceAfter.Load() && n.Raft.CurrentTerm() == term {
				n.confirm(start)
			}
		}()
		time.Sleep(every)
	}
}

// confirm records that a round that began at start (boottime) confirmed
// the lead, unless a later round did already.
func (n *Node) confirm(start int64) {
	for {
		t := n.confirmed.Load()
		if start <= t || n.confirmed.CompareAndSwap(t, start) {
			return
		}
	}
}

// leaseOf is how long a confirmed round lets a leader answer: shorter than
// the heartbeat timeout after which a follower may start an election (and
// raft waits at least that long).
func leaseOf(heartbeat time.Duration) time.Duration { return heartbeat * 3 / 4 }

// Leads reports whether a majority confirmed this node's lead in a round
// that started less than a lease ago (leaseOf), by RPCs sent after the
// round began (fence.go), and raft still has it lead in the term it took
// the lead in. While it holds no other node can lead; a process stopped
// (SIGSTOP), starved or suspended past it answers false when it resumes,
// before raft itself has noticed. The clock is CLOCK_BOOTTIME, which runs
// on through a host's suspend.
func (n *Node) Leads() bool {
	if n.handingOver.Load() {
		return false
	}
	t := n.confirmed.Load()
	if t == 0 || t <= n.fenceAfter.Load() || boottime()-t >= int64(leaseOf(n.cfg.HeartbeatTimeout)) {
		return false
	}
	return n.Raft.State() == raft.Leader && n.Raft.CurrentTerm() == n.leadTerm.Load()
}

// MayLeadAgain reports whether raft still has this node lead in the term
// it took the lead in, with no transfer of the lead under way: a round that
// confirms the lead may yet come, and Leads answer true again. While it
// holds, a leader whose lease lapsed waits for that round rather than
// closing its clients' connections.
func (n *Node) MayLeadAgain() bool {
	return !n.handingOver.Load() && n.Raft.State() == raft.Leader && n.Raft.CurrentTerm() == n.leadTerm.Load()
}

// Announce tells every node where this leader's clients connect, in
// plaintext and over TLS ("" for a listener it does not have): a follower
// forwards its clients' connections there.
func (n *Node) Announce(client, tlsClient string) error {
	a := n.cfg.ID + "\x00" + client
	if tlsClient != "" {
		a += "\x00" + tlsClient
	}
	return n.Raft.Apply(append([]byte{entryLeader}, a...), 10*time.Second).Error()
}

// LeaderClient is the client address, plaintext or TLS, of the node that
// leads now, or "" while there is none, it has not announced itself yet,
// it is this node, or it has no such listener.
func (n *Node) LeaderClient(tls bool) string {
	id, client, tlsClient := n.announced()
	if id == n.cfg.ID {
		return ""
	}
	if tls {
		return tlsClient
	}
	return client
}

// ServingAddr is where the group's leader, this node or another, serves
// its clients as it announced: "" until the leader raft knows of has.
func (n *Node) ServingAddr() string {
	_, client, _ := n.announced()
	return client
}

// announced is the leader's announcement (Announce), if the leader raft
// knows of made it; "" ids otherwise.
func (n *Node) announced() (id, client, tlsClient string) {
	_, leader := n.Raft.LeaderWithID()
	id, client, tlsClient = n.FSM.Leader()
	if leader == "" || string(leader) != id {
		return "", "", ""
	}
	return id, client, tlsClient
}

// LostLeadership is closed once this node no longer leads in the term
// AwaitLeadership returned in. raft's notifications only wake it: those
// of a term it lost before it could serve may still be buffered.
func (n *Node) LostLeadership() <-chan struct{} {
	lost := make(chan struct{})
	go func() {
		for n.Raft.State() == raft.Leader && n.Raft.CurrentTerm() == n.leadTerm.Load() {
			<-n.leading
		}
		close(lost)
	}()
	return lost
}

// StepDown ends a term this node led: jl, the journal AwaitLeadership
// returned, refuses every later record and stops, and the state takes no
// more bodies from it. raft goes on: the node follows, votes, and may
// lead again (AwaitLeadership).
func (n *Node) StepDown(jl *Journal) {
	n.FSM.lent.Store(nil)
	jl.Close()
}

// closeWait bounds Close's wait for raft to stop.
const closeWait = 5 * time.Second

// Close leaves raft running no more and closes the stores. raft's stop
// waits for every goroutine of its own, one of which may be writing to a
// peer that does not answer; past closeWait, Close gives up and leaves the
// stores open (raft may still write them) for the process's exit to end.
func (n *Node) Close() error {
	done := make(chan error, 1)
	go func() { done <- n.Raft.Shutdown().Error() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(closeWait):
		return fmt.Errorf("cluster: raft did not stop within %v", closeWait)
	}
	if c, ok := n.trans.(io.Closer); ok {
		_ = c.Close()
	}
	if n.links != nil && n.cfg.links == nil { // the node opened the port
		_ = n.links.Close()
	}
	if cerr := n.wal.Close(); err == nil {
		err = cerr
	}
	return err
}
