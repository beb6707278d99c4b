package engine

import (
	"errors"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/beanpole/beanpole/record"
)

func TestAllocSize(t *testing.T) {
	for _, c := range []struct{ n, want int }{
		{0, 8}, {1, 8}, {8, 8}, {9, 16}, {3 + 2, 8}, {100, 112}, {1002, 1024},
		{4098, 4864}, {32768, 32768}, {32769, 40960}, {65538, 73728}, {1 << 20, 1 << 20},
	} {
		if got := allocSize(c.n); got != c.want {
			t.Errorf("allocSize(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

// body returns a body of n bytes (CRLF included) whose capacity is n, as
// the loop's reader makes them.
func body(n int) []byte {
	b := make([]byte, n)
	b[n-2], b[n-1] = '\r', '\n'
	return b
}

func usedMemory(e *Engine) int64 { u, _ := e.JobMemory(); return u }

// Puts are refused with ErrNoMemory once the next job would pass the
// ceiling; a refusal changes nothing; a delete gives the job's cost back.
func TestJobMemoryCeiling(t *testing.T) {
	e := New(1)
	cost := jobCost(body(65538))
	e.SetJobMemoryLimit(10*cost + cost/2)
	c, _ := newTestClient(e, 1)
	var jobs []*Job
	for {
		j, err := c.Put(e.Now(), e.NextID(), 0, 0, time.Second, body(65538))
		if errors.Is(err, ErrNoMemory) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
		if len(jobs) > 20 {
			t.Fatal("no refusal")
		}
	}
	if len(jobs) != 10 {
		t.Fatalf("%d jobs of cost %d under a ceiling of %d", len(jobs), cost, 10*cost+cost/2)
	}
	if u := usedMemory(e); u != 10*cost {
		t.Fatalf("used %d, want %d", u, 10*cost)
	}
	if readyCount(e) != 10 {
		t.Fatalf("%d ready after a refusal, want 10", readyCount(e))
	}
	// The ceiling is on the total: a small put is refused too if it does
	// not fit, and fits if it does.
	if _, err := c.Put(e.Now(), e.NextID(), 0, 0, time.Second, body(3)); err != nil {
		t.Fatalf("a 1-byte job under the remaining %d bytes: %v", cost/2, err)
	}
	if ok, err := c.Delete(c.e.Now(), jobs[0].ID); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, err := c.Put(e.Now(), e.NextID(), 0, 0, time.Second, body(65538)); err != nil {
		t.Fatalf("put after a delete: %v", err)
	}
	if _, err := c.Put(e.Now(), e.NextID(), 0, 0, time.Second, body(65538)); !errors.Is(err, ErrNoMemory) {
		t.Fatalf("second put after one delete: %v, want ErrNoMemory", err)
	}
}

// Loops take grants so that a put far from the ceiling does not read every
// shard; whatever the interleaving, the total charged never passes the
// ceiling, and all loops together fill it to within the grants.
func TestJobMemoryGrantsStayUnderTheCeiling(t *testing.T) {
	const loops = 4
	e := New(loops)
	const limit = 50 << 20
	e.SetJobMemoryLimit(limit)
	var cs []*Client
	for i := 1; i <= loops; i++ {
		c, _ := newTestClient(e, i)
		cs = append(cs, c)
	}
	var refused [loops]bool
	var n, sums int
	for k := 0; ; k++ {
		i := k % loops
		if refused[i] {
			if refused == [loops]bool{true, true, true, true} {
				break
			}
			continue
		}
		g := e.ctr.shards[i+1].v[cJobGrant].Load()
		size := 1000 + (k*7919)%30000
		_, err := cs[i].Put(e.Now(), e.NextID(), 0, 0, time.Second, body(size))
		if errors.Is(err, ErrNoMemory) {
			refused[i] = true
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		if g < jobCost(body(size)) {
			sums++
		}
		if charged := e.ctr.sum(cJobBytes); charged > limit {
			t.Fatalf("after %d puts %d bytes charged (grants included), limit %d", n, charged, limit)
		}
	}
	used := usedMemory(e)
	if used > limit || used < limit-limit/16 {
		t.Fatalf("%d puts filled %d of %d bytes", n, used, limit)
	}
	// Far from the ceiling most puts spend a grant.
	if sums > n/4 {
		t.Fatalf("%d of %d puts summed the shards", sums, n)
	}
	t.Logf("%d puts, %d summed the shards, %d of %d bytes used", n, sums, used, limit)
}

// Without a ceiling the bytes are still counted, for stats.
func TestJobMemoryCountedWithoutCeiling(t *testing.T) {
	e := New(2)
	a, _ := newTestClient(e, 1)
	b, _ := newTestClient(e, 2)
	j := put(t, a, 0, 0, "hello")
	if u, l := e.JobMemory(); u != jobCost(j.Body) || l != 0 {
		t.Fatalf("JobMemory %d %d, want %d 0", u, l, jobCost(j.Body))
	}
	if ok, err := b.Delete(b.e.Now(), j.ID); !ok || err != nil { // freed on another shard
		t.Fatal(ok, err)
	}
	if u := usedMemory(e); u != 0 {
		t.Fatalf("used %d after deleting every job", u)
	}
}

// With a binlog a put is charged when it is accepted, before its record is
// durable, and the charge goes back if the log refuses or fails it.
func TestJobMemoryWithJournal(t *testing.T) {
	e, f := newJournaled(1)
	cost := jobCost(body(1002))
	e.SetJobMemoryLimit(2*cost + e.Memory(MemTubes)) // the default tube is charged too
	c, _ := newTestClient(e, 1)
	j1, err := c.Put(e.Now(), e.NextID(), 0, 0, time.Second, body(1002))
	if err != nil {
		t.Fatal(err)
	}
	if usedMemory(e) != cost {
		t.Fatalf("a put waiting for the log is charged %d, want %d", usedMemory(e), cost)
	}
	if _, err := c.Put(e.Now(), e.NextID(), 0, 0, time.Second, body(1002)); err != nil {
		t.Fatal(err)
	}
	// Both are pending: the third does not fit.
	if _, err := c.Put(e.Now(), e.NextID(), 0, 0, time.Second, body(1002)); !errors.Is(err, ErrNoMemory) {
		t.Fatalf("third put: %v, want ErrNoMemory", err)
	}
	if f.unacked() != 2 {
		t.Fatalf("%d records logged, want 2: a refused put must not reach the log", f.unacked())
	}
	f.ackNext(1, nil)
	f.ackNext(1, errors.New("EIO")) // the second never exists: its charge goes back
	if usedMemory(e) != cost {
		t.Fatalf("after a failed put: %d charged, want %d", usedMemory(e), cost)
	}
	f.refuse = record.ErrNoSpace
	if _, err := c.Put(e.Now(), e.NextID(), 0, 0, time.Second, body(1002)); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("put on a full disk: %v", err)
	}
	if usedMemory(e) != cost {
		t.Fatalf("after a put the log refused: %d charged, want %d", usedMemory(e), cost)
	}
	f.refuse = nil
	if ok, err := c.Delete(c.e.Now(), j1.ID); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if usedMemory(e) != 0 {
		t.Fatalf("after deleting the last job: %d charged", usedMemory(e))
	}
}

// Recovered jobs are charged even past the ceiling: they exist; new puts
// are refused until enough are deleted.
func TestJobMemoryCountsRestoredJobs(t *testing.T) {
	e := New(1)
	e.SetJobMemoryLimit(100)
	e.Restore([]*record.Job{{ID: 1, Tube: "default", Body: body(1002)}}, 0)
	if usedMemory(e) != jobCost(body(1002)) {
		t.Fatalf("restored job charged %d, want %d", usedMemory(e), jobCost(body(1002)))
	}
	c, _ := newTestClient(e, 1)
	if _, err := c.Put(e.Now(), e.NextID(), 0, 0, time.Second, body(3)); !errors.Is(err, ErrNoMemory) {
		t.Fatalf("put past the ceiling after recovery: %v", err)
	}
}

// JobOverhead covers what a job keeps on the heap besides its body: the
// Job, its id-table slot and heap entry, and the binlog's per-job index
// entry (a map[uint64]pin in persist, modelled here by a map of the same
// shape). Measured on the heap after a collection.
func TestJobOverheadCoversTheHeap(t *testing.T) {
	const n = 200_000
	heap := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	e := New(1)
	c, _ := newTestClient(e, 1)
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = body(8)
	}
	before := heap()
	for i := range bodies {
		if _, err := c.Put(e.Now(), e.NextID(), uint32(i%7), 0, time.Second, bodies[i]); err != nil {
			t.Fatal(err)
		}
	}
	perJob := (heap() - before) / n
	runtime.KeepAlive(e)
	type pin struct {
		seq   uint64
		bytes uint32
	}
	before = heap()
	pins := make(map[uint64]pin)
	for i := uint64(1); i <= n; i++ {
		pins[i] = pin{i, 100}
	}
	perPin := (heap() - before) / n
	runtime.KeepAlive(pins)
	runtime.KeepAlive(bodies)
	t.Logf("Job struct %d bytes (class %d); per job without body %d bytes, per binlog index entry %d; JobOverhead %d",
		unsafe.Sizeof(Job{}), allocSize(int(unsafe.Sizeof(Job{}))), perJob, perPin, JobOverhead)
	if perJob+perPin > JobOverhead {
		t.Fatalf("a job takes %d + %d bytes besides its body, JobOverhead is %d", perJob, perPin, JobOverhead)
	}
	if perJob+perPin < JobOverhead/2 {
		t.Fatalf("a job takes %d + %d bytes besides its body, JobOverhead %d overstates it", perJob, perPin, JobOverhead)
	}
}
