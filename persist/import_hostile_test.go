package persist

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	ut "github.com/beanpole/beanpole/persist/upstream/upstreamtest"
)

// within runs f and fails t if it has not returned after limit: what it
// guards against is a hang.
func within(t *testing.T, limit time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s: still running after %v", what, limit)
	}
}

// A binlog.N that is not a regular file (a named pipe here, which opening
// would wait on forever) is neither opened nor read: the dry run and the
// import report it and go on, and the import moves it aside with
// upstream's files so that beanpole's own log never meets it.
func TestImportSkipsFilesThatAreNotRegular(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "binlog.1", ut.File(7, 64, ut.Put(1, "t", "one\r\n")))
	if err := syscall.Mkfifo(filepath.Join(dir, "binlog.2"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := dir + "/binlog.2 is a named pipe (FIFO), not a regular file: it is not read; the import moves it to " + dir + "/beanstalkd-import"
	var rep *ImportReport
	var err error
	within(t, time.Minute, "the dry run", func() { rep, err = PlanImport(dir) })
	if err != nil || rep.Jobs != 1 || !strings.Contains(rep.String(), "skipped: "+want) {
		t.Fatalf("dry run: %v\n%s", err, rep)
	}
	var rec *Recovered
	within(t, time.Minute, "Open", func() {
		var l *Log
		l, rec, err = Open(Options{Dir: dir, SegmentSize: smallSegments}, testLogger(t))
		if err == nil {
			l.Close()
		}
	})
	if err != nil || len(rec.Jobs) != 1 || rec.Jobs[0].ID != 1 {
		t.Fatalf("Open: %v", err)
	}
	if st, err := os.Lstat(filepath.Join(dir, importArchive, "binlog.2")); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the named pipe was not moved aside: %v", err)
	}
}

