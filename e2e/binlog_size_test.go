package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// -s is checked at start-up: a negative size is refused with a clear
// message (it used to saturate into "every put is OUT_OF_MEMORY"), and a
// size past 1 GiB is clamped with a warning (it used to preallocate files
// of that size for a few tiny jobs).
func TestBinlogSizeIsValidated(t *testing.T) {
	skipLegacy(t, "upstream reads -s into a C int")
	t.Parallel()
	code, out := blRunToExit(t, "-b", t.TempDir(), "-s", "-5")
	if code != 5 || !strings.Contains(out, "invalid size: -5") {
		t.Fatalf("-s -5: exit %d, output %q; want exit 5 and \"invalid size: -5\"", code, out)
	}

	dir := t.TempDir()
	s := blStart(t, dir, "-s", "5000000000")
	c := s.dial(t)
	put(t, c, 0, 0, 60, "tiny", 1)
	if got := stats(t, c)["binlog-max-size"]; got != "1073741824" {
		t.Fatalf("binlog-max-size %s, want 1073741824", got)
	}
	crWaitLog(t, s, "binlog size was set to 1073741824")
	files, _ := filepath.Glob(filepath.Join(dir, "binlog.*"))
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil && fi.Size() > 1<<30 {
			t.Fatalf("%s is %d bytes, more than the 1 GiB clamp", f, fi.Size())
		}
	}
}
