package admin

import (
	"testing"

	"github.com/beanpole/beanpole/codec"
	"github.com/beanpole/beanpole/engine"
)

func TestFmtDur(t *testing.T) {
	for secs, want := range map[float64]string{0: "0s", 59.4: "59s", 60: "1m0s", 170: "2m50s", 3599: "59m59s", 3600: "1h0m", 3900: "1h5m", 90000: "25h0m"} {
		if got := fmtDur(secs); got != want {
			t.Errorf("fmtDur(%v) = %q, want %q", secs, got, want)
		}
	}
}

// A body is shown as text when it is printable UTF-8 (cut in the middle of
// a rune too), otherwise as hex; a cut body says so.
func TestShowBody(t *testing.T) {
	for _, tc := range []struct {
		head      string
		size      int
		text      string
		hex, more bool
	}{
		{"hello\tworld", 11, "hello\tworld", false, false},
		{"caf\xc3", 10, "caf\xc3", false, true}, // é cut after its first byte
		{"\x00\x01ab", 4, "00 01 61 62", true, false},
		{"<script>", 100, "<script>", false, true}, // escaped by the template, not here
		{"a\x1bb", 3, "61 1b 62", true, false},
	} {
		b := showBody(engine.JobView{Head: []byte(tc.head), Size: tc.size})
		if b.Text != tc.text || b.Hex != tc.hex || b.Truncated != tc.more {
			t.Errorf("showBody(%q): %+v", tc.head, b)
		}
	}
}

// The tube page's percentiles interpolate within the bucket that holds
// them, as histogram_quantile does, and say "> 1h" above the last bound.
func TestLatencyPercentilesInterpolateInTheirBucket(t *testing.T) {
	var h engine.Histogram
	h.Counts[0] = 50 // ≤ 1ms
	h.Counts[1] = 49 // 1ms–5ms
	h.Counts[2] = 1  // 5ms–25ms
	if got := latencyOf(&h); got != (latencyText{N: 100, P50: "1.0ms", P99: "5.0ms"}) {
		t.Errorf("%+v", got)
	}
	h.Counts[2] = 0
	h.Counts[len(h.Counts)-1] = 1
	if got := latencyOf(&h); got.P99 != "5.0ms" || got.P50 != "1.0ms" {
		t.Errorf("%+v", got)
	}
	h = engine.Histogram{}
	h.Counts[len(h.Counts)-1] = 3
	if got := latencyOf(&h); got.P50 != "> 1h0m" {
		t.Errorf("all above the last bound: %+v", got)
	}
	h = engine.Histogram{}
	h.Counts[6] = 10 // 1s–5s
	if got := latencyOf(&h); got.P50 != "3.0s" || got.P99 != "5.0s" {
		t.Errorf("%+v", got)
	}
	if got := latencyOf(&engine.Histogram{}); got != (latencyText{}) {
		t.Errorf("no observations: %+v", got)
	}
}

// A tube's page opens on a list that has jobs: ready, else delayed, else
// buried.
func TestTubePageOpensOnANonEmptyList(t *testing.T) {
	for _, c := range []struct {
		ts   codec.TubeStats
		want string
	}{
		{codec.TubeStats{}, "ready"},
		{codec.TubeStats{CurrentJobsReady: 1, CurrentJobsBuried: 3}, "ready"},
		{codec.TubeStats{CurrentJobsDelayed: 2, CurrentJobsBuried: 3}, "delayed"},
		{codec.TubeStats{CurrentJobsBuried: 3, CurrentJobsReserved: 1}, "buried"},
	} {
		if got := firstState(&c.ts); got != c.want {
			t.Errorf("%+v: %s, want %s", c.ts, got, c.want)
		}
	}
}
