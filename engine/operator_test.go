package engine

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/beanpole/beanpole/codec"
)

// tubeStats is stats-tube of name, failing the test if it does not exist.
func tubeStats(t *testing.T, e *Engine, name string) codec.TubeStats {
	t.Helper()
	var st codec.TubeStats
	if !e.StatsTube([]byte(name), &st) {
		t.Fatalf("no tube %q", name)
	}
	return st
}

// fillTube puts, in the client's used tube, one job of each state besides
// those already there: ready, delayed, buried and reserved (held by c).
func fillTube(t *testing.T, c *Client) (ready, delayed, buried, reserved *Job) {
	t.Helper()
	ready = put(t, c, 5, 0, "ready")
	delayed = put(t, c, 5, time.Hour, "delayed")
	buried = put(t, c, 1, 0, "buried")
	if c.ReserveJob(buried.ID) == nil {
		t.Fatal("reserve-job")
	}
	if ok, _ := c.Bury(buried.ID, 1); !ok {
		t.Fatal("bury")
	}
	reserved = put(t, c, 9, 0, "reserved")
	if c.ReserveJob(reserved.ID) == nil {
		t.Fatal("reserve-job")
	}
	return ready, delayed, buried, reserved
}

func TestOperatorFlushTakesOnlyTheStatesAskedAndLeavesReservedJobs(t *testing.T) {
	e := New(1)
	c, _ := newTestClient(e, 1)
	c.Use([]byte("q"))
	ready, delayed, buried, reserved := fillTube(t, c)
	for range 100 {
		put(t, c, 7, 0, "more")
	}
	op := e.NewOperator()
	if n, err := op.Flush("q", Ready); err != nil || n != 101 {
		t.Fatalf("flush ready: %d, %v; want 101", n, err)
	}
	st := tubeStats(t, e, "q")
	if st.CurrentJobsReady != 0 || st.CurrentJobsDelayed != 1 || st.CurrentJobsBuried != 1 || st.CurrentJobsReserved != 1 {
		t.Fatalf("after flushing ready: %+v", st)
	}
	if e.Peek(ready.ID) != nil || e.Peek(delayed.ID) == nil {
		t.Fatal("flush ready took the wrong jobs")
	}
	if n, err := op.Flush("q", Ready, Delayed, Buried); err != nil || n != 2 {
		t.Fatalf("flush all: %d, %v; want 2", n, err)
	}
	if e.Peek(buried.ID) != nil || e.Peek(reserved.ID) == nil {
		t.Fatal("flush all took the reserved job or left the buried one")
	}
	var sst codec.ServerStats
	e.Stats(&sst)
	if sst.CurrentJobsReady+sst.CurrentJobsDelayed+sst.CurrentJobsBuried != 0 || sst.CurrentJobsReserved != 1 {
		t.Fatalf("server gauges after the flush: %+v", sst)
	}
	if _, err := op.Flush("nope", Ready); !errors.Is(err, ErrNoTube) {
		t.Fatalf("flush of an unknown tube: %v", err)
	}
}

func TestOperatorFlushFreesATubeNobodyUses(t *testing.T) {
	e := New(1)
	c, _ := newTestClient(e, 1)
	c.Use([]byte("gone"))
	put(t, c, 0, 0, "x")
	c.Use([]byte("default"))
	if _, err := e.NewOperator().Flush("gone", Ready); err != nil {
		t.Fatal(err)
	}
	var st codec.TubeStats
	if e.StatsTube([]byte("gone"), &st) {
		t.Fatal("a tube emptied by a flush and used by nobody is still listed")
	}
}

func TestOperatorMoveMakesANewJobInTheOtherTube(t *testing.T) {
	e := New(1)
	c, _ := newTestClient(e, 1)
	_, delayed, buried, reserved := fillTube(t, c)
	op := e.NewOperator()

	id, err := op.Move(buried.ID, "retry")
	if err != nil {
		t.Fatal(err)
	}
	if e.Peek(buried.ID) != nil {
		t.Fatal("the moved job is still in its old tube")
	}
	v, ok := e.Job(id, 100)
	if !ok || v.Tube != "retry" || v.State != Ready || v.Pri != 1 || string(v.Head) != "buried" || v.TTR != 10*time.Second {
		t.Fatalf("moved job: %+v", v)
	}
	id, err = op.Move(delayed.ID, "retry")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := e.Job(id, 0); v.State != Delayed || v.TimeLeft < 59*time.Minute {
		t.Fatalf("a moved delayed job: %+v", v)
	}
	if _, err := op.Move(reserved.ID, "retry"); !errors.Is(err, ErrReserved) {
		t.Fatalf("moving a reserved job: %v", err)
	}
	if _, err := op.Move(id, "retry"); !errors.Is(err, ErrSameTube) {
		t.Fatalf("moving to its own tube: %v", err)
	}
	if _, err := op.Move(999, "retry"); !errors.Is(err, ErrNoJob) {
		t.Fatalf("moving no job: %v", err)
	}
	if st := tubeStats(t, e, "retry"); st.CurrentJobsReady != 1 || st.CurrentJobsDelayed != 1 || st.CurrentUsing != 0 {
		t.Fatalf("retry after the moves: %+v", st)
	}
}

