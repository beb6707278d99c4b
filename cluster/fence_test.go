package cluster

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// pausable is a node's transport whose answers the test can hold, as a
// paused process leaves them unread: the RPCs it is asked for are sent,
// and their answers held until released.
type pausable struct {
	*raft.InmemTransport
	mu   sync.Mutex
	gate chan struct{} // nil: not holding answers
	held atomic.Int64  // answers held so far
}

func newPausable(tr *raft.InmemTransport) *pausable {
	return &pausable{InmemTransport: tr}
}

// AppendEntriesPipeline: every append goes through AppendEntries, so that
// its answer can be held.
func (p *pausable) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

func (p *pausable) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := p.InmemTransport.AppendEntries(id, target, args, resp)
	p.mu.Lock()
	gate := p.gate
	p.mu.Unlock()
	if gate != nil {
		p.held.Add(1)
		<-gate
	}
	return err
}

// hold holds every answer from now on.
func (p *pausable) hold() {
	p.mu.Lock()
	p.gate = make(chan struct{})
	p.mu.Unlock()
}

// resume passes everything again.
func (p *pausable) resume() {
	p.mu.Lock()
	if p.gate != nil {
		close(p.gate)
	}
	p.gate = nil
	p.mu.Unlock()
}

// releaseHeld hands raft the answers held so far (to RPCs sent before
// the pause), and goes on holding later ones.
func (p *pausable) releaseHeld() {
	p.mu.Lock()
	close(p.gate)
	p.gate = make(chan struct{})
	p.mu.Unlock()
}

// raft's VerifyLeader counts the answer to an RPC sent before it was
// asked, as a leader resuming from a pause reads the answers that waited
// for it; the lease must not: only answers to RPCs sent after a round began
// confirm it.
func TestLeaseIsNotConfirmedByAnswersSentBeforeItsRound(t *testing.T) {
	var ps []*pausable
	// A long heartbeat timeout, so that raft's own lease check (half of
	// it) does not depose the leader while its answers are held.
	g := newGroupOver(t, 3, 4*time.Second, func(_ int, tr *raft.InmemTransport) raft.Transport {
		p := newPausable(tr)
		ps = append(ps, p)
		return p
	})
	// raft may still depose the leader while its answers are held (its own
	// lease check, on a starved machine): the property is about a round
	// raft confirms, so such a try is made again.
	for try := 1; ; try++ {
		old, _ := g.leader()
		var p *pausable
		for i, nd := range g.nodes {
			if nd == old {
				p = ps[i]
			}
		}
		waitUntil(t, "the leader's lease", old.Leads)
		p.hold()
		before := p.held.Load()
		waitUntil(t, "heartbeats' answers held", func() bool { return p.held.Load() >= before+2 })
		start := boottime()
		verify := old.Raft.VerifyLeader()
		p.releaseHeld() // answers to RPCs sent before start; later ones are held
		err := verify.Error()
		if err == nil && old.heardSince(start) {
			t.Fatal("answers to RPCs sent before the round confirmed it")
		}
		p.resume()
		if err != nil {
			if try == 5 {
				t.Fatalf("VerifyLeader: %v, 5 times", err)
			}
			continue
		}
		waitUntil(t, "answers to RPCs sent after the round", func() bool { return old.heardSince(start) })
		return
	}
}

// restartable is a peer's raft transport that can die and come back on
// the same address, as a node killed and restarted does: its end of every
// connection it accepted is closed with it.
type restartable struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (r *restartable) Accept() (net.Conn, error) {
	c, err := r.Listener.Accept()
	if err == nil {
		r.mu.Lock()
		r.conns = append(r.conns, c)
		r.mu.Unlock()
	}
	return c, err
}

func (r *restartable) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
	return r.Listener.Close()
}

func (r *restartable) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(addr), timeout)
}

// voter starts a transport on addr that grants every vote and pre-vote it
// is asked for, and returns the function that kills it.
func voter(t *testing.T, addr string) (net.Addr, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	tr := raft.NewNetworkTransport(&restartable{Listener: ln}, 1, 5*time.Second, io.Discard)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case rpc := <-tr.Consumer():
				switch rpc.Command.(type) {
				case *raft.RequestVoteRequest:
					rpc.Respond(&raft.RequestVoteResponse{Granted: true}, nil)
				case *raft.RequestPreVoteRequest:
					rpc.Respond(&raft.RequestPreVoteResponse{Granted: true}, nil)
				default:
					rpc.Respond(nil, errors.New("not a vote"))
				}
			}
		}
	}()
	return ln.Addr(), func() { close(done); tr.Close() }
}

