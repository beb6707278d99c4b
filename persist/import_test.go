package persist

import (
	"github.com/beanpole/beanpole/record"

	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	ut "github.com/beanpole/beanpole/persist/upstream/upstreamtest"
)

// upstreamFixture writes two upstream files into a new directory: jobs in
// every state over three tubes, a delete, a job moved by compaction while
// reserved, and the highest id only in a delete. It returns the directory
// and the jobs an import must carry over.
func upstreamFixture(t *testing.T) (string, []*record.Job) {
	t.Helper()
	one, two, three := ut.Put(1, "default", "one\r\n"), ut.Put(2, "mail", "two\r\n"), ut.Put(3, "mail", "three\r\n")
	four, five, six := ut.Put(4, "mail", "four\r\n"), ut.Put(5, "x", "gone\r\n"), ut.Put(6, "default", "six\r\n")
	two.Pri = 5
	deadline := time.Now().Add(time.Hour).UnixNano()
	delayed := two.Update(ut.Delayed)
	delayed.Delay, delayed.Deadline, delayed.Reserves, delayed.Releases = time.Hour, deadline, 1, 1
	buried3, buried4 := three.Update(ut.Buried), four.Update(ut.Buried)
	buried3.Reserves, buried3.Buries = 1, 1
	buried4.Reserves, buried4.Buries = 1, 1
	moved := one
	moved.State, moved.Reserves = ut.Reserved, 1
	dir := t.TempDir()
	writeFile(t, dir, "binlog.1", ut.File(7, 0, one, two, three, four, five, delayed, buried4, buried3, five.Update(ut.Deleted)))
	writeFile(t, dir, "binlog.2", ut.File(7, 4096, six, moved, ut.Put(9, "", "").Update(ut.Deleted)))
	writeFile(t, dir, "lock", nil)
	job := func(r ut.Record, state record.State, seq uint64) *record.Job {
		return &record.Job{ID: r.ID, Tube: r.Tube, Pri: r.Pri, State: state, TTR: time.Minute, CreatedAt: ut.Created, BuriedSeq: seq, Body: []byte(r.Body)}
	}
	want := []*record.Job{job(one, record.StateReady, 0), job(two, record.StateDelayed, 0), job(three, record.StateBuried, 2),
		job(four, record.StateBuried, 1), job(six, record.StateReady, 0)}
	want[0].Reserves = 1
	want[1].Delay, want[1].Deadline, want[1].Reserves, want[1].Releases = time.Hour, deadline, 1, 1
	want[2].Reserves, want[2].Buries = 1, 1
	want[3].Reserves, want[3].Buries = 1, 1
	return dir, want
}

// smallSegments keeps the logs these tests write and read back small.
const smallSegments = 64 << 10

func writeFile(t *testing.T, dir, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o400); err != nil {
		t.Fatal(err)
	}
}

// checkImported: the log in dir holds exactly want, ids go on after 9,
// upstream's files are in the archive and nothing else of the import is
// left.
func checkImported(t *testing.T, dir string, want []*record.Job) {
	t.Helper()
	l, rec := mustOpen(t, Options{Dir: dir, SegmentSize: smallSegments})
	defer l.Close()
	if len(rec.Jobs) != len(want) {
		t.Fatalf("%d jobs %v, want %v", len(rec.Jobs), ids(rec.Jobs), ids(want))
	}
	for i, j := range rec.Jobs {
		if !sameJob(j, want[i]) {
			t.Errorf("job %+v, want %+v", j, want[i])
		}
	}
	if rec.MaxID != 9 {
		t.Errorf("max id %d, want 9 (a deleted job's)", rec.MaxID)
	}
	archived, _ := filepath.Glob(filepath.Join(dir, importArchive, "binlog.*"))
	if len(archived) != 2 {
		t.Errorf("archive holds %v", archived)
	}
	if exists(filepath.Join(dir, importStaging)) {
		t.Errorf("the staging directory is still there")
	}
	files, err := classify(OSFS{}, dir)
	if err != nil || len(files.up) > 0 || files.ours == "" {
		t.Errorf("after the import the directory holds %+v (%v)", files, err)
	}
}