func TestOperatorActionsWaitForTheirRecords(t *testing.T) {
	e, f := newJournaled(1)
	c, _ := newTestClient(e, 1)
	j := put(t, c, 0, 0, "x")
	f.ackNext(1, nil)
	op := e.NewOperator()

	done := make(chan error)
	var newID uint64
	go func() {
		var err error
		newID, err = op.Move(j.ID, "elsewhere")
		done <- err
	}()
	for f.unacked() < 2 {
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("the move returned (%v) before its records were durable", err)
	case <-time.After(50 * time.Millisecond):
	}
	if r := f.recs[1:]; r[0].kind != "put" || r[1].kind != "delete" || r[1].id != j.ID {
		t.Fatalf("records %+v: want the new job's put, then the old one's delete", r)
	}
	f.ackNext(2, nil)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if e.Peek(newID) == nil {
		t.Fatal("the moved job is not visible once durable")
	}

	go func() { done <- op.Delete(newID) }()
	for f.unacked() < 1 {
		time.Sleep(time.Millisecond)
	}
	f.ackNext(1, errors.New("disk on fire"))
	if err := <-done; !errors.Is(err, ErrLogFailed) {
		t.Fatalf("a delete whose record failed: %v, want ErrLogFailed", err)
	}
}

// Browse lists a heap in the order the protocol serves it, whatever the
// heap's shape, page by page.
func TestBrowseListsEachStateInServingOrder(t *testing.T) {
	e := New(1)
	c, _ := newTestClient(e, 1)
	rng := rand.New(rand.NewPCG(1, 2))
	var want []*Job
	for range 500 {
		want = append(want, put(t, c, uint32(rng.IntN(20)), 0, "r"))
	}
	slices.SortFunc(want, func(a, b *Job) int {
		if a.Pri != b.Pri {
			return int(a.Pri) - int(b.Pri)
		}
		return int(a.ID) - int(b.ID)
	})
	var got []uint64
	for skip := 0; ; skip += 37 {
		page, total, ok := e.Browse("default", Ready, skip, 37, 8)
		if !ok || total != 500 {
			t.Fatalf("browse: total %d, ok %v", total, ok)
		}
		if len(page) == 0 {
			break
		}
		for _, v := range page {
			got = append(got, v.ID)
		}
	}
	for i, j := range want {
		if got[i] != j.ID {
			t.Fatalf("ready job %d in the listing is %d, want %d", i, got[i], j.ID)
		}
	}
	// Buried: oldest first.
	var buried []uint64
	for _, j := range want[:5] {
		c.ReserveJob(j.ID)
		c.Bury(j.ID, 0)
		buried = append(buried, j.ID)
	}
	page, total, _ := e.Browse("default", Buried, 1, 10, 0)
	if total != 5 || len(page) != 4 || page[0].ID != buried[1] || page[3].ID != buried[4] {
		t.Fatalf("buried page: total %d, %+v", total, page)
	}
	if _, _, ok := e.Browse("nope", Ready, 0, 10, 0); ok {
		t.Fatal("browse of an unknown tube")
	}
}

func TestLatencyHistogramsCountWaitsAndRuns(t *testing.T) {
	e, clk := newManualEngine(1)
	c, _ := newTestClient(e, 1)
	j := put(t, c, 0, 0, "x")
	clk.Advance(30 * time.Millisecond)
	if got, o := c.Reserve(c.e.Now(), 0); o != GotJob || got != j {
		t.Fatalf("reserve: %v", o)
	}
	clk.Advance(5*time.Millisecond + 1)
	if ok, _ := c.Delete(c.e.Now(), j.ID); !ok {
		t.Fatal("delete")
	}
	wait, run, ok := e.Latency([]byte("default"))
	if !ok {
		t.Fatal("no default tube")
	}
	// 30 ms waited: in the (25 ms, 100 ms] bucket; 5 ms + 1 ns run: just
	// past the 5 ms bound.
	var wantWait, wantRun Histogram
	wantWait.Counts[3], wantWait.Sum = 1, 30*time.Millisecond
	wantRun.Counts[2], wantRun.Sum = 1, 5*time.Millisecond+1
	if wait != wantWait || run != wantRun {
		t.Fatalf("wait %+v, run %+v", wait, run)
	}
	// reserve-job of a buried job is no wait; a delete of a ready job no run.
	j2 := put(t, c, 0, 0, "y")
	if ok, _ := c.Delete(c.e.Now(), j2.ID); !ok {
		t.Fatal("delete")
	}
	if w, r, _ := e.Latency([]byte("default")); w.Counts != wait.Counts || r.Counts != run.Counts {
		t.Fatalf("a delete of a ready job counted: %+v %+v", w, r)
	}
}