func TestVoteIsAskedAgainWhenItsPooledConnectionDiedWithItsPeer(t *testing.T) {
	addr, kill := voter(t, "127.0.0.1:0")
	asker, err := raft.NewTCPTransport("127.0.0.1:0", nil, linkPool, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer asker.Close()
	f := newFencedTransport(asker, time.Minute)
	target := raft.ServerAddress(addr.String())
	vote := func() error {
		var resp raft.RequestVoteResponse
		err := f.RequestVote("peer", target, &raft.RequestVoteRequest{Term: 2}, &resp)
		if err == nil && !resp.Granted {
			err = errors.New("vote not granted")
		}
		return err
	}
	preVote := func() error {
		var resp raft.RequestPreVoteResponse
		err := f.RequestPreVote("peer", target, &raft.RequestPreVoteRequest{Term: 2}, &resp)
		if err == nil && !resp.Granted {
			err = errors.New("pre-vote not granted")
		}
		return err
	}
	for _, ask := range []func() error{vote, preVote} {
		if err := ask(); err != nil { // leaves a connection in the pool
			t.Fatal(err)
		}
		kill()
		addr, kill = voter(t, addr.String())
		if err := ask(); err != nil {
			t.Fatalf("a vote asked of a restarted peer failed: %v", err)
		}
	}
	kill()
}

// late is a node's transport whose answers to appends all come late, as a
// busy or starved peer's do; while entries are replicated an answer is
// always on its way, to an RPC sent before any round of the lease began.
type late struct {
	*raft.InmemTransport
	by time.Duration
}

// AppendEntriesPipeline: every append goes through AppendEntries, so that
// its answer comes late.
func (l *late) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

func (l *late) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := l.InmemTransport.AppendEntries(id, target, args, resp)
	time.Sleep(l.by)
	return err
}

// A leader whose peers all answer late, while it replicates entries, keeps
// its lease: raft's VerifyLeader returns on the answer to an RPC sent before
// the round, which does not confirm it, and the round waits for the answers
// to its own RPCs, which come at most two delays after it began, well
// within the lease. A round that gave up there lapsed the lease again and
// again, and a leader that lapses closes the connections whose replies it
// may no longer send.
func TestLeaseHoldsWhileEveryAnswerComesLate(t *testing.T) {
	const by = 100 * time.Millisecond
	g := newGroupOver(t, 3, 0, func(_ int, tr *raft.InmemTransport) raft.Transport { return &late{InmemTransport: tr, by: by} })
	leader, jl := g.leader()
	stop := make(chan struct{})
	var puts sync.WaitGroup
	puts.Add(1)
	go func() { // an entry always on its way
		defer puts.Done()
		for id := uint64(1); ; id++ {
			a := newAcks(1)
			if jl.Put(job(id), a.ack(0)) != nil {
				return
			}
			select {
			case <-a.all:
			case <-stop:
				return
			}
		}
	}()
	defer func() { close(stop); puts.Wait() }()
	// Over 3 s of the lead, the share of the time the lease lapsed; the
	// lease is 375 ms and a round's own answers come within 2 × 100 ms
	// (plus what a loaded machine adds), so it should not lapse at all.
	var lapsed, watched time.Duration
	last := time.Now()
	for watched < 3*time.Second {
		time.Sleep(5 * time.Millisecond)
		now := time.Now()
		if leader.Raft.State() != raft.Leader {
			t.Skip("the leader was deposed meanwhile (a starved machine): the lease is not what is tested then")
		}
		if !leader.Leads() {
			lapsed += now.Sub(last)
		}
		watched += now.Sub(last)
		last = now
	}
	if share := float64(lapsed) / float64(watched); share > 0.1 {
		t.Fatalf("the lease lapsed %v of %v (%.0f%%) while every answer came %v late", lapsed, watched, 100*share, by)
	}
}
