package admin

import (
	"testing"

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
