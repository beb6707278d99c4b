package engine

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkHeap verifies the heap invariants: every job's index names its
// slot, no child orders before its parent, and the run is in order with
// its ends live and its count right.
func checkHeap(t *testing.T, h *jobHeap) {
	t.Helper()
	for i, j := range h.items {
		if int(j.heapIndex) != i || j.inRun {
			t.Fatalf("job %d at slot %d says %d (in the run: %v)", j.ID, i, j.heapIndex, j.inRun)
		}
		if i > 0 && h.less(j, h.items[(i-1)/heapArity]) {
			t.Fatalf("job %d at slot %d orders before its parent", j.ID, i)
		}
	}
	r := &h.run
	live := 0
	var prev *Job
	for i, j := range r.buf {
		if i < r.head || j == nil {
			if j != nil {
				t.Fatalf("job %d before the run's head", j.ID)
			}
			continue
		}
		live++
		if !j.inRun || uint32(j.heapIndex) != r.base+uint32(i) {
			t.Fatalf("job %d at run place %d says %d (in the run: %v)", j.ID, i, uint32(j.heapIndex)-r.base, j.inRun)
		}
		if prev != nil && !h.less(prev, j) {
			t.Fatalf("job %d after job %d in the run", j.ID, prev.ID)
		}
		prev = j
	}
	if live != r.live || live > 0 && (r.buf[r.head] == nil || r.buf[len(r.buf)-1] == nil) {
		t.Fatalf("run counts %d live, holds %d (ends trimmed: %v)", r.live, live, live == 0 || r.buf[r.head] != nil && r.buf[len(r.buf)-1] != nil)
	}
}

// jobs is every job in h, in no order.
func (h *jobHeap) jobs() []*Job {
	var all []*Job
	for i := range h.slots() {
		if j := h.at(i); j != nil {
			all = append(all, j)
		}
	}
	return all
}

// Random pushes, runs of pushes in order, removals of arbitrary jobs, key
// changes and pops, against a sorted model: the invariants hold after every
// step and jobs come out in (key, id) order, from the heap and its run.
func TestHeapAgainstSortedModel(t *testing.T) {
	for _, byDeadline := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(1, uint64(len(t.Name()))))
		h := &jobHeap{byDeadline: byDeadline}
		in := map[*Job]bool{}
		var id uint64
		key := func(j *Job, k uint32) {
			j.Pri, j.deadline = k, int64(k)
		}
		pick := func() *Job { // a job at random
			for {
				if j := h.at(rng.IntN(h.slots())); j != nil { // nil: a removed job's place in the run
					return j
				}
			}
		}
		for step := 0; step < 20000; step++ {
			switch op := rng.IntN(12); {
			case op < 4 || len(in) == 0:
				id++
				j := &Job{ID: id, heapIndex: -1}
				key(j, rng.Uint32N(50))
				h.Push(j)
				in[j] = true
			case op == 11:
				// A burst in order at one key, as a queue's puts are:
				// the run takes them, unless they order before its last.
				k := rng.Uint32N(50)
				for range rng.IntN(8) {
					id++
					j := &Job{ID: id, heapIndex: -1}
					key(j, k)
					h.Push(j)
					in[j] = true
				}
			case op < 7:
				j := pick()
				h.Remove(j)
				if j.heapIndex != -1 {
					t.Fatalf("removed job keeps index %d", j.heapIndex)
				}
				delete(in, j)
			case op < 9:
				j := pick()
				key(j, rng.Uint32N(50))
				h.Fix(j)
			default:
				want := slices.MinFunc(h.jobs(), func(a, b *Job) int {
					if h.less(a, b) {
						return -1
					}
					return 1
				})
				if got := h.Pop(); got != want {
					t.Fatalf("Pop gave job %d, want %d", got.ID, want.ID)
				}
				delete(in, want)
			}
			// The whole heap is checked after every step while it is small,
			// then every 16th: a check is O(n), every step made the test
			// quadratic (13 s under -race); a broken order is still caught
			// by the next check or the next Pop.
			if h.Len() < 64 || step%16 == 0 {
				checkHeap(t, h)
			}
			if h.Len() != len(in) {
				t.Fatalf("heap holds %d, model %d", h.Len(), len(in))
			}
		}
		var prev *Job
		for h.Len() > 0 {
			j := h.Pop()
			if prev != nil && h.less(j, prev) {
				t.Fatalf("job %d popped after job %d", j.ID, prev.ID)
			}
			prev = j
		}
	}
}

// Pop removes and returns the top job, or nil.
func (h *jobHeap) Pop() *Job {
	j := h.Top()
	if j != nil {
		h.Remove(j)
	}
	return j
}

// A long run that loses most of its jobs from the middle is compacted and
// gives its memory back, its sequence numbers wrap around, and what is left
// still comes out in order.
func TestHeapRunCompactsAndWraps(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	h := &jobHeap{}
	h.run.base = math.MaxUint32 - 1000 // the numbers wrap within the run
	var jobs []*Job
	for id := uint64(1); id <= 5000; id++ {
		j := &Job{ID: id, heapIndex: -1}
		h.Push(j)
		jobs = append(jobs, j)
	}
	if len(h.items) != 0 || h.run.live != 5000 {
		t.Fatalf("jobs pushed in order: %d in the heap, %d in the run; want all in the run", len(h.items), h.run.live)
	}
	grown := cap(h.run.buf)
	for i, k := range rng.Perm(len(jobs))[:4900] {
		h.Remove(jobs[k])
		jobs[k] = nil
		if i%50 == 0 {
			checkHeap(t, h)
		}
	}
	checkHeap(t, h)
	if len(h.run.buf)-h.run.head > 2*h.run.live+64 || cap(h.run.buf) >= grown {
		t.Fatalf("run of %d live jobs keeps %d places, %d of memory (had %d)", h.run.live, len(h.run.buf)-h.run.head, cap(h.run.buf), grown)
	}
	var prev *Job
	for n := 0; h.Len() > 0; n++ {
		j := h.Pop()
		if prev != nil && j.ID <= prev.ID {
			t.Fatalf("job %d popped after job %d", j.ID, prev.ID)
		}
		prev = j
		if n > 100 {
			t.Fatal("more jobs popped than were left")
		}
	}
}