func TestOperatorMoveStampsCreationByTheEngineClock(t *testing.T) {
	e, mc := newManualEngine(1)
	c, _ := newTestClient(e, 1)
	j := put(t, c, 0, 0, "x")
	mc.Advance(90 * time.Second)
	id, err := e.NewOperator().Move(j.ID, "retry")
	if err != nil {
		t.Fatal(err)
	}
	mc.Advance(5 * time.Second)
	if v, ok := e.Job(id, 0); !ok || v.Age != 5*time.Second {
		t.Fatalf("the moved job's age is %v, want the 5 s the engine's clock moved since the move", v.Age)
	}
}

// Kick and flush work a chunk of jobs per hold of the tube's lock; their
// counts and effects are those of one step, across chunks.
func TestKickAndFlushAcrossLockChunks(t *testing.T) {
	e := New(1)
	c, _ := newTestClient(e, 1)
	c.Use([]byte("q"))
	const n = 3*lockChunk + 7
	for i := range n {
		j := put(t, c, uint32(i%5), 0, "b")
		if c.ReserveJob(j.ID) == nil {
			t.Fatal("reserve-job")
		}
		if ok, _ := c.Bury(j.ID, uint32(i%5)); !ok {
			t.Fatal("bury")
		}
	}
	for range 2*lockChunk + 3 {
		put(t, c, 9, time.Hour, "d")
	}
	if k, err := c.Kick(lockChunk + 1); err != nil || k != lockChunk+1 {
		t.Fatalf("kick %d: %d, %v", lockChunk+1, k, err)
	}
	if k, err := c.Kick(math.MaxUint32); err != nil || k != n-lockChunk-1 {
		t.Fatalf("kick all: %d, %v; want %d", k, err, n-lockChunk-1)
	}
	st := tubeStats(t, e, "q")
	if st.CurrentJobsReady != n || st.CurrentJobsBuried != 0 || st.CurrentJobsDelayed != 2*lockChunk+3 {
		t.Fatalf("after the kicks: %+v", st)
	}
	if j := c.PeekReady(); j == nil || j.Pri != 0 {
		t.Fatalf("the heap lost its order: %+v", j)
	}
	if n2, err := e.NewOperator().Flush("q", Ready, Delayed); err != nil || n2 != n+2*lockChunk+3 {
		t.Fatalf("flush: %d, %v; want %d", n2, err, n+2*lockChunk+3)
	}
	if st := tubeStats(t, e, "q"); st.CurrentJobsReady+st.CurrentJobsDelayed != 0 {
		t.Fatalf("after the flush: %+v", st)
	}
}

// The oldest ready job is found wherever it sits in a heap of several
// chunks.
func TestOldestReadyAcrossLockChunks(t *testing.T) {
	e := New(1)
	c, _ := newTestClient(e, 1)
	c.Use([]byte("q"))
	if age, ok := e.OldestReady([]byte("q")); !ok || age != 0 {
		t.Fatalf("empty tube: %v, %v", age, ok)
	}
	before := time.Now()
	put(t, c, 1000, 0, "oldest, last to be served")
	first := time.Now()
	for i := range 3 * lockChunk {
		put(t, c, uint32(i%999), 0, "younger")
	}
	least := time.Since(first)
	age, ok := e.OldestReady([]byte("q"))
	if most := time.Since(before); !ok || age < least || age > most {
		t.Fatalf("oldest ready: %v, %v; want %v to %v", age, ok, least, most)
	}
}

// The tube's timer moves due jobs a chunk at a time and comes back at
// once for the rest: each firing marks the jobs it made ready with its
// own time (the jobs' ready-since), so many due at once get one such time
// per chunk.
func TestDueDelayedJobsBecomeReadyAChunkAtATime(t *testing.T) {
	e := New(1)
	c, _ := newTestClient(e, 1)
	c.Use([]byte("q"))
	const n = 3*lockChunk + 7
	for range n {
		put(t, c, 1, time.Hour, "d")
	}
	tb := e.reg.lookup([]byte("q"))
	tb.mu.Lock()
	due := e.mono() - 1
	for _, j := range tb.delay.jobs() {
		j.deadline = due
		tb.delay.Fix(j)
	}
	tb.schedule(due)
	tb.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for st := tubeStats(t, e, "q"); st.CurrentJobsReady != n; st = tubeStats(t, e, "q") {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %d ready, %d delayed; want %d ready", st.CurrentJobsReady, st.CurrentJobsDelayed, n)
		}
		time.Sleep(time.Millisecond)
	}
	tb.mu.Lock()
	firings := map[int64]int{}
	for _, j := range tb.ready.jobs() {
		firings[j.deadline]++
	}
	tb.mu.Unlock()
	if len(firings) < (n+lockChunk-1)/lockChunk {
		t.Fatalf("%d due jobs were made ready in %d firings; want at most %d a firing", n, len(firings), lockChunk)
	}
	for at, k := range firings {
		if k > lockChunk {
			t.Fatalf("one firing (at %d) made %d jobs ready; want at most %d", at, k, lockChunk)
		}
	}
}
