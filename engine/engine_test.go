package engine

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/beanpole/beanpole/codec"
)

// chanWaker records wake-ups like an event loop would, answering on the
// test's goroutine.
type chanWaker struct{ ch chan *Client }

func (w chanWaker) Wake(c *Client) { w.ch <- c }

func newTestClient(e *Engine, shard int) (*Client, chan *Client) {
	ch := make(chan *Client, 16)
	return e.NewClient(shard, chanWaker{ch}), ch
}

func put(t *testing.T, c *Client, pri uint32, delay time.Duration, body string) *Job {
	t.Helper()
	j, err := c.Put(c.e.Now(), c.e.NextID(), pri, delay, 10*time.Second, []byte(body+"\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func TestReserveOrderIsPriThenID(t *testing.T) {
	e := New(1)
	c, _ := newTestClient(e, 1)
	for _, p := range []uint32{5, 1, 5, 1, 0} {
		put(t, c, p, 0, "x")
	}
	var got []uint64
	for range 5 {
		j, o := c.Reserve(c.e.Now(), 0)
		if o != GotJob {
			t.Fatalf("outcome %v", o)
		}
		got = append(got, j.ID)
	}
	want := []uint64{5, 2, 4, 1, 3}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order %v, want %v", got, want)
		}
	}
}

func TestParkedReserveIsServedByPutFIFO(t *testing.T) {
	e := New(2)
	a, cha := newTestClient(e, 1)
	b, chb := newTestClient(e, 2)
	p, _ := newTestClient(e, 1)
	if _, o := a.Reserve(a.e.Now(), -1); o != Parked {
		t.Fatal("a should park")
	}
	if _, o := b.Reserve(b.e.Now(), -1); o != Parked {
		t.Fatal("b should park")
	}
	put(t, p, 0, 0, "first")
	select {
	case c := <-cha:
		j, o := c.TakeWakeup()
		if o != GotJob || string(j.Body) != "first\r\n" {
			t.Fatalf("a got %v %v", j, o)
		}
	case <-chb:
		t.Fatal("b served before a: waiters must be FIFO")
	case <-time.After(time.Second):
		t.Fatal("no wake")
	}
	put(t, p, 0, 0, "second")
	c := <-chb
	if j, o := c.TakeWakeup(); o != GotJob || j.ID != 2 {
		t.Fatalf("b got %v %v", j, o)
	}
}

// awaitNoDelayed waits until no tube has a delayed job, each seen under its
// lock, so every timer fire that promoted one has finished. It is for
// tests that stopped all clients with short delays still running.
func awaitNoDelayed(t *testing.T, e *Engine, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		left := 0
		for _, name := range e.AppendTubeNames(nil) {
			if tb := e.reg.lookup(name); tb != nil {
				tb.mu.Lock()
				left += tb.delay.Len()
				tb.mu.Unlock()
			}
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d delayed jobs not promoted within %v", left, within)
		}
		time.Sleep(time.Millisecond)
	}
}

// woken reports whether the client's loop has been told to wake.
func woken(ch chan *Client) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestReserveWithTimeoutTimesOutAtItsTimeout(t *testing.T) {
	e, clk := newManualEngine(1)
	c, ch := newTestClient(e, 1)
	if _, o := c.Reserve(c.e.Now(), 100*time.Millisecond); o != Parked {
		t.Fatal("should park")
	}
	clk.Advance(100*time.Millisecond - 1)
	if woken(ch) {
		t.Fatal("woke 1 ns before its timeout")
	}
	clk.Advance(1)
	if !woken(ch) {
		t.Fatal("not woken at its timeout")
	}
	if _, o := c.TakeWakeup(); o != TimedOut {
		t.Fatalf("outcome %v", o)
	}
	if _, o := c.Reserve(c.e.Now(), 0); o != TimedOut {
		t.Fatalf("reserve-with-timeout 0: %v", o)
	}
}

func jobState(t *testing.T, e *Engine, id uint64) codec.JobStats {
	t.Helper()
	var st codec.JobStats
	if !e.StatsJob(id, &st) {
		t.Fatalf("no job %d", id)
	}
	return st
}

