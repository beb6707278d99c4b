package cluster

import (
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"golang.org/x/sys/unix"
)

// The leader's lease (Node.Leads) rests on proof that a majority heard from
// this leader after the lease began. raft's VerifyLeader is not that proof
// alone: it counts any successful answer that arrives after it is asked,
// including the answer to an RPC sent before a pause (SIGSTOP, a stalled
// host), which says nothing of what the followers did since. So every RPC
// whose success raft counts (AppendEntries, plain or pipelined, and
// InstallSnapshot) is timed here when it is sent, and a round of
// VerifyLeader confirms the lease only if a majority answered RPCs sent
// after the round began (ackedSince).

// boottime is CLOCK_BOOTTIME in nanoseconds: monotonic like Go's clock, but
// counting the time a host spends suspended, which CLOCK_MONOTONIC does not
// (a lease taken before a suspend must have run out after it).
func boottime() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	return ts.Nano()
}

// fencedTransport is the node's raft transport with the send time of the
// newest RPC each peer answered with success.
type fencedTransport struct {
	raft.Transport
	// round is how long a candidate's election round lasts at least:
	// how long asking again for a vote can still win that round.
	round time.Duration
	mu    sync.Mutex
	acked map[raft.ServerID]int64 // boottime
	// news, when not nil, is closed at the next ack: awaitAckedSince
	// waits on it.
	news chan struct{}
}

func newFencedTransport(t raft.Transport, round time.Duration) *fencedTransport {
	return &fencedTransport{Transport: t, round: round, acked: map[raft.ServerID]int64{}}
}

func (f *fencedTransport) ack(id raft.ServerID, sent int64) {
	f.mu.Lock()
	if sent > f.acked[id] {
		f.acked[id] = sent
		if f.news != nil {
			close(f.news)
			f.news = nil
		}
	}
	f.mu.Unlock()
}

// ackedSince reports whether a majority of voters, this node counted, has
// answered with success an RPC sent at since or later.
func (f *fencedTransport) ackedSince(self raft.ServerID, voters []raft.ServerID, since int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ackedSinceLocked(self, voters, since)
}

func (f *fencedTransport) ackedSinceLocked(self raft.ServerID, voters []raft.ServerID, since int64) bool {
	n := 0
	for _, id := range voters {
		if id == self || f.acked[id] >= since {
			n++
		}
	}
	return 2*n > len(voters)
}

// awaitAckedSince waits until ackedSince holds, and reports true, or until
// until (boottime) has passed, and reports false.
func (f *fencedTransport) awaitAckedSince(self raft.ServerID, voters []raft.ServerID, since, until int64) bool {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		f.mu.Lock()
		if f.ackedSinceLocked(self, voters, since) {
			f.mu.Unlock()
			return true
		}
		left := time.Duration(until - boottime())
		if left <= 0 {
			f.mu.Unlock()
			return false
		}
		if f.news == nil {
			f.news = make(chan struct{})
		}
		news := f.news
		f.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(left)
		} else {
			timer.Reset(left)
		}
		select {
		case <-news:
		case <-timer.C:
		}
	}
}

func (f *fencedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	sent := boottime()
	err := f.Transport.AppendEntries(id, target, args, resp)
	if err == nil && resp.Success {
		f.ack(id, sent)
	}
	return err
}

func (f *fencedTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	sent := boottime()
	err := f.Transport.InstallSnapshot(id, target, args, resp, data)
	if err == nil && resp.Success {
		f.ack(id, sent)
	}
	return err
}

// AppendEntriesPipeline wraps the transport's pipeline so that its answers
// are timed too: each by the time its request was sent.
func (f *fencedTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := f.Transport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	fp := &fencedPipeline{AppendPipeline: p, f: f, id: id, out: make(chan raft.AppendFuture, cap(p.Consumer())),
		sent: make(chan int64, 1024), done: make(chan struct{})}
	go fp.relay()
	return fp, nil
}

// RequestPreVote passes pre-vote on (raft turns it off for a transport
// that does not speak it).
func (f *fencedTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return f.askAgain(func() error { return f.Transport.(raft.WithPreVote).RequestPreVote(id, target, args, resp) })
}

func (f *fencedTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return f.askAgain(func() error { return f.Transport.RequestVote(id, target, args, resp) })
}

// linkPool is how many idle connections the network transport keeps to
// each peer.
const linkPool = 3

// askAgain asks for a vote, and again while it fails, at most once more
// per pooled connection and only while the round it is for lasts. A vote
// asked over a pooled connection whose peer restarted, or whose link was
// cut and mended, fails at once (the peer's end was closed while the
// connection idled), and the transport drops that connection; raft would
// count the vote as lost and campaign again only after another election
// timeout, which after a leader's death costs the group a second or more
// without a leader. Asking twice is safe: a node grants one candidate per
// term, and grants it again when asked again.
func (f *fencedTransport) askAgain(ask func() error) error {
	start := time.Now()
	err := ask()
	for i := 0; err != nil && i < linkPool && time.Since(start) < f.round; i++ {
		err = ask()
	}
	return err
}

// Close closes the transport underneath.
func (f *fencedTransport) Close() error {
	if c, ok := f.Transport.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}

// fencedPipeline relays the pipeline's answers to raft, timing each
// success by its request's send time before raft counts it.
type fencedPipeline struct {
	raft.AppendPipeline
	f    *fencedTransport
	id   raft.ServerID
	out  chan raft.AppendFuture
	sent chan int64 // the send times of the requests in flight, in order
	done chan struct{}
	once sync.Once
}

func (p *fencedPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	sent := boottime()
	fut, err := p.AppendPipeline.AppendEntries(args, resp)
	if err == nil {
		p.sent <- sent
	}
	return fut, err
}

func (p *fencedPipeline) Consumer() <-chan raft.AppendFuture { return p.out }

// relay ends when the pipeline closes.
func (p *fencedPipeline) relay() {
	for {
		var fut raft.AppendFuture
		select {
		case fut = <-p.AppendPipeline.Consumer():
		case <-p.done:
			return
		}
		select {
		case sent := <-p.sent:
			if fut.Error() == nil && fut.Response().Success {
				p.f.ack(p.id, sent)
			}
		case <-p.done:
			return
		}
		select {
		case p.out <- fut:
		case <-p.done:
			return
		}
	}
}

func (p *fencedPipeline) Close() error {
	p.once.Do(func() { close(p.done) })
	return p.AppendPipeline.Close()
}
