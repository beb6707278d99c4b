package engine

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/beanpole/beanpole/codec"
)

func tubeWaiting(t *testing.T, e *Engine, name string) uint64 {
	t.Helper()
	var st codec.TubeStats
	if !e.StatsTube([]byte(name), &st) {
		t.Fatalf("no tube %s", name)
	}
	return st.CurrentWaiting
}

// TestReviewClaimOfClosingClientLeavesStaleNodes replays this interleaving:
// Close has set c.closed (under c.mu) but not yet tried its CAS, while a put
// on another loop runs serveWaiters, wins claim(gen, woke), then sees
// c.closed and skips the client *without* calling finishWait. Close's CAS
// then fails (state is woke, not waiting), so nobody unlinks c's nodes on
// its other watched tubes: stats-tube current-waiting stays inflated and the
// closed Client stays reachable from the tube's queue.
func TestReviewClaimOfClosingClientLeavesStaleNodes(t *testing.T) {
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

// TestReviewCloseVsPutStress is the same race without simulation: a parked
// client watching two tubes closes while a put lands on one of them.
func TestReviewCloseVsPutStress(t *testing.T) {
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

// TestMultiTubeReserveNeverPassesOverAnUrgentReadyJob: a reserve watching
// several tubes takes the most urgent ready job of one instant, deciding on
// all their tops together (take holds every watched tube's lock), even
// while other clients move jobs in and out of those tubes and change their
// priorities. Two jobs at priority 0 or 1 take turns being reserved by a
// mutator, which releases one before reserving the other, so at every
// instant one of them is ready (or held by the reserving client itself,
// which releases it before its next reserve); 40 more watched tubes hold a
// job at priority 1000 each. A reserve that compared tubes' tops read at
// different instants could see neither urgent job and take a 1000 (or time
// out). Run with -race it also checks that priorities are read under lock.
func TestMultiTubeReserveNeverPassesOverAnUrgentReadyJob(t *testing.T) {
	e := New(3)
	p, _ := newTestClient(e, 1)
	var urgent [2]*Tube
	for k, name := range []string{"x1", "x2"} {
		p.Use([]byte(name))
		urgent[k] = put(t, p, 0, 0, name).Tube
	}
	a, _ := newTestClient(e, 2)
	a.Watch([]byte("x1"))
	a.Watch([]byte("x2"))
	for i := range 40 {
		n := []byte{'y', byte('a' + i%26), byte('a' + i/26)}
		p.Use(n)
		put(t, p, 1000, 0, "y")
		a.Watch(n)
	}
	a.Ignore([]byte("default"))
	var m [2]*Client
	for k, name := range []string{"x1", "x2"} {
		m[k], _ = newTestClient(e, 3)
		m[k].Watch([]byte(name))
		m[k].Ignore([]byte("default"))
	}
	var held [2]*Job
	if j, o := m[1].Reserve(e.Now(), 0); o == GotJob {
		held[1] = j
	} else {
		t.Fatal("the mutator's first reserve")
	}

	const rounds = 20000
	var stop atomic.Bool
	var swaps, reserves atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; !stop.Load(); i++ {
			k := i % 2 // m[k] gives its job back, then m[1-k] takes the other
			if held[k] != nil {
				m[k].Release(held[k].ID, uint32(i/2%2), 0)
				held[k] = nil
			}
			if held[1-k] == nil {
				if j, o := m[1-k].Reserve(e.Now(), 0); o == GotJob {
					held[1-k] = j
				}
			}
			swaps.Add(1)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for (swaps.Load() < rounds || reserves.Load() < rounds) && time.Now().Before(deadline) {
		j, o := a.Reserve(e.Now(), 0)
		if o != GotJob {
			stop.Store(true)
			<-done
			t.Fatalf("reserve %d: %v with an urgent job ready throughout", reserves.Load(), o)
		}
		if j.Tube != urgent[0] && j.Tube != urgent[1] {
			stop.Store(true)
			<-done
			t.Fatalf("reserve %d took job %d of %s at priority %d with an urgent job ready throughout",
				reserves.Load(), j.ID, j.Tube.Name, j.Pri)
		}
		a.Release(j.ID, 0, 0)
		reserves.Add(1)
	}
	stop.Store(true)
	<-done
	t.Logf("%d reserves beside %d mutator rounds", reserves.Load(), swaps.Load())
}

// lcg is a small deterministic random source for one test goroutine:
// rnd(n) is in [0, n).
func lcg(seed uint32) func(n uint32) uint32 {
	return func(n uint32) uint32 { seed = seed*1664525 + 1013904223; return (seed >> 8) % n }
}

// TestReviewInvariantsUnderChurn hammers the engine from several goroutines
// (puts, parked and timed reserves, release with new pri/delay, bury, kick,
// delete, watch/ignore, close and reconnect), then quiesces and checks that
// the global gauges agree with the per-tube counts and with the heaps.
func TestReviewInvariantsUnderChurn(t *testing.T) {
	e := New(4)
	tubes := [][]byte{[]byte("default"), []byte("a"), []byte("b")}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := lcg(uint32(g*7919 + 1))
			c, ch := newTestClient(e, 1+g)
			var held []uint64
			for !stop.Load() {
				switch rnd(12) {
				case 0, 1:
					c.Use(tubes[rnd(3)])
					c.Put(e.Now(), e.NextID(), 1000+rnd(50), time.Duration(rnd(2))*time.Millisecond*time.Duration(rnd(5)), time.Second, []byte("x\r\n"))
				case 2, 3:
					j, o := c.Reserve(c.e.Now(), time.Duration(rnd(3))*time.Millisecond)
					if o == Parked {
						select {
						case <-ch:
							j, o = c.TakeWakeup()
						case <-time.After(10 * time.Second):
							t.Error("parked reserve never answered")
							return
						}
					}
					if o == GotJob {
						held = append(held, j.ID)
					}
				case 4:
					if len(held) > 0 {
						c.Release(held[0], 1000+rnd(50), time.Duration(rnd(2))*time.Millisecond)
						held = held[1:]
					}
				case 5:
					if len(held) > 0 {
						c.Bury(held[0], rnd(2000))
						held = held[1:]
					}
				case 6:
					if len(held) > 0 {
						c.Delete(c.e.Now(), held[0])
						held = held[1:]
					}
				case 7:
					c.Use(tubes[rnd(3)])
					c.Kick(rnd(4))
				case 8:
					c.Watch(tubes[rnd(3)])
				case 9:
					c.Ignore(tubes[rnd(3)])
				case 10:
					if rnd(4) == 0 {
						c.Close()
						c, ch = newTestClient(e, 1+g)
						held = held[:0]
					}
				case 11:
					for _, id := range held {
						c.Touch(id)
					}
				}
			}
			c.Close()
		}()
	}
	time.Sleep(2 * time.Second)
	stop.Store(true)
	wg.Wait()
	awaitNoDelayed(t, e, 10*time.Second) // 0-4 ms delays

	var gs codec.ServerStats
	e.Stats(&gs)
	var sum [Deleted]int64
	var urgentSum, urgentReal int64
	for _, name := range e.AppendTubeNames(nil) {
		tb := e.reg.lookup(name)
		tb.mu.Lock()
		for s := Ready; s < Deleted; s++ {
			sum[s] += tb.count[s]
		}
		if int64(tb.ready.Len()) != tb.count[Ready] || int64(tb.delay.Len()) != tb.count[Delayed] || int64(tb.ttr.Len()) != tb.count[Reserved] {
			t.Errorf("tube %s: heaps %d/%d/%d vs counts %v", name, tb.ready.Len(), tb.delay.Len(), tb.ttr.Len(), tb.count)
		}
		for _, j := range tb.ready.items {
			if urgent(j.Pri) {
				urgentReal++
			}
		}
		urgentSum += tb.urgent
		if tb.waiters.n != 0 {
			t.Errorf("tube %s: %d waiters left with every client closed", name, tb.waiters.n)
		}
		tb.mu.Unlock()
	}
	if int64(gs.CurrentJobsReady) != sum[Ready] || int64(gs.CurrentJobsReserved) != sum[Reserved] ||
		int64(gs.CurrentJobsDelayed) != sum[Delayed] || int64(gs.CurrentJobsBuried) != sum[Buried] {
		t.Errorf("global %d/%d/%d/%d vs tubes %v", gs.CurrentJobsReady, gs.CurrentJobsReserved, gs.CurrentJobsDelayed, gs.CurrentJobsBuried, sum)
	}
	if sum[Reserved] != 0 {
		t.Errorf("%d jobs still reserved after every client closed", sum[Reserved])
	}
	if int64(gs.CurrentJobsUrgent) != urgentSum || urgentSum != urgentReal {
		t.Errorf("urgent: global %d, tubes %d, real %d", gs.CurrentJobsUrgent, urgentSum, urgentReal)
	}
	if gs.CurrentWaiting != 0 || gs.CurrentConnections != 0 {
		t.Errorf("current-waiting %d, current-connections %d", gs.CurrentWaiting, gs.CurrentConnections)
	}
}

// TestReviewDelayedTimerNeverLost: concurrent puts with short, varied delays
// race schedule() against fire(); every delayed job must be promoted soon
// after its deadline (within 10 s: a lost timer never fires).
func TestReviewDelayedTimerNeverLost(t *testing.T) {
	e := New(4)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _ := newTestClient(e, 1+g)
			seed := uint32(g + 1)
			for range 400 {
				seed = seed*1664525 + 1013904223
				d := time.Duration(1+(seed>>8)%20) * time.Millisecond
				c.Put(e.Now(), e.NextID(), 0, d, time.Second, []byte("x\r\n"))
				if seed%8 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	awaitNoDelayed(t, e, 10*time.Second)
	var st codec.TubeStats
	e.StatsTube([]byte("default"), &st)
	if st.CurrentJobsDelayed != 0 || st.CurrentJobsReady != 1600 {
		t.Fatalf("%d delayed jobs, %d ready, of 1600", st.CurrentJobsDelayed, st.CurrentJobsReady)
	}
}

// TestReviewZeroTimeoutInsideMarginIsDeadlineSoon: holding a job inside its
// safety margin, with the only ready job in a paused watched tube (so the
// "any ready" check lets the reserve proceed), reserve-with-timeout 0 must
// end like upstream's timer does: inside the margin → DEADLINE_SOON (the
// third step of upstream's reserve), not TIMED_OUT.
func TestReviewZeroTimeoutInsideMarginIsDeadlineSoon(t *testing.T) {
	e := New(1)
	c, _ := newTestClient(e, 1)
	c.Put(e.Now(), e.NextID(), 0, 0, time.Second, []byte("a\r\n")) // ttr 1 s: in the margin at once
	if _, o := c.Reserve(c.e.Now(), 0); o != GotJob {
		t.Fatal("reserve")
	}
	c.Use([]byte("p"))
	c.Watch([]byte("p"))
	put(t, c, 0, 0, "b")
	e.PauseTube([]byte("p"), 100*time.Second)
	if _, o := c.Reserve(c.e.Now(), 0); o != DeadlineSoon {
		t.Fatalf("reserve-with-timeout 0 inside the margin: outcome %v, want DeadlineSoon (%v)", o, DeadlineSoon)
	}
}
