package memtune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// KeepHeapHeadroom gives the collector at least floor bytes of headroom
// while the heap is churning fast, however small the live heap is.
//
// Why: job bodies are garbage the moment a job is deleted, so a queue
// moving 64 KiB bodies allocates hundreds of MB/s on a live heap of a few
// MB. With GOGC=100 alone that is a collection every few ms, each waking
// mark workers on other threads; measured, the collector then costs more
// than the jobs. So when GOGC alone would collect more often than every
// hotCycle, GOGC is raised until the goal is live + floor. When allocation
// calms down, or the live heap outgrows floor, GOGC (100 unless the
// environment says otherwise) rules again, so a quiet server keeps a tight
// heap (its garbage is collected at the usual pace) and a server holding
// millions of jobs grows by no more than GOGC allows.
//
// The decision is re-made after every cycle, from a finalizer on a
// sentinel that each cycle frees. A burst that stops leaves no cycle to
// turn the headroom off, and its garbage (up to floor bytes: after a few
// thousand TLS handshakes, say) would stay in the heap until the
// runtime's forced collection two minutes later; so, every calmTick, a
// headroom on a heap that has all but stopped allocating is turned off
// and the garbage collected and returned at once (the headroom is only
// ever on for a live heap under floor, so that collection is short).
func KeepHeapHeadroom(floor uint64) {
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	if base <= 0 {
		return // GOGC=off: the operator has taken over
	}
	t := &heapTuner{floor: floor, base: base, asked: base, last: time.Now(),
		sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/heap/allocs:bytes"}},
		goal:   []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}}
	t.arm()
	go t.watchCalm()
}

// calmTick is how often watchCalm looks; calmBytes is the most a heap may
// allocate in one tick and count as calm (4 MB/s).
const (
	calmTick  = 250 * time.Millisecond
	calmBytes = 1 << 20
)

// watchCalm turns the headroom off once allocation has all but stopped.
func (t *heapTuner) watchCalm() {
	allocs := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	var prev uint64
	for range time.Tick(calmTick) {
		metrics.Read(allocs)
		now := allocs[0].Value.Uint64()
		t.mu.Lock()
		calm := t.calmed(now - prev)
		t.mu.Unlock()
		prev = now
		if calm {
			debug.FreeOSMemory()
		}
	}
}

// calmed turns the headroom off, and reports so, if it is on and the heap
// allocated less than calmBytes in the last tick.
func (t *heapTuner) calmed(allocated uint64) bool {
	if t.asked == t.base || allocated >= calmBytes {
		return false
	}
	t.hot, t.asked = false, t.base
	debug.SetGCPercent(t.base)
	return true
}

// A cycle shorter than hotCycle (at GOGC alone) turns the headroom on; it
// stays on until cycles at GOGC alone would last coolCycle.
const (
	hotCycle  = 50 * time.Millisecond
	coolCycle = 200 * time.Millisecond
	minHeap   = 4 << 20 // the runtime's smallest goal at GOGC=100
)

type heapTuner struct {
	mu         sync.Mutex // adjust and watchCalm
	floor      uint64
	base       int // GOGC as configured
	asked      int // the percentage last set before scaling to the real goal
	hot        bool
	last       time.Time
	lastAllocs uint64
	sample     []metrics.Sample
	goal       []metrics.Sample
}

type sentinel struct{ _ [16]byte } // finalizers need a non-zero-size object

func (t *heapTuner) arm() {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) { t.adjust(); t.arm() })
}

func (t *heapTuner) adjust() {
	t.mu.Lock()
	defer t.mu.Unlock()
	metrics.Read(t.sample)
	live, allocs := t.sample[0].Value.Uint64(), t.sample[1].Value.Uint64()
	now := time.Now()
	t.hot = t.churning(live, allocs-t.lastAllocs, now.Sub(t.last))
	t.last, t.lastAllocs = now, allocs
	pct := t.base
	if t.hot {
		pct = t.percentFor(live)
	}
	if pct == t.asked {
		return
	}
	t.asked = pct
	debug.SetGCPercent(pct)
	// The runtime's goal also counts stacks, globals and its own minimum:
	// read back the goal it derived and scale once towards live + floor.
	metrics.Read(t.goal)
	if goal := t.goal[0].Value.Uint64(); pct != t.base && goal > live+t.floor+t.floor/8 {
		debug.SetGCPercent(max(t.base, int(uint64(pct)*t.floor/(goal-live))))
	}
}

// churning reports whether, at the rate of the last cycle (allocated bytes
// in elapsed), GOGC alone would collect more often than hotCycle (or, with
// the headroom already on, coolCycle).
func (t *heapTuner) churning(live, allocated uint64, elapsed time.Duration) bool {
	if allocated == 0 || elapsed <= 0 {
		return false
	}
	room := max(live*uint64(t.base)/100, minHeap)
	cycle := time.Duration(float64(elapsed) * float64(room) / float64(allocated))
	if t.hot {
		return cycle < coolCycle
	}
	return cycle < hotCycle
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