// Open imports: every live job with its state, priority, times, counters,
// body and buried order; ids after the highest upstream handed out; the
// upstream files moved aside; and a second Open reads beanpole's log only.
func TestImportCarriesEveryLiveJobOver(t *testing.T) {
	dir, want := upstreamFixture(t)
	checkImported(t, dir, want)
	checkImported(t, dir, want)
}

// A version 5 binlog (beanstalkd 1.4) is imported too; versions no
// beanstalkd wrote are refused by name, changing nothing.
func TestImportVersions(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "binlog.3", ut.File(5, 100, ut.Put(3, "old", "from 1.4\r\n")))
	l, rec := mustOpen(t, Options{Dir: dir, SegmentSize: smallSegments})
	l.Close()
	if len(rec.Jobs) != 1 || string(rec.Jobs[0].Body) != "from 1.4\r\n" || rec.Jobs[0].CreatedAt != ut.Created {
		t.Fatalf("jobs %+v", rec.Jobs)
	}

	dir = t.TempDir()
	writeFile(t, dir, "binlog.1", []byte{6, 0, 0, 0})
	_, _, err := Open(Options{Dir: dir, SegmentSize: smallSegments}, testLogger(t))
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "binlog.1") || !strings.Contains(err.Error(), "version 6") {
		t.Fatalf("version 6: %v", err)
	}
	if !exists(filepath.Join(dir, "binlog.1")) || exists(filepath.Join(dir, importArchive)) {
		t.Fatal("a refused import changed the directory")
	}
}

// Damage in the middle of a file is refused, naming the file, the offset
// and the jobs, with nothing changed; Import with acceptDamage imports
// what beanstalkd would have read. A torn tail is imported at once.
func TestImportDamage(t *testing.T) {
	recs := []ut.Record{ut.Put(1, "t", "a\r\n"), ut.Put(2, "t", "b\r\n"), ut.Put(3, "t", "c\r\n")}
	f := ut.File(7, 64, recs...)
	at := 4 + len(recs[0].Encode(7))
	f[at] = 0xff // job 2's namelen
	dir := t.TempDir()
	writeFile(t, dir, "binlog.1", f)
	_, _, err := Open(Options{Dir: dir, SegmentSize: smallSegments}, testLogger(t))
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "binlog.1 at offset 92") ||
		!strings.Contains(err.Error(), "job 3 are lost") || !strings.Contains(err.Error(), "--accept-damage") {
		t.Fatalf("damage: %v", err)
	}
	if names, _ := os.ReadDir(dir); len(names) != 2 { // binlog.1 and the lock
		t.Fatalf("a refused import left %v", names)
	}
	rep, err := Import(Options{Dir: dir, SegmentSize: smallSegments}, true, testLogger(t))
	if err != nil || rep.Jobs != 1 || len(rep.Refused()) != 1 {
		t.Fatalf("accepted: %+v, %v", rep, err)
	}
	l, rec := mustOpen(t, Options{Dir: dir, SegmentSize: smallSegments})
	l.Close()
	if len(rec.Jobs) != 1 || rec.Jobs[0].ID != 1 {
		t.Fatalf("after an accepted import: %v", ids(rec.Jobs))
	}

	torn := ut.File(7, 0, recs...)
	dir = t.TempDir()
	writeFile(t, dir, "binlog.1", append(torn[:len(torn)-3], make([]byte, 100)...))
	l, rec = mustOpen(t, Options{Dir: dir, SegmentSize: smallSegments})
	l.Close()
	if len(rec.Jobs) != 2 {
		t.Fatalf("a torn tail: jobs %v, want 1 and 2", ids(rec.Jobs))
	}
}