// A reserved job is answered DEADLINE_SOON from its safety margin (1 s
// before the TTR runs out) on, and goes back to ready when the TTR runs out,
// neither a nanosecond early.
func TestTTRMarginAndExpiryComeAtTheirDeadlines(t *testing.T) {
	e, clk := newManualEngine(1)
	c, _ := newTestClient(e, 1)
	j, _ := c.Put(e.Now(), e.NextID(), 0, 0, 2*time.Second, []byte("x\r\n"))
	if got, o := c.Reserve(c.e.Now(), 0); o != GotJob || got != j {
		t.Fatal("reserve")
	}
	clk.Advance(time.Second - 1)
	if _, o := c.Reserve(c.e.Now(), 0); o != TimedOut {
		t.Fatalf("1 ns before the margin: %v, want TimedOut", o)
	}
	clk.Advance(1)
	if _, o := c.Reserve(c.e.Now(), 0); o != DeadlineSoon {
		t.Fatalf("in the margin: %v, want DeadlineSoon", o)
	}
	clk.Advance(time.Second - 1)
	if st := jobState(t, e, j.ID); st.State != "reserved" || st.Timeouts != 0 {
		t.Fatalf("1 ns before the TTR ran out: %+v", st)
	}
	clk.Advance(1)
	if st := jobState(t, e, j.ID); st.State != "ready" || st.Timeouts != 1 {
		t.Fatalf("after TTR: %+v", st)
	}
}

// A reserve parked with no timeout, by a client holding a job, is woken
// with DEADLINE_SOON when the job's safety margin begins.
func TestParkedReserveWakesAtTheTTRMargin(t *testing.T) {
	e, clk := newManualEngine(1)
	c, ch := newTestClient(e, 1)
	put(t, c, 0, 0, "x") // TTR 10 s: margin at 9 s
	if _, o := c.Reserve(c.e.Now(), 0); o != GotJob {
		t.Fatal("reserve")
	}
	if _, o := c.Reserve(c.e.Now(), -1); o != Parked {
		t.Fatal("should park")
	}
	clk.Advance(9*time.Second - 1)
	if woken(ch) {
		t.Fatal("woke 1 ns before the margin")
	}
	clk.Advance(1)
	if !woken(ch) {
		t.Fatal("not woken at the margin")
	}
	if _, o := c.TakeWakeup(); o != DeadlineSoon {
		t.Fatalf("outcome %v, want DeadlineSoon", o)
	}
}

func TestDelayedJobBecomesReadyAtItsDeadline(t *testing.T) {
	e, clk := newManualEngine(1)
	c, ch := newTestClient(e, 1)
	j := put(t, c, 0, 100*time.Millisecond, "later")
	if _, o := c.Reserve(c.e.Now(), -1); o != Parked {
		t.Fatal("should park while the job is delayed")
	}
	clk.Advance(100*time.Millisecond - 1)
	if st := jobState(t, e, j.ID); woken(ch) || st.State != "delayed" {
		t.Fatalf("1 ns before its delay ran out: %+v", st)
	}
	clk.Advance(1)
	if !woken(ch) {
		t.Fatal("delayed job not delivered when its delay ran out")
	}
	if got, o := c.TakeWakeup(); o != GotJob || got != j {
		t.Fatalf("%v %v", got, o)
	}
}