// Beside beanpole's own log, a binlog.N that is not a regular file (a
// named pipe, which opening would wait on forever, a dangling or looping
// symbolic link) is never opened: recovery reports it, reads the rest,
// leaves it where it is and never gives its number to a new segment.
func TestRecoverySkipsFilesThatAreNotRegular(t *testing.T) {
	dir := t.TempDir()
	l, _ := mustOpen(t, fastOpts(dir))
	m := newModel(t, l)
	id := m.mustPut("t", 1, 0, []byte("one\r\n"))
	l.Close()
	if err := syscall.Mkfifo(filepath.Join(dir, "binlog.5"), 0o600); err != nil {
		t.Fatal(err)
	}
	for n, to := range map[string]string{"binlog.6": "nowhere", "binlog.7": "binlog.7"} {
		if err := os.Symlink(to, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	var rec *Recovered
	within(t, time.Minute, "Open", func() { l, rec = mustOpen(t, fastOpts(dir)) })
	defer l.Close()
	var got []string
	for _, p := range rec.Problems {
		got = append(got, p.String())
	}
	want := []string{
		"binlog.5 offset 0: not a regular file (a named pipe (FIFO): not read, and its number is not used again)",
		`binlog.6 offset 0: not a regular file (a dangling symbolic link (to "nowhere"): not read, and its number is not used again)`,
		`binlog.7 offset 0: not a regular file (a looping symbolic link (to "binlog.7"): not read, and its number is not used again)`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(rec.Jobs) != 1 || rec.Jobs[0].ID != id {
		t.Fatalf("recovered %d jobs, want job %d", len(rec.Jobs), id)
	}
	m.adopt(l, rec)
	m.mustPut("t", 1, 0, make([]byte, 8192)) // past a segment: a new one
	for _, n := range []string{"binlog.5", "binlog.6", "binlog.7"} {
		if st, err := os.Lstat(filepath.Join(dir, n)); err != nil || st.Mode().IsRegular() {
			t.Errorf("%s was replaced or removed: %v", n, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "binlog.8")); err != nil {
		t.Errorf("the next segment is not binlog.8: %v", err)
	}
}

// A record naming the largest job id, and a header that does not match
// the records, are refused by the import even when damage is accepted,
// naming the file, the offset and the id, with nothing changed.
func TestImportRefusesWhatWouldReuseIDs(t *testing.T) {
	last := ut.Put(math.MaxUint64, "t", "last\r\n")
	mismatched := ut.File(7, 64, ut.Put(1, "t", "one\r\n"), ut.Put(2, "t", "two\r\n"))
	binary.LittleEndian.PutUint32(mismatched, 5)
	for name, c := range map[string]struct {
		file []byte
		want string
	}{
		"largest id": {ut.File(7, 64, ut.Put(1, "t", "one\r\n"), last),
			"binlog import refused: DIR/binlog.1: the record at offset 94 names job id 18446744073709551615, the largest there is"},
		"largest id past damage": {append(append(ut.File(7, 0, ut.Put(1, "t", "one\r\n")), 0x7f, 0x7f, 0x7f, 0x7f), ut.File(7, 64, ut.Put(2, "t", "two\r\n"), last)[4:]...),
			"binlog import refused: DIR/binlog.1: a record found past the damage at offset 94 names job id 18446744073709551615"},
		"header": {mismatched, "binlog import refused: DIR/binlog.1: the header says binlog version 5, but the records are those of version 7"},
	} {
		dir := t.TempDir()
		writeFile(t, dir, "binlog.1", c.file)
		want := strings.ReplaceAll(c.want, "DIR", dir)
		if _, err := PlanImport(dir); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: dry run: %v, want %q", name, err, want)
		}
		if _, err := Import(Options{Dir: dir, SegmentSize: smallSegments}, true, testLogger(t)); !errors.Is(err, ErrFormat) ||
			!strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "Nothing was changed") {
			t.Errorf("%s: import accepting damage: %v, want %q", name, err, want)
		}
		if exists(filepath.Join(dir, importArchive)) || exists(filepath.Join(dir, importStaging)) || !exists(filepath.Join(dir, "binlog.1")) {
			t.Errorf("%s: a refused import changed the directory", name)
		}
	}
}

// The report says how many ids are left when few are (fewer than 2^40),
// and says nothing of it otherwise; the import carries the highest id
// over, so the log hands out the next one.
func TestImportReportsFewIDsLeft(t *testing.T) {
	for _, c := range []struct {
		top  uint64
		want string
	}{
		{math.MaxUint64 - 2, "warning: only 2 job ids are left; once they are handed out, every put is answered INTERNAL_ERROR"},
		{math.MaxUint64 - (1<<40 - 1), "warning: only 1099511627775 job ids are left"},
		{math.MaxUint64 - 1<<40, ""},
	} {
		dir := t.TempDir()
		writeFile(t, dir, "binlog.1", ut.File(7, 64, ut.Put(1, "t", "one\r\n"), ut.Put(c.top, "t", "top\r\n")))
		rep, err := PlanImport(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := rep.String(); c.want == "" && strings.Contains(got, "warning") || !strings.Contains(got, c.want) {
			t.Errorf("top id %d: report\n%s\nwant %q", c.top, got, c.want)
		}
		l, rec, err := Open(Options{Dir: dir, SegmentSize: smallSegments}, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		if rec.MaxID != c.top {
			t.Errorf("top id %d: Open recovered max id %d", c.top, rec.MaxID)
		}
	}
}

// A sparse 20 GB file (a record, then a hole where beanstalkd's
// preallocation would be) is read as far as its data goes: the hole is
// passed over, not read as 20 GB of zeros.
func TestImportPassesOverHoles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "binlog.1")
	writeFile(t, dir, "binlog.1", ut.File(7, 0, ut.Put(1, "t", "one\r\n")))
	if err := os.Truncate(path, 20<<30); err != nil {
		t.Skipf("no sparse file of 20 GB here: %v", err)
	}
	start := time.Now()
	within(t, time.Minute, "the dry run", func() {
		rep, err := PlanImport(dir)
		if err != nil || rep.Jobs != 1 || len(rep.Damage) != 0 {
			t.Errorf("dry run: %v\n%s", err, rep)
		}
	})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the dry run took %v", took)
	}
}
