package engine

import (
	"math/rand/v2"
	"testing"
	"unsafe"
)

// The index against a Go map under random puts and deletes: ids mostly
// rising as the engine issues them, with stragglers that live long, bursts
// that grow and shrink the table, and probe runs that wrap around its end.
func TestIDIndexAgainstMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 20; round++ {
		var x idIndex
		ref := map[uint64]*Job{}
		next := uint64(r.IntN(1<<20)) * tableShards * idGroup
		live := []uint64{}
		for op := 0; op < 20000; op++ {
			switch {
			case r.IntN(100) < 55 || len(live) == 0:
				// The same shard's ids (its runs of idGroup, end to end),
				// mostly dense.
				for range 1 + r.IntN(3) {
					if next++; next%idGroup == 0 {
						next += (tableShards - 1) * idGroup
					}
				}
				j := &Job{ID: next}
				x.put(j)
				ref[next] = j
				live = append(live, next)
			default:
				k := r.IntN(len(live))
				if r.IntN(4) > 0 {
					k = r.IntN(min(len(live), 64)) // mostly the oldest
				}
				id := live[k]
				live[k] = live[len(live)-1]
				live = live[:len(live)-1]
				x.delete(id)
				delete(ref, id)
			}
			if x.n != len(ref) {
				t.Fatalf("round %d op %d: n %d, want %d", round, op, x.n, len(ref))
			}
			if op%97 == 0 {
				for id, j := range ref {
					if got := x.get(id); got != j {
						t.Fatalf("round %d op %d: get(%d) = %v, want %v", round, op, id, got, j)
					}
				}
				for _, id := range []uint64{next + 1, next + tableShards*idGroup, next - 7*tableShards*idGroup, 3} {
					if _, ok := ref[id]; !ok && x.get(id) != nil {
						t.Fatalf("round %d: get(%d) found a job that is not there", round, id)
					}
				}
			}
		}
		for id := range ref {
			x.delete(id)
		}
		if x.n != 0 || len(x.slots) > 1024 {
			t.Fatalf("round %d: emptied table has n %d and %d slots", round, x.n, len(x.slots))
		}
		x.delete(next) // deleting from an empty table is harmless
	}
}

// A Job fills a size class of Go's allocator exactly: a field more, or a
// field out of order, costs every queued job the next class (144 bytes).
func TestJobFillsItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(Job{}); n != 128 {
		t.Fatalf("Job is %d bytes, want 128", n)
	}
}

func TestJobHeapKeysShareTheFirstCacheLine(t *testing.T) {
	var j Job
	for name, end := range map[string]uintptr{
		"ID":        unsafe.Offsetof(j.ID) + unsafe.Sizeof(j.ID),
		"Pri":       unsafe.Offsetof(j.Pri) + unsafe.Sizeof(j.Pri),
		"heapIndex": unsafe.Offsetof(j.heapIndex) + unsafe.Sizeof(j.heapIndex),
		"deadline":  unsafe.Offsetof(j.deadline) + unsafe.Sizeof(j.deadline),
	} {
		if end > 64 {
			t.Errorf("Job.%s ends at byte %d, past the first cache line", name, end)
		}
	}
}

func TestClientFitsIn88Bytes(t *testing.T) {
	// A loop's conn holds its Client; together they fit a 128-byte size
	// class (loop's TestConnFitsItsSizeClass).
	if n := unsafe.Sizeof(Client{}); n > 88 {
		t.Fatalf("Client is %d bytes, want at most 88", n)
	}
}