// CancelWait ends an open wait at once (the loop answers TIMED_OUT to a
// parked client whose peer half-closed): the client leaves every watched
// tube's queue, current-waiting drops, and a later put is not delivered to
// it. It refuses a wait that already has its answer: a job assigned to the
// client stays its own (Close gives it back), a timeout stays a timeout.
func TestCancelWaitEndsOnlyAnOpenWait(t *testing.T) {
	e, clk := newManualEngine(2)
	c, ch := newTestClient(e, 1)
	c.Watch([]byte("b"))
	p, _ := newTestClient(e, 2)
	p.Use([]byte("b"))
	waiting := func() (all, def, b uint64) {
		var st codec.ServerStats
		e.Stats(&st)
		return st.CurrentWaiting, tubeWaiting(t, e, "default"), tubeWaiting(t, e, "b")
	}
	if c.CancelWait() {
		t.Fatal("cancelled a wait that never began")
	}

	if _, o := c.Reserve(e.Now(), -1); o != Parked {
		t.Fatal("should park")
	}
	if all, def, b := waiting(); all != 1 || def != 1 || b != 1 {
		t.Fatalf("parked: current-waiting %d, default %d, b %d", all, def, b)
	}
	if !c.CancelWait() {
		t.Fatal("an open wait was not cancelled")
	}
	if all, def, b := waiting(); all != 0 || def != 0 || b != 0 {
		t.Fatalf("cancelled: current-waiting %d, default %d, b %d", all, def, b)
	}
	if c.CancelWait() {
		t.Fatal("cancelled the same wait twice")
	}
	j1 := put(t, p, 0, 0, "one")
	if woken(ch) || jobState(t, e, j1.ID).State != "ready" {
		t.Fatal("a put went to a cancelled wait")
	}
	if got, o := c.Reserve(e.Now(), -1); o != GotJob || got != j1 {
		t.Fatalf("the next reserve after a cancel: %v %v", got, o)
	}

	// A wait that a put has already answered.
	if _, o := c.Reserve(e.Now(), -1); o != Parked {
		t.Fatal("should park")
	}
	j2 := put(t, p, 0, 0, "two")
	if !woken(ch) {
		t.Fatal("the put did not wake the parked client")
	}
	if c.CancelWait() {
		t.Fatal("cancelled a wait that had its job")
	}
	if st := jobState(t, e, j2.ID); st.State != "reserved" {
		t.Fatalf("the job assigned to the wait: %+v", st)
	}
	c.Close()
	for _, j := range []*Job{j1, j2} {
		if st := jobState(t, e, j.ID); st.State != "ready" {
			t.Fatalf("job %d after Close: %+v", j.ID, st)
		}
	}

	// A wait that timed out.
	d, dch := newTestClient(e, 1)
	d.Watch([]byte("empty"))
	d.Ignore([]byte("default"))
	if _, o := d.Reserve(e.Now(), 100*time.Millisecond); o != Parked {
		t.Fatal("should park")
	}
	clk.Advance(100 * time.Millisecond)
	if !woken(dch) {
		t.Fatal("not woken at its timeout")
	}
	if d.CancelWait() {
		t.Fatal("cancelled a wait that had timed out")
	}
	if _, o := d.TakeWakeup(); o != TimedOut {
		t.Fatalf("after a refused cancel: %v, want TimedOut", o)
	}
}

func TestCloseReturnsReservedJobsAndFreesTubes(t *testing.T) {
	e := New(1)
	a, _ := newTestClient(e, 1)
	a.Use([]byte("t1"))
	a.Watch([]byte("t1"))
	put(t, a, 0, 0, "x")
	if _, o := a.Reserve(a.e.Now(), 0); o != GotJob {
		t.Fatal("reserve")
	}
	b, _ := newTestClient(e, 1)
	b.Watch([]byte("t1"))
	a.Close()
	if _, o := b.Reserve(b.e.Now(), 0); o != GotJob {
		t.Fatal("job not returned to ready on close")
	}
	_, _ = b.Delete(b.e.Now(), 1)
	b.Close()
	if names := e.AppendTubeNames(nil); len(names) != 1 || string(names[0]) != "default" {
		t.Fatalf("tubes left: %q", names)
	}
}

// TestConcurrentDeliveryExactlyOnce runs producers and parked consumers on
// several goroutines and tubes: every job must be delivered exactly once.
func TestConcurrentDeliveryExactlyOnce(t *testing.T) {
	const producers, consumers, perProducer = 4, 6, 2000
	e := New(4)
	tubes := [][]byte{[]byte("a"), []byte("b"), []byte("c")}
	var mu sync.Mutex
	seen := make(map[uint64]int)
	var wg sync.WaitGroup
	done := make(chan struct{})
	for i := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, ch := newTestClient(e, 1+i%4)
			for _, tb := range tubes[:1+i%3] {
				c.Watch(tb)
			}
			for {
				j, o := c.Reserve(c.e.Now(), 20*time.Millisecond)
				if o == Parked {
					select {
					case <-ch:
						j, o = c.TakeWakeup()
					case <-done:
						c.Close()
						return
					}
				}
				if o == GotJob {
					mu.Lock()
					seen[j.ID]++
					mu.Unlock()
					if ok, _ := c.Delete(c.e.Now(), j.ID); !ok {
						t.Errorf("delete %d failed", j.ID)
					}
				}
				select {
				case <-done:
					c.Close()
					return
				default:
				}
			}
		}()
	}
	var pwg sync.WaitGroup
	for i := range producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			p, _ := newTestClient(e, 1+i%4)
			p.Use(tubes[i%len(tubes)])
			for range perProducer {
				put(t, p, 0, 0, "job")
			}
		}()
	}
	pwg.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == producers*perProducer || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(done)
	wg.Wait()
	if len(seen) != producers*perProducer {
		t.Fatalf("delivered %d of %d jobs", len(seen), producers*perProducer)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("job %d delivered %d times", id, n)
		}
	}
	var st codec.ServerStats
	e.Stats(&st)
	if st.CurrentJobsReady+st.CurrentJobsReserved != 0 || st.CurrentWaiting != 0 {
		t.Fatalf("leftover gauges: %+v", st)
	}
}

