package engine

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// checkHeap verifies the heap invariants: every job's index names its
// slot, and no child orders before its parent.
func checkHeap(t *testing.T, h *jobHeap) {
	t.Helper()
	for i, j := range h.items {
		if int(j.heapIndex) != i {
			t.Fatalf("job %d at slot %d says %d", j.ID, i, j.heapIndex)
		}
		if i > 0 && h.less(j, h.items[(i-1)/heapArity]) {
			t.Fatalf("job %d at slot %d orders before its parent", j.ID, i)
		}
	}
}

// Random pushes, removals of arbitrary jobs, key changes and pops, against
// a sorted model: the invariants hold after every step and jobs come out
// in (key, id) order.
func TestHeapAgainstSortedModel(t *testing.T) {
	for _, byDeadline := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(1, uint64(len(t.Name()))))
		h := &jobHeap{byDeadline: byDeadline}
		in := map[*Job]bool{}
		var id uint64
		key := func(j *Job, k uint32) {
			j.Pri, j.deadline = k, int64(k)
		}
		for step := 0; step < 20000; step++ {
			switch op := rng.IntN(10); {
			case op < 5 || len(in) == 0:
				id++
				j := &Job{ID: id, heapIndex: -1}
				key(j, rng.Uint32N(50))
				h.Push(j)
				in[j] = true
			case op < 7:
				j := h.items[rng.IntN(len(h.items))]
				h.Remove(j)
				if j.heapIndex != -1 {
					t.Fatalf("removed job keeps index %d", j.heapIndex)
				}
				delete(in, j)
			case op < 9:
				j := h.items[rng.IntN(len(h.items))]
				key(j, rng.Uint32N(50))
				h.Fix(j)
			default:
				want := slices.MinFunc(h.items, func(a, b *Job) int {
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
	if len(h.items) == 0 {
		return nil
	}
	j := h.items[0]
	h.Remove(j)
	return j
}
