package memtune

import (
	"testing"
	"time"
)

func TestReleaseDecisions(t *testing.T) {
	const mib = 1 << 20
	t0 := time.Unix(1000, 0)
	type step struct {
		what       string
		at         time.Duration // since t0
		jobs       int64         // MiB
		retained   uint64        // MiB
		goal       uint64        // MiB
		want       bool
		afterJobs  int64  // MiB, the state after the release (when want)
		afterHeapM uint64 // MiB
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"a 2 GB backlog deleted, no collection since", []step{
			{what: "filling", at: 1 * time.Second, jobs: 1024, retained: 1100, goal: 2200},
			{what: "full", at: 2 * time.Second, jobs: 2048, retained: 2150, goal: 4200},
			{what: "a tenth deleted", at: 3 * time.Second, jobs: 1843, retained: 2150, goal: 4200},
			{what: "all deleted", at: 4 * time.Second, jobs: 0, retained: 2150, goal: 4200, want: true, afterHeapM: 8},
			{what: "idle after", at: 6 * time.Second, jobs: 0, retained: 8, goal: 8},
		}},
		{"steady queue with fast churn", []step{
			{at: 1 * time.Second, jobs: 500, retained: 1000, goal: 1100},
			{at: 2 * time.Second, jobs: 520, retained: 1050, goal: 1100},
			{at: 3 * time.Second, jobs: 480, retained: 1080, goal: 1050},
			{at: 4 * time.Second, jobs: 510, retained: 600, goal: 1050}, // just swept
			{at: 5 * time.Second, jobs: 490, retained: 1060, goal: 1000},
		}},
		{"small queue, heap churning: within 64 MiB", []step{
			{at: 1 * time.Second, jobs: 40, retained: 120, goal: 110},
			{at: 2 * time.Second, jobs: 0, retained: 120, goal: 70},
		}},
		{"collected but not given back (connections left)", []step{
			{at: 1 * time.Second, jobs: 0, retained: 900, goal: 900},
			{at: 2 * time.Second, jobs: 0, retained: 900, goal: 100, want: true, afterHeapM: 60},
			{what: "within a second of the last", at: 2500 * time.Millisecond, jobs: 0, retained: 900, goal: 100},
		}},
		{"a fragmented heap that a release cannot shrink", []step{
			{at: 1 * time.Second, jobs: 0, retained: 400, goal: 50, want: true, afterHeapM: 390},
			{what: "nothing new to give back", at: 3 * time.Second, jobs: 0, retained: 400, goal: 50},
			{what: "it grows and shrinks again", at: 5 * time.Second, jobs: 0, retained: 1400, goal: 1500},
			{at: 7 * time.Second, jobs: 0, retained: 1400, goal: 60, want: true, afterHeapM: 390},
		}},
		{"a slow drain releases in steps", []step{
			{at: 1 * time.Second, jobs: 1000, retained: 1100, goal: 2100},
			{at: 2 * time.Second, jobs: 800, retained: 1100, goal: 2100},
			{at: 3 * time.Second, jobs: 700, retained: 1100, goal: 2100, want: true, afterJobs: 700, afterHeapM: 760},
			{what: "the peak is now the jobs at the release", at: 4 * time.Second, jobs: 600, retained: 760, goal: 1400},
			{at: 5 * time.Second, jobs: 500, retained: 760, goal: 1400, want: true, afterJobs: 500, afterHeapM: 540},
		}},
		{"the drain ends while the release runs", []step{
			{at: 1 * time.Second, jobs: 512, retained: 600, goal: 1100},
			{what: "half deleted", at: 2 * time.Second, jobs: 256, retained: 600, goal: 1100, want: true, afterJobs: 0, afterHeapM: 270},
			{what: "the rest was deleted after the collection marked it", at: 3 * time.Second, jobs: 0, retained: 270, goal: 20, want: true, afterHeapM: 10},
			{what: "then nothing more", at: 5 * time.Second, jobs: 0, retained: 10, goal: 10},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &releaser{gap: minReleaseGap}
			for _, s := range c.steps {
				st := heapState{jobs: s.jobs * mib, retained: s.retained * mib, goal: s.goal * mib}
				now := t0.Add(s.at)
				if got := r.due(st, now); got != s.want {
					t.Fatalf("at %v (%s): due = %v, want %v", s.at, s.what, got, s.want)
				}
				if s.want {
					r.released(st, heapState{jobs: s.afterJobs * mib, retained: s.afterHeapM * mib, goal: s.afterHeapM * mib}, now)
				}
			}
		})
	}
}

// A release that frees little doubles the wait before the next one; one
// that frees a lot resets it.
func TestReleaseBacksOff(t *testing.T) {
	const mib = 1 << 20
	r := &releaser{gap: minReleaseGap}
	now := time.Unix(1000, 0)
	big := heapState{retained: 1000 * mib, goal: 10 * mib}
	for i, want := range []time.Duration{2, 4, 8, 16, 32, 64, 64} {
		r.released(big, big, now)
		if r.gap != want*time.Second {
			t.Fatalf("after %d fruitless releases: gap %v, want %v s", i+1, r.gap, want)
		}
	}
	r.released(big, heapState{retained: 10 * mib}, now)
	if r.gap != minReleaseGap {
		t.Fatalf("after a release of 990 MiB: gap %v", r.gap)
	}
}