// lcg is a small deterministic random source for one test goroutine:
// rnd(n) is in [0, n).
func lcg(seed uint32) func(n uint32) uint32 {
	return func(n uint32) uint32 { seed = seed*1664525 + 1013904223; return (seed >> 8) % n }
}

// TestGaugesAgreeWithTubesAndHeapsAfterChurn hammers the engine from
// several goroutines (puts, parked and timed reserves, release with new
// pri/delay, bury, kick, delete, watch/ignore, close and reconnect), then
// quiesces and checks that the global gauges agree with the per-tube
// counts and with the heaps, and that nothing stays reserved or waiting.
func TestGaugesAgreeWithTubesAndHeapsAfterChurn(t *testing.T) {
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
		for _, j := range tb.ready.jobs() {
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

// Ids are never reused: restored up to 2^64-3, puts get the last two ids,
// then ErrNoIDs, as does a move (which makes a new job), and the jobs
// already made are all still there under their own ids.
func TestIDsNeverWrap(t *testing.T) {
	e := New(1)
	e.Restore(nil, math.MaxUint64-2)
	c, _ := newTestClient(e, 0)
	a, b := put(t, c, 0, 0, "a"), put(t, c, 0, 0, "b")
	if a.ID != math.MaxUint64-1 || b.ID != math.MaxUint64 {
		t.Fatalf("ids %d, %d, want the last two", a.ID, b.ID)
	}
	for range 3 {
		if id := e.NextID(); id != 0 {
			t.Fatalf("NextID past the largest id: %d, want 0", id)
		}
		if j, err := c.Put(e.Now(), e.NextID(), 0, 0, time.Second, []byte("c\r\n")); !errors.Is(err, ErrNoIDs) || j != nil {
			t.Fatalf("put past the largest id: %v, %v; want ErrNoIDs", j, err)
		}
	}
	if _, err := e.NewOperator().Move(a.ID, "other"); !errors.Is(err, ErrNoIDs) {
		t.Fatalf("move past the largest id: %v, want ErrNoIDs", err)
	}
	if e.Peek(a.ID) != a || e.Peek(b.ID) != b || e.Peek(0) != nil || e.Peek(1) != nil {
		t.Fatal("the jobs are not where they were")
	}
	if ok, err := c.Delete(e.Now(), a.ID); !ok || err != nil {
		t.Fatalf("delete once the ids ran out: %v, %v", ok, err)
	}
}

// An engine with an id space hands out only the ids of its space, in
// order, never one at or below what it restored, and none once the space
// has no id left below 2^64.
func TestIDSpaceHandsOutOnlyItsOwnIDs(t *testing.T) {
	e := New(1)
	e.SetIDSpace(2, 3)
	e.Restore(nil, 10)
	for _, want := range []uint64{11, 14, 17} {
		if id := e.NextID(); id != want {
			t.Fatalf("NextID %d, want %d", id, want)
		}
	}
	e = New(1)
	e.SetIDSpace(0, 4)
	if id := e.NextID(); id != 4 {
		t.Fatalf("the first id of space 0 mod 4: %d, want 4 (0 is no id)", id)
	}
	e = New(1)
	e.SetIDSpace(1, 3)
	e.Restore(nil, math.MaxUint64-6)
	var got []uint64
	for id := e.NextID(); id != 0; id = e.NextID() {
		got = append(got, id)
	}
	// 2^64-1 is 0 modulo 3: the ids above 2^64-7 that are 1 modulo 3
	// are 2^64-6 and 2^64-3.
	if len(got) != 2 || got[0] != math.MaxUint64-5 || got[1] != math.MaxUint64-2 {
		t.Fatalf("ids near the largest: %v, want [%d %d]", got, uint64(math.MaxUint64-5), uint64(math.MaxUint64-2))
	}
	if id := e.NextID(); id != 0 {
		t.Fatalf("NextID past the space's last id: %d, want 0", id)
	}
}
