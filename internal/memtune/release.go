package memtune

import (
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/rs/zerolog"
)

// GiveMemoryBack returns freed heap to the system soon after a large drop,
// as C beanstalkd's free() does, instead of over minutes.
//
// Why: after a backlog of 2 GB is deleted, the Go runtime keeps the memory.
// Nothing allocates much on an idle server, so the collector may not run
// for two minutes (its forced period) and the bodies stay on the heap as
// garbage; and once collected, the background scavenger returns free pages
// at about 1% of a CPU, which for a GB takes minutes. So, four times a
// second, this reads a few runtime metrics and the memory charged to jobs
// (cheap: no stop-the-world, a handful of atomic loads), and when either
//
//   - jobs' memory fell from its peak (since the last release) by more
//     than max(64 MiB, a quarter of that peak), with that much heap still
//     held: the deleted bodies are garbage the collector has not been
//     asked to find; or
//   - the heap the runtime keeps (in use, fragments and free pages not yet
//     returned) exceeds what the collector's goal needs by more than
//     max(64 MiB, a quarter of it): collected, but not given back,
//
// it calls debug.FreeOSMemory (a collection, then every free page back to
// the system), at most once a second. A server whose queue holds steady
// never gets there, however fast jobs churn: neither the jobs' memory nor
// the heap goal moves. A release that frees less than 64 MiB (the heap is
// fragmented, or the bodies are still referenced) doubles the wait before
// the next one, up to a minute, so a condition that FreeOSMemory cannot fix
// does not cost a collection every second.
func GiveMemoryBack(jobs func() int64, log zerolog.Logger) {
	r := &releaser{jobs: jobs, gap: minReleaseGap, free: debug.FreeOSMemory, log: log,
		sample: []metrics.Sample{
			{Name: "/memory/classes/heap/objects:bytes"},
			{Name: "/memory/classes/heap/unused:bytes"},
			{Name: "/memory/classes/heap/free:bytes"},
			{Name: "/gc/heap/goal:bytes"},
		}}
	go r.run()
}

const (
	releaseTick   = 250 * time.Millisecond
	minReleaseGap = time.Second
	maxReleaseGap = 64 * time.Second
	minRelease    = 64 << 20 // bytes: smaller drops are left to the scavenger
)

type releaser struct {
	jobs     func() int64
	free     func()
	sample   []metrics.Sample
	peakJobs int64
	floor    uint64 // the least heap kept since the last release, that release included
	last     time.Time
	gap      time.Duration
	log      zerolog.Logger
}

// heapState is what a decision looks at.
type heapState struct {
	jobs     int64  // memory charged to jobs
	retained uint64 // heap not returned to the system: objects (garbage included), fragments, free pages
	goal     uint64 // the collector's heap goal
}

func (r *releaser) run() {
	for range time.Tick(releaseTick) {
		s := r.read()
		if !r.due(s, time.Now()) {
			continue
		}
		start := time.Now()
		r.free()
		after := r.read()
		r.released(s, after, time.Now())
		r.log.Debug().Int64("job-memory-bytes", after.jobs).Uint64("heap-before", s.retained).
			Uint64("heap-after", after.retained).Uint64("objects-after", r.sample[0].Value.Uint64()).
			Dur("took", time.Since(start)).Dur("next-after", r.gap).
			Msg("returned free memory to the system")
	}
}

func (r *releaser) read() heapState {
	metrics.Read(r.sample)
	return heapState{
		jobs:     r.jobs(),
		retained: r.sample[0].Value.Uint64() + r.sample[1].Value.Uint64() + r.sample[2].Value.Uint64(),
		goal:     r.sample[3].Value.Uint64(),
	}
}

// due decides whether to release now.
func (r *releaser) due(s heapState, now time.Time) bool {
	r.peakJobs = max(r.peakJobs, s.jobs)
	r.floor = min(r.floor, s.retained)
	if now.Sub(r.last) < r.gap {
		return false
	}
	if drop := r.peakJobs - s.jobs; drop > max(minRelease, r.peakJobs/4) && s.retained > uint64(s.jobs)+minRelease {
		return true
	}
	need := max(s.goal, r.floor)
	return s.retained > need && s.retained-need > max(minRelease, s.retained/4)
}

// released records a release: before and after are the states around it.
// The jobs' memory is measured again from what it was before: jobs deleted
// while the collection ran were still alive to it, and their memory is
// still held, so it counts as a drop for the next release.
func (r *releaser) released(before, after heapState, now time.Time) {
	r.last = now
	r.peakJobs = before.jobs
	r.floor = after.retained
	if before.retained < after.retained+minRelease {
		r.gap = min(2*r.gap, maxReleaseGap)
	} else {
		r.gap = minReleaseGap
	}
}
