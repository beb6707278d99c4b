package persist

import (
	"github.com/beanpole/beanpole/record"

	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	l, rec := mustOpen(t, fastOpts(dir))
	if len(rec.Jobs) != 0 || rec.MaxID != 0 || len(rec.Problems) != 0 {
		t.Fatalf("fresh dir recovered %+v", rec)
	}
	m := newModel(t, l)
	a := m.mustPut("default", 10, 0, []byte("a\r\n"))
	b := m.mustPut("tube-b", 20, 5*time.Second, []byte("bee\r\n"))
	c := m.mustPut("default", 30, 0, nil)
	d := m.mustPut("default", 40, 0, []byte("dee\r\n"))
	e := m.mustPut("x", 50, 0, []byte("e"))
	f := m.mustPut("x", 60, 0, []byte("f"))
	g := m.mustPut("x", 70, 0, []byte("g"))
	for _, err := range []error{
		m.bury(a, 5),            // buried with a new pri
		m.kick(b),               // delayed → ready
		m.release(c, 1, 0),      // delay 0 keeps the new pri (#597)
		m.release(d, 2, 3e9),    // delayed again
		m.del(e),                // gone for good
		m.bury(f, 7),            // buried after a: FIFO order a, f
		m.bury(c, 3), m.kick(c), // kick after bury
		m.release(g, 77, 0), // #597 again, as the last word on g
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := l.FileOf(a); got == 0 {
		t.Fatalf("FileOf(%d) = 0", a)
	}
	if got := l.FileOf(e); got != 0 {
		t.Fatalf("FileOf(deleted) = %d", got)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(record.AppendDelete(nil, a), nil); err != ErrClosed {
		t.Fatalf("Append after Close: %v", err)
	}

	// Twice: replay must not re-apply anything (upstream #668 bumped
	// `buries` on every restart).
	for range 2 {
		l, rec = mustOpen(t, fastOpts(dir))
		m.check(rec)
		if len(rec.Problems) != 0 {
			t.Fatalf("clean log reported %v", rec.Problems)
		}
		if rec.MaxID != g {
			t.Fatalf("MaxID %d want %d", rec.MaxID, g)
		}
		l.Close()
	}
	l, rec = mustOpen(t, fastOpts(dir))
	defer l.Close()
	byID := map[uint64]*record.Job{}
	for _, j := range rec.Jobs {
		byID[j.ID] = j
	}
	if byID[c].Pri != 3 || byID[c].State != record.StateReady || byID[c].Counters.Kicks != 1 {
		t.Fatalf("job c: %+v", byID[c])
	}
	if byID[g].Pri != 77 || byID[g].State != record.StateReady || byID[g].Counters.Releases != 1 {
		t.Fatalf("release with delay 0 lost its priority: %+v", byID[g])
	}
	if byID[a].Counters.Buries != 1 || byID[a].BuriedSeq >= byID[f].BuriedSeq {
		t.Fatalf("buried order or count lost: a %+v f %+v", byID[a], byID[f])
	}
}

// TestRestartCycles runs random operations over many restarts with tiny
// segments (lots of rotation and reclaiming) and checks every recovery
// against the model.
func TestRestartCycles(t *testing.T) {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(1, 2))
	opts := Options{Dir: dir, SegmentSize: 1024}
	var m *model
	for cycle := range 15 {
		l, rec := mustOpen(t, opts)
		if m == nil {
			m = newModel(t, l)
		}
		m.check(rec)
		if len(rec.Problems) != 0 {
			t.Fatalf("cycle %d: problems %v", cycle, rec.Problems)
		}
		m.adopt(l, rec)
		for range 60 {
			var live []uint64
			for id := range m.jobs {
				live = append(live, id)
			}
			var err error
			switch op := r.IntN(10); {
			case op < 4 || len(live) == 0:
				body := make([]byte, r.IntN(100))
				_, err = m.put(fmt.Sprintf("t%d", r.IntN(3)), uint32(r.IntN(100)), time.Duration(r.IntN(2))*time.Second, body)
			case op < 6:
				err = m.del(live[r.IntN(len(live))])
			case op < 7:
				err = m.bury(live[r.IntN(len(live))], uint32(r.IntN(100)))
			case op < 8:
				err = m.kick(live[r.IntN(len(live))])
			default:
				err = m.release(live[r.IntN(len(live))], uint32(r.IntN(100)), time.Duration(r.IntN(2))*time.Second)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSegmentRotation(t *testing.T) {
	dir := t.TempDir()
	l, _ := mustOpen(t, Options{Dir: dir, SegmentSize: MinSegmentSize})
	m := newModel(t, l)
	m.async = true
	for i := range 200 {
		m.mustPut("default", uint32(i), 0, []byte(fmt.Sprintf("job %d payload\r\n", i)))
	}
	m.flush()
	st := l.Stats()
	if st.CurrentIndex < 20 {
		t.Fatalf("expected many segments, current index %d", st.CurrentIndex)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Each segment is readable on its own: records never straddle.
	files := segFiles(t, dir)
	for _, p := range files {
		buf, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		seq, _ := parseSegName(filepath.Base(p))
		sc := scanSegment(buf, seq, 0, func(*record.Record, uint64, int64) error { return nil })
		if sc.empty {
			continue // a spare
		}
		if sc.hdr != hdrOK || sc.dirty() || len(sc.bad) > 0 || sc.records == 0 {
			t.Fatalf("%s does not stand alone: %+v", p, sc)
		}
		if int64(len(buf)) > MinSegmentSize {
			t.Fatalf("%s is %d bytes, larger than the segment size", p, len(buf))
		}
	}
	l, rec := mustOpen(t, Options{Dir: dir, SegmentSize: MinSegmentSize})
	defer l.Close()
	m.check(rec)
}

func TestOversizedRecord(t *testing.T) {
	dir := t.TempDir()
	l, _ := mustOpen(t, fastOpts(dir))
	m := newModel(t, l)
	small := m.mustPut("default", 1, 0, []byte("small"))
	big := make([]byte, 20000) // five times the segment size
	for i := range big {
		big[i] = byte(i)
	}
	m.mustPut("default", 2, 0, big)
	m.mustPut("default", 3, 0, []byte("after"))
	if err := m.del(small); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l, rec := mustOpen(t, fastOpts(dir))
	defer l.Close()
	m.check(rec)
}

func TestIDHighWaterMark(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentSize: MinSegmentSize}
	l, _ := mustOpen(t, opts)
	m := newModel(t, l)
	var last uint64
	for range 5 {
		last = m.mustPut("default", 0, 0, []byte("x"))
	}
	// The highest ids are deleted...
	m.del(last)
	m.del(last - 1)
	l.Close()
	l, rec := mustOpen(t, opts)
	if rec.MaxID != last {
		t.Fatalf("MaxID %d, want %d", rec.MaxID, last)
	}
	// ...and then every segment that ever held them is reclaimed.
	m.adopt(l, rec)
	for id := range m.jobs {
		m.del(id)
	}
	for range 100 {
		id := m.mustPut("default", 0, 0, []byte("churn"))
		m.del(id)
		last = id
	}
	first := segFiles(t, dir)[0]
	if filepath.Base(first) == "binlog.1" {
		t.Fatalf("old segments were not reclaimed: %v", segFiles(t, dir))
	}
	l.Close()
	l, rec = mustOpen(t, opts)
	defer l.Close()
	if len(rec.Jobs) != 0 || rec.MaxID != last {
		t.Fatalf("recovered %d jobs, MaxID %d; want 0 jobs, MaxID %d", len(rec.Jobs), rec.MaxID, last)
	}
}

func TestDirMustExist(t *testing.T) {
	if _, _, err := Open(Options{Dir: filepath.Join(t.TempDir(), "nope")}, testLogger(t)); err == nil {
		t.Fatal("Open created or accepted a missing directory")
	}
}

// An upstream binlog is imported, not refused: here a torn one, with no
// whole record, becomes an empty log of beanpole's and the file goes to
// beanstalkd-import/.
func TestUpstreamBinlogIsImported(t *testing.T) {
	dir := t.TempDir()
	// beanstalkd v7: an int32 version, then records.
	if err := os.WriteFile(filepath.Join(dir, "binlog.1"), []byte{7, 0, 0, 0, 1, 2, 3}, 0o600); err != nil {
		t.Fatal(err)
	}
	l, rec := mustOpen(t, Options{Dir: dir})
	if len(rec.Jobs) != 0 {
		t.Fatalf("%d jobs from a binlog with no whole record", len(rec.Jobs))
	}
	l.Close()
	if _, err := os.Stat(filepath.Join(dir, "beanstalkd-import", "binlog.1")); err != nil {
		t.Fatalf("the upstream file was not moved aside: %v", err)
	}
}

// TestSegmentSizeChange: -s may change between runs.
func TestSegmentSizeChange(t *testing.T) {
	dir := t.TempDir()
	var m *model
	for _, size := range []int64{1024, 8192, MinSegmentSize, 0} {
		l, rec := mustOpen(t, Options{Dir: dir, SegmentSize: size})
		if m == nil {
			m = newModel(t, l)
		}
		m.check(rec)
		m.adopt(l, rec)
		for range 30 {
			id := m.mustPut("t", 0, 0, []byte("resize me please"))
			if id%2 == 0 {
				m.del(id)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
