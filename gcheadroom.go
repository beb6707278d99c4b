package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// keepHeapHeadroom makes the collector wait until at least floor bytes have
// been allocated since the last cycle, however small the live heap is.
//
// Why: job bodies are garbage the moment a job is deleted, so a queue
// moving 64 KiB bodies allocates hundreds of MB/s on a live heap of a few
// MB. With GOGC=100 alone that is a collection every few ms, each one waking
// mark workers on other threads; measured, the collector then costs more
// than the jobs. Past floor bytes of live heap this changes nothing: GOGC
// (100 unless the environment says otherwise) rules as usual, so a server
// holding millions of jobs does not grow by more than GOGC allows.
//
// The percentage is re-derived after every cycle from the live heap it
// found, using a finalizer on a sentinel that each cycle frees.
func keepHeapHeadroom(floor uint64) {
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	if base <= 0 {
		return // GOGC=off: the operator has taken over
	}
	t := &heapTuner{floor: floor, base: base, asked: base, cur: base,
		sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}},
		goal:   []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}}
	t.arm()
}

type heapTuner struct {
	floor  uint64
	base   int // GOGC as configured
	asked  int // what percentFor last chose
	cur    int // the percentage in force (asked, scaled to the real goal)
	sample []metrics.Sample
	goal   []metrics.Sample
}

type sentinel struct{ _ [16]byte } // finalizers need a non-zero-size object

func (t *heapTuner) arm() {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) { t.adjust(); t.arm() })
}

func (t *heapTuner) adjust() {
	metrics.Read(t.sample)
	live := t.sample[0].Value.Uint64()
	pct := t.percentFor(live)
	if pct == t.asked {
		return
	}
	t.asked = pct
	debug.SetGCPercent(pct)
	t.cur = pct
	// The runtime's goal also counts stacks, globals and its own minimum:
	// read back the goal it derived and scale once towards live + floor.
	metrics.Read(t.goal)
	if goal := t.goal[0].Value.Uint64(); pct != t.base && goal > live+t.floor+t.floor/8 {
		pct = max(t.base, int(uint64(pct)*t.floor/(goal-live)))
		debug.SetGCPercent(pct)
		t.cur = pct
	}
}

// percentFor is the GOGC that gives a live heap of live bytes at least
// floor bytes of headroom. Changes within an eighth of the current value
// are not worth the heap lock SetGCPercent takes, except back to base.
func (t *heapTuner) percentFor(live uint64) int {
	pct := t.base
	if live*uint64(t.base)/100 < t.floor {
		pct = int(min(t.floor*100/max(live, 1), 100_000))
	}
	if pct != t.base && pct <= t.asked*9/8 && pct >= t.asked*7/8 {
		return t.asked
	}
	return pct
}
