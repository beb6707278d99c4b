package e2e

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Clients of a follower cannot take the descriptors raft needs. Each
// forwarded client costs the follower two (its connection and the one to
// the leader). With a low open-file limit and more clients than that,
// reconnecting whenever they are closed as client libraries do, clients
// past the forwarder's share are closed as soon as accepted, and the
// follower keeps at least half its reserve free whoever connects (the
// HTTP side may take the other half). The leader is then killed, which
// closes every forwarded connection at once and brings every client
// back: the group still elects a new leader (the flooded follower voting
// or leading; the winner has committed its announcement), the flooded
// node does not exit, and once the clients leave, a put through its peer
// is acknowledged and served through it.
func TestClusterFollowerKeepsDescriptorsForRaft(t *testing.T) {
	t.Parallel()
	tc := startTestCluster(t, 3)
	lead := tc.agreedLeader()
	flooded := tc.other(lead)
	peer := tc.other(lead, flooded)
	const nofile = 256
	// Free for raft whoever connects: half of the 128 descriptors kept
	// back (docs/limits.md).
	const raftFree = 64
	pid := flooded.srv.pid()
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: nofile, Max: nofile}, nil); err != nil {
		t.Skipf("prlimit: %v", err)
	}

	f := startFlood(flooded.srv.addr, nofile+64)
	defer f.close()
	most := f.untilShed(t, flooded.srv, nofile+64, 30*time.Second)
	shed := f.shed.Load()
	refused := tc.status(flooded).ForwardRefused
	t.Logf("before the leader's death: %d clients forwarded, %d shed (%d counted by the node); at most %d of %d descriptors open",
		f.served.Load(), shed, refused, most, nofile)
	if most > nofile-raftFree {
		t.Errorf("the flooded follower had %d of %d descriptors open: fewer than %d left for raft", most, nofile, raftFree)
	}
	if refused < uint64(shed) {
		t.Errorf("GET /cluster on the flooded follower: forward_refused %d, clients saw %d closed unanswered", refused, shed)
	}

	lead.srv.stop()
	next := tc.leader(lead)
	if exited(flooded.srv) {
		t.Fatalf("the flooded node exited: %v", flooded.srv.waitErr)
	}
	t.Logf("%s leads after kill -9 of the leader; %d clients forwarded or served, %d shed; %d of %d descriptors open",
		next.id, f.served.Load(), f.shed.Load(), procFDs(t, pid), nofile)
	f.close()
	id, took := putUntilInserted(t, peer.srv.addr, "after", 30*time.Second)
	t.Logf("put %d through %s acknowledged %v after the clients left", id, peer.id, took)
	want := fmt.Sprintf("FOUND %d 5\r\nafter\r\n", id)
	waitFor(t, 30*time.Second, "the put served through the flooded node", func() bool {
		return try(flooded.srv.addr, fmt.Sprintf("peek %d\r\n", id), 5*time.Second) == want
	})
	if exited(flooded.srv) {
		t.Fatalf("the flooded node exited: %v", flooded.srv.waitErr)
	}
	if n := strings.Count(flooded.srv.out.String(), "too many open files"); n > 0 {
		t.Errorf("the flooded node ran out of descriptors: %d log lines say so", n)
	}
}

// flood keeps n clients connected to addr. Each asks one question and
// then idles; a client whose connection closes connects again, at once
// if it was answered, after a pause if it was closed unanswered (shed),
// as a client library backs off a server that refuses it.
type flood struct {
	served, shed atomic.Int64
	stop         chan struct{}
	wg           sync.WaitGroup
	mu           sync.Mutex
	conns        map[net.Conn]struct{}
	closeOnce    sync.Once
}

const floodPause = 100 * time.Millisecond

// untilShed waits until some of the flood's clients were served and n
// were closed unanswered, s still running, and returns the most
// descriptors s held meanwhile, sampled at each poll.
func (f *flood) untilShed(t *testing.T, s *server, n int64, within time.Duration) (most int) {
	t.Helper()
	waitFor(t, within, "the flooded node to shed clients", func() bool {
		if exited(s) {
			t.Fatalf("the flooded node exited: %v", s.waitErr)
		}
		most = max(most, procFDs(t, s.pid()))
		return f.served.Load() > 0 && f.shed.Load() >= n
	})
	return most
}

func startFlood(addr string, n int) *flood {
	f := &flood{stop: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	f.wg.Add(n)
	for range n {
		go f.client(addr)
	}
	return f
}

func (f *flood) client(addr string) {
	defer f.wg.Done()
	buf := make([]byte, 64)
	for {
		nc, err := net.DialTimeout("tcp", addr, defaultTimeout)
		if err == nil && f.track(nc) {
			_, _ = nc.Write([]byte(listUsed))
			got := 0
			for {
				k, err := nc.Read(buf[got:])
				got += k
				if got == usingLen {
					f.served.Add(1)
				}
				if err != nil || got == len(buf) {
					break
				}
			}
			f.untrack(nc)
			if got > 0 {
				continue
			}
			f.shed.Add(1)
		}
		select {
		case <-f.stop:
			return
		case <-time.After(floodPause):
		}
	}
}

func (f *flood) track(nc net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conns == nil {
		nc.Close()
		return false
	}
	f.conns[nc] = struct{}{}
	return true
}

func (f *flood) untrack(nc net.Conn) {
	f.mu.Lock()
	delete(f.conns, nc)
	f.mu.Unlock()
	nc.Close()
}

// close ends every client and waits for them.
func (f *flood) close() {
	f.closeOnce.Do(func() {
		close(f.stop)
		f.mu.Lock()
		conns := f.conns
		f.conns = nil
		f.mu.Unlock()
		for nc := range conns {
			nc.Close()
		}
		f.wg.Wait()
	})
}
