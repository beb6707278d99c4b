package engine

import (
	"sync"
	"testing"
	"time"

	"github.com/beanpole/beanpole/codec"
)

// tubeWaiting is stats-tube current-waiting of the named tube.
func tubeWaiting(t *testing.T, e *Engine, name string) uint64 {
	t.Helper()
	var st codec.TubeStats
	if !e.StatsTube([]byte(name), &st) {
		t.Fatalf("no tube %s", name)
	}
	return st.CurrentWaiting
}

// TestCloseUnlinksAClientAPutClaimedFromEveryTube steps through Close
// against a put on another loop: Close has set c.closed (under c.mu) but
// not yet tried its CAS when the put's serveWaiters claims c's wait and,
// finding it closed, gives it no job. Close's own CAS then fails (the wait
// is no longer waiting), and still no node of c may stay queued on its
// other watched tubes: afterwards no tube counts a waiter and the closed
// Client is reachable from no queue.
func TestCloseUnlinksAClientAPutClaimedFromEveryTube(t *testing.T) {
	e := New(2)
	c, _ := newTestClient(e, 1)
	c.Watch([]byte("b"))
	if _, o := c.Reserve(c.e.Now(), -1); o != Parked {
		t.Fatal("should park")
	}
	if n := tubeWaiting(t, e, "default"); n != 1 {
		t.Fatalf("default current-waiting %d before", n)
	}
	// First step of Close, as Close does it.
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	// Another loop's put into b claims c and skips it.
	p, _ := newTestClient(e, 2)
	p.Use([]byte("b"))
	put(t, p, 0, 0, "x")
	// The rest of Close.
	c.Close()

	var st codec.ServerStats
	e.Stats(&st)
	if st.CurrentWaiting != 0 {
		t.Fatalf("global current-waiting %d", st.CurrentWaiting)
	}
	if n := tubeWaiting(t, e, "default"); n != 0 {
		t.Fatalf("default current-waiting %d after the only waiter closed: stale waitNode left linked", n)
	}
}

// TestCloseRacingAPutLeavesNoWaiter runs the interleaving above for real:
// a parked client watching two tubes closes while a put lands on one of
// them, and afterwards the other tube counts no waiter.
func TestCloseRacingAPutLeavesNoWaiter(t *testing.T) {
	e := New(2)
	p, _ := newTestClient(e, 2)
	p.Use([]byte("b"))
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		c, _ := newTestClient(e, 1)
		c.Watch([]byte("b"))
		if _, o := c.Reserve(c.e.Now(), -1); o != Parked {
			t.Fatal("should park")
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); put(t, p, 0, 0, "x") }()
		c.Close()
		wg.Wait()
		if n := tubeWaiting(t, e, "default"); n != 0 {
			t.Fatalf("iteration %d: default current-waiting %d with no client waiting", i, n)
		}
		// Drain b so the next iteration parks.
		d, _ := newTestClient(e, 2)
		d.Watch([]byte("b"))
		for {
			j, o := d.Reserve(d.e.Now(), 0)
			if o != GotJob {
				break
			}
			d.Delete(d.e.Now(), j.ID)
		}
		d.Close()
	}
}
