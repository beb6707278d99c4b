package engine

import "time"

// Latency histograms and TTR timeouts, per tube, beyond what upstream
// counts:
//
//   - wait: from a job becoming ready (its put, or a kick, a release, its
//     delay or TTR running out) to the reserve that takes it;
//   - run: from a reserve (or the last touch) to the delete by the worker
//     holding the job;
//   - timeouts: reserved jobs whose TTR ran out (upstream counts them
//     server-wide only, as job-timeouts).
//
// They are updated under the tube's lock, which the reserve and the delete
// hold anyway: no atomics, no shared cache line. While a job is ready its
// deadline field is free (it is only read for delayed and reserved jobs),
// so it holds the time the job became ready; a Job stays 128 bytes. A
// tube's histograms are allocated on its first reserve.

// LatencyBounds are the histograms' bucket upper bounds; a last bucket
// takes what is above them.
var LatencyBounds = [...]time.Duration{
	time.Millisecond, 5 * time.Millisecond, 25 * time.Millisecond, 100 * time.Millisecond,
	500 * time.Millisecond, time.Second, 5 * time.Second, 30 * time.Second,
	2 * time.Minute, 10 * time.Minute, time.Hour,
}

// Histogram counts observations per bucket of LatencyBounds (not
// cumulative; the last is above every bound) and their sum.
type Histogram struct {
	Counts [len(LatencyBounds) + 1]uint64
	Sum    time.Duration
}

func (h *Histogram) observe(d int64) {
	i := 0
	for i < len(LatencyBounds) && d > int64(LatencyBounds[i]) {
		i++
	}
	h.Counts[i]++
	h.Sum += time.Duration(d)
}

// Add adds o's observations to h (to sum tubes).
func (h *Histogram) Add(o Histogram) {
	for i := range h.Counts {
		h.Counts[i] += o.Counts[i]
	}
	h.Sum += o.Sum
}

type latency struct {
	wait, run Histogram
	timeouts  uint64
}

// observeWait records how long j, ready until now, waited. Caller holds
// t.mu, j is still ready.
func (t *Tube) observeWait(j *Job, now int64) {
	if t.lat == nil {
		t.lat = &latency{}
	}
	t.lat.wait.observe(max(now-j.deadline, 0))
}

// observeRun records how long j was reserved (since the reserve or the
// last touch) before its delete. Caller holds t.mu; j is still reserved.
func (t *Tube) observeRun(j *Job, now int64) {
	if t.lat == nil {
		t.lat = &latency{}
	}
	t.lat.run.observe(max(now-(j.deadline-j.ttrNs()), 0))
}

// observeTimeout counts a reserved job whose TTR ran out. Caller holds t.mu.
func (t *Tube) observeTimeout() {
	if t.lat == nil {
		t.lat = &latency{}
	}
	t.lat.timeouts++
}

// Latency reads the named tube's histograms; ok is false when the tube
// does not exist or has not had a job reserved yet.
func (e *Engine) Latency(tube []byte) (wait, run Histogram, ok bool) {
	t := e.reg.lookup(tube)
	if t == nil {
		return wait, run, false
	}
	t.mu.Lock()
	if ok = t.lat != nil; ok {
		wait, run = t.lat.wait, t.lat.run
	}
	t.mu.Unlock()
	return wait, run, ok
}

// Timeouts is how many of the named tube's reserved jobs had their TTR run
// out (0 when the tube does not exist or has not had a job reserved).
func (e *Engine) Timeouts(tube []byte) uint64 {
	t := e.reg.lookup(tube)
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lat == nil {
		return 0
	}
	return t.lat.timeouts
}