// A directory holding both logs, or an archive that already holds a file
// of the same name, is refused before anything is changed.
func TestImportRefusals(t *testing.T) {
	dir, _ := upstreamFixture(t)
	hdr := make([]byte, segHeaderSize)
	putSegHeader(hdr, 3)
	writeFile(t, dir, "binlog.3", hdr)
	if _, _, err := Open(Options{Dir: dir, SegmentSize: smallSegments}, testLogger(t)); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "holds both") {
		t.Fatalf("both logs: %v", err)
	}

	dir, _ = upstreamFixture(t)
	if err := os.Mkdir(filepath.Join(dir, importArchive), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, importArchive), "binlog.2", nil)
	if _, _, err := Open(Options{Dir: dir, SegmentSize: smallSegments}, testLogger(t)); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("archive: %v", err)
	}
	if exists(filepath.Join(dir, importStaging)) || !exists(filepath.Join(dir, "binlog.1")) {
		t.Fatal("a refused import changed the directory")
	}
}

// The dry run reports and changes nothing, not even a lock file.
func TestPlanImportChangesNothing(t *testing.T) {
	dir, want := upstreamFixture(t)
	if err := os.Remove(filepath.Join(dir, "lock")); err != nil {
		t.Fatal(err)
	}
	before := listing(t, dir)
	rep, err := PlanImport(dir)
	if err != nil {
		t.Fatal(err)
	}
	if after := listing(t, dir); !slices.Equal(before, after) {
		t.Fatalf("the dry run changed %v into %v", before, after)
	}
	s := rep.String()
	for _, line := range []string{"2 upstream beanstalkd binlog files (version 7), 12 records",
		"5 jobs to carry over: 2 ready, 1 delayed, 2 buried; ids up to 9, the next job gets 10",
		`tube "mail": 0 ready, 1 delayed, 2 buried`} {
		if !strings.Contains(s, line) {
			t.Errorf("report lacks %q:\n%s", line, s)
		}
	}
	if rep.Jobs != len(want) {
		t.Errorf("%d jobs, want %d", rep.Jobs, len(want))
	}
}

func listing(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			out = append(out, p+" "+fi.ModTime().String()+" "+fi.Mode().String())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// An import stopped after any number of changes to the disk (every later
// one failing, as if the process had died there) is finished or redone by
// the next Open: every job once, the upstream files aside.
func TestImportStoppedAtEveryChange(t *testing.T) {
	fixture, want := upstreamFixture(t)
	for n := 0; ; n++ {
		if n > 1000 {
			t.Fatal("the import never completed")
		}
		dir := copyDir(t, fixture)
		fsys := &crashFS{left: n}
		l, _, err := Open(Options{Dir: dir, FS: fsys, SegmentSize: smallSegments}, testLogger(t))
		if err == nil {
			l.Close()
		}
		checkImported(t, dir, want)
		if err == nil && !fsys.crashed() {
			t.Logf("the import and its first recovery make %d changes", n)
			return
		}
	}
}

// crashFS lets left changes to the disk through and fails every later one.
type crashFS struct {
	OSFS
	mu   sync.Mutex
	left int
	hit  bool
}

var errCrashed = errors.New("crashed here")

func (c *crashFS) change() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.left == 0 {
		c.hit = true
		return errCrashed
	}
	c.left--
	return nil
}

func (c *crashFS) crashed() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.hit }

func (c *crashFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE) != 0 {
		if err := c.change(); err != nil {
			return nil, err
		}
	}
	f, err := c.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return crashFile{f, c}, nil
}

func (c *crashFS) Rename(from, to string) error {
	if err := c.change(); err != nil {
		return err
	}
	return c.OSFS.Rename(from, to)
}

func (c *crashFS) Remove(name string) error {
	if err := c.change(); err != nil {
		return err
	}
	return c.OSFS.Remove(name)
}

func (c *crashFS) SyncDir(dir string) error {
	if err := c.change(); err != nil {
		return err
	}
	return c.OSFS.SyncDir(dir)
}

type crashFile struct {
	File
	c *crashFS
}

func (f crashFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.c.change(); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f crashFile) Sync() error {
	if err := f.c.change(); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f crashFile) Truncate(size int64) error {
	if err := f.c.change(); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

func (f crashFile) Allocate(size int64) error {
	if err := f.c.change(); err != nil {
		return err
	}
	return f.File.Allocate(size)
}
