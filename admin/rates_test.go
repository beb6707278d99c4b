package admin

import (
	"testing"
	"time"
)

// Readings are kept at least rateGap apart, and an overview is rated
// against the newest kept that is between rateGap and rateMaxAge old.
func TestTubeRatesBaselineIsTheNewestOldEnough(t *testing.T) {
	var r tubeRates
	t0 := time.Unix(1000, 0)
	row := func(puts, dels uint64) []tubeRow { return []tubeRow{{Name: "q", TotalJobs: puts, CmdDelete: dels}} }
	if r.baseline(t0) != nil {
		t.Fatal("a baseline with no reading kept")
	}
	r.keep(readingOf(t0, row(10, 0)))
	r.keep(readingOf(t0.Add(300*time.Millisecond), row(11, 0))) // too soon after: not kept
	if b := r.baseline(t0.Add(500 * time.Millisecond)); b != nil {
		t.Fatalf("a baseline %v old", 500*time.Millisecond)
	}
	if b := r.baseline(t0.Add(rateGap)); b == nil || !b.at.Equal(t0) {
		t.Fatalf("baseline %v, want the reading at t0", b)
	}
	t2 := t0.Add(2 * time.Second)
	r.keep(readingOf(t2, row(30, 5)))
	// Half a second after the newest, the one before it is the baseline.
	if b := r.baseline(t2.Add(500 * time.Millisecond)); b == nil || !b.at.Equal(t0) {
		t.Fatalf("baseline %v, want the reading at t0", b)
	}
	if b := r.baseline(t2.Add(rateGap)); b == nil || !b.at.Equal(t2) {
		t.Fatalf("baseline %v, want the reading at t2", b)
	}
	if b := r.baseline(t2.Add(rateMaxAge + time.Millisecond)); b != nil {
		t.Fatalf("a baseline older than %v", rateMaxAge)
	}

	rows := []tubeRow{{Name: "q", TotalJobs: 50, CmdDelete: 9}, {Name: "new", TotalJobs: 4}, {Name: "remade"}}
	base := readingOf(t2, []tubeRow{{Name: "q", TotalJobs: 30, CmdDelete: 5}, {Name: "remade", TotalJobs: 7}})
	fillRates(rows, t2.Add(4*time.Second), base)
	if rows[0].PutRate == nil || *rows[0].PutRate != 5 || *rows[0].DeleteRate != 1 {
		t.Errorf("q: %v %v, want 5 and 1 a second", rows[0].PutRate, rows[0].DeleteRate)
	}
	if rows[1].PutRate != nil || rows[2].PutRate != nil {
		t.Errorf("a rate for a tube not in the baseline, or made again since")
	}
	for r, want := range map[float64]string{0: "0.0", 2.44: "2.4", 9.96: "10.0", 10.4: "10", 1234.5: "1235"} {
		if got := fmtRate(&r); got != want {
			t.Errorf("fmtRate(%v) = %q, want %q", r, got, want)
		}
	}
	if got := fmtRate(nil); got != "–" {
		t.Errorf("fmtRate(nil) = %q", got)
	}
}
