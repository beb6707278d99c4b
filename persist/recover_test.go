package persist

import (
	"github.com/beanpole/beanpole/record"

	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func cloneJobs(m map[uint64]*record.Job) map[uint64]*record.Job {
	out := make(map[uint64]*record.Job, len(m))
	for id, j := range m {
		c := *j
		out[id] = &c
	}
	return out
}

func checkJobs(t testing.TB, what string, got []*record.Job, want map[uint64]*record.Job) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: recovered %v, want %d jobs", what, ids(got), len(want))
	}
	for _, g := range got {
		if w := want[g.ID]; w == nil || !sameJob(g, w) {
			t.Fatalf("%s: job %d recovered as %+v, want %+v", what, g.ID, g, w)
		}
	}
}

// TestTornTailEveryOffset cuts the last record at every byte offset, both
// by truncating the file (a short write) and by zeroing the rest
// (preallocated space never written), and checks that exactly the records
// before it come back, and that the log carries on correctly after the
// repair.
func TestTornTailEveryOffset(t *testing.T) {
	for _, last := range []string{"put", "delete"} {
		t.Run(last, func(t *testing.T) {
			dir := t.TempDir()
			opts := fastOpts(dir)
			l, _ := mustOpen(t, opts)
			m := newModel(t, l)
			a := m.mustPut("default", 1, 0, []byte("first\r\n"))
			b := m.mustPut("other", 2, time.Second, []byte("second\r\n"))
			m.bury(a, 9)
			m.release(b, 3, 0)
			prefix := cloneJobs(m.jobs)
			if last == "put" {
				body := make([]byte, 400) // crosses a 512-byte sector boundary
				for i := range body {
					body[i] = byte('a' + i%26)
				}
				m.mustPut("default", 4, 0, body)
			} else {
				m.del(a)
			}
			full := cloneJobs(m.jobs)
			l.Close()

			files := segFiles(t, dir)
			seg := files[0]
			offs, ends := frames(t, seg)
			start, end := offs[len(offs)-1], ends[len(ends)-1]
			orig, _ := os.ReadFile(seg)
			// Zeroing bytes that were zero already changes nothing: the
			// record is only torn if a non-zero byte is lost.
			lastNZ := start
			for i := start; i < end; i++ {
				if orig[i] != 0 {
					lastNZ = i + 1
				}
			}

			d := scratchDir(t)
			ropts := Options{Dir: d, SegmentSize: opts.SegmentSize, FS: noSyncFS{}}
			for cut := start; cut <= end; cut++ {
				for _, zero := range []bool{false, true} {
					fillDir(t, dir, d)
					p := filepath.Join(d, filepath.Base(seg))
					data := append([]byte(nil), orig...)
					if zero {
						clear(data[cut:end])
					} else {
						data = data[:cut]
					}
					if err := os.WriteFile(p, data, 0o600); err != nil {
						t.Fatal(err)
					}
					l, rec := mustOpen(t, ropts)
					intact := cut == end || (zero && cut >= lastNZ)
					want := prefix
					if intact {
						want = full
					}
					checkJobs(t, fmt.Sprintf("cut %d in [%d,%d] zero=%v", cut, start, end, zero), rec.Jobs, want)
					torn := cut > start && !intact
					if torn != (len(rec.Problems) == 1 && rec.Problems[0].Kind == TornTail) || (!torn && len(rec.Problems) != 0) {
						t.Fatalf("cut %d (zero=%v): problems %v", cut, zero, rec.Problems)
					}
					if (cut-start)%16 != 0 && cut != end && cut != start+1 {
						l.Close()
						continue
					}
					// The log continues after the repaired tail.
					m2 := newModel(t, l)
					m2.jobs, m2.next = cloneJobs(want), rec.MaxID
					id := m2.mustPut("default", 5, 0, []byte("after repair"))
					if id <= rec.MaxID {
						t.Fatal("id reused")
					}
					l.Close()
					l, rec = mustOpen(t, ropts)
					if len(rec.Problems) != 0 {
						t.Fatalf("cut %d: problems after repair: %v", cut, rec.Problems)
					}
					checkJobs(t, "after repair", rec.Jobs, m2.jobs)
					l.Close()
				}
			}
		})
	}
}

// buildTwoSegments writes a log that spans a sealed segment and the tail,
// with every kind of record, and returns its model.
func buildTwoSegments(t *testing.T, dir string) *model {
	l, _ := mustOpen(t, Options{Dir: dir, SegmentSize: 1024})
	m := newModel(t, l)
	var live []uint64
	for i := range 14 {
		id := m.mustPut("t", uint32(i), 0, []byte("body body body"))
		live = append(live, id)
		switch i % 4 {
		case 1:
			m.bury(id, 7)
		case 2:
			m.release(id, 8, time.Second)
		case 3:
			m.del(live[i-2])
		}
	}
	m.kick(live[13])
	l.Close()
	if n := len(segFiles(t, dir)); n < 2 {
		t.Fatalf("want at least two segments, have %d", n)
	}
	return m
}

// TestBitFlips flips one bit at every byte of every segment (and a little
// of the zeros after the data) and checks that the damage is always
// reported and never yields a job state that did not exist.
func TestBitFlips(t *testing.T) {
	dir := t.TempDir()
	m := buildTwoSegments(t, dir)
	files := segFiles(t, dir)
	kinds := map[ProblemKind]int{}
	for _, seg := range files {
		orig, _ := os.ReadFile(seg)
		_, ends := frames(t, seg)
		if len(ends) == 0 {
			continue // a spare
		}
		limit := min(ends[len(ends)-1]+64, int64(len(orig)))
		d := scratchDir(t)
		for off := int64(0); off < limit; off++ {
			fillDir(t, dir, d)
			data := append([]byte(nil), orig...)
			data[off] ^= 1 << (off * 5 % 8)
			if err := os.WriteFile(filepath.Join(d, filepath.Base(seg)), data, 0o600); err != nil {
				t.Fatal(err)
			}
			l, rec, err := Open(Options{Dir: d, SegmentSize: 1024, FS: noSyncFS{}}, testLogger(t))
			if err != nil {
				t.Fatalf("%s offset %d: Open failed: %v", filepath.Base(seg), off, err)
			}
			if len(rec.Problems) == 0 {
				t.Fatalf("%s offset %d: flip not reported", filepath.Base(seg), off)
			}
			for _, p := range rec.Problems {
				kinds[p.Kind]++
			}
			for _, j := range rec.Jobs {
				if !m.historical(j) && !named(rec.Problems, j.ID) {
					t.Fatalf("%s offset %d: recovered a state that never existed: %+v", filepath.Base(seg), off, j)
				}
			}
			l.Close()
		}
	}
	t.Logf("problems by kind: %v", kinds)
	for _, k := range []ProblemKind{CorruptRecord, Unreadable, BadSegment, TornTail} {
		if kinds[k] == 0 {
			t.Errorf("no flip produced a %v problem", k)
		}
	}
}

// TestCorruptRecordSkipped: a record whose payload is damaged is skipped,
// named, and everything after it is still recovered.
func TestCorruptRecordSkipped(t *testing.T) {
	dir := t.TempDir()
	l, _ := mustOpen(t, fastOpts(dir))
	m := newModel(t, l)
	a := m.mustPut("t", 1, 0, []byte("aaaa"))
	b := m.mustPut("t", 2, 0, []byte("bbbb"))
	c := m.mustPut("t", 3, 0, []byte("cccc"))
	m.bury(c, 4)
	l.Close()

	seg := segFiles(t, dir)[0]
	offs, _ := frames(t, seg)
	data, _ := os.ReadFile(seg)
	// frames: id mark, put a, put b, put c, bury c. Damage b's body.
	data[offs[2]+frameHeaderSize+int64(record.FullSize(&record.Job{Tube: "t"}))+1] ^= 0x40
	os.WriteFile(seg, data, 0o600)

	for range 2 { // the report repeats on every start; nothing is lost twice
		l, rec := mustOpen(t, fastOpts(dir))
		want := cloneJobs(m.jobs)
		delete(want, b)
		checkJobs(t, "after corrupt record", rec.Jobs, want)
		if len(rec.Problems) != 1 || rec.Problems[0].Kind != CorruptRecord || len(rec.Problems[0].JobIDs) != 1 || rec.Problems[0].JobIDs[0] != b {
			t.Fatalf("problems %v", rec.Problems)
		}
		_ = a
		l.Close()
	}
}

// TestDamageInsideLastSegment: framing is lost in the middle of the last
// segment but intact records follow. That is not a torn write: it is
// reported loudly, the file is kept untouched as evidence, and new records
// go to a fresh segment.
func TestDamageInsideLastSegment(t *testing.T) {
	dir := t.TempDir()
	l, _ := mustOpen(t, fastOpts(dir))
	m := newModel(t, l)
	a := m.mustPut("t", 1, 0, []byte("aaaa"))
	b := m.mustPut("t", 2, 0, []byte("bbbb"))
	c := m.mustPut("t", 3, 0, []byte("cccc"))
	l.Close()
	seg := segFiles(t, dir)[0]
	offs, _ := frames(t, seg)
	data, _ := os.ReadFile(seg)
	data[offs[2]+1] ^= 0xff // b's frame length
	os.WriteFile(seg, data, 0o600)

	l, rec := mustOpen(t, fastOpts(dir))
	if len(rec.Problems) != 1 || rec.Problems[0].Kind != Unreadable || rec.Problems[0].Records != 1 || rec.Problems[0].JobIDs[0] != c {
		t.Fatalf("problems %v", rec.Problems)
	}
	checkJobs(t, "first open", rec.Jobs, map[uint64]*record.Job{a: m.jobs[a]})
	m.adopt(l, rec)
	delete(m.jobs, b)
	delete(m.jobs, c)
	d := m.mustPut("t", 4, 0, []byte("dddd"))
	if d <= c {
		t.Fatalf("id %d reused (c was %d)", d, c)
	}
	if l.FileOf(d) == 1 {
		t.Fatal("appended to the damaged segment")
	}
	l.Close()
	after, _ := os.ReadFile(seg)
	if string(after) != string(data) {
		t.Fatal("damaged segment was modified")
	}
	l, rec = mustOpen(t, fastOpts(dir))
	defer l.Close()
	if len(rec.Problems) != 1 || rec.Problems[0].Kind != Unreadable {
		t.Fatalf("second open problems %v", rec.Problems)
	}
	m.check(rec)
}

func TestMissingSegmentReported(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentSize: MinSegmentSize}
	l, _ := mustOpen(t, opts)
	m := newModel(t, l)
	for range 30 {
		m.mustPut("t", 0, 0, []byte("0123456789"))
	}
	l.Close()
	files := segFiles(t, dir)
	os.Remove(files[2])
	l, rec := mustOpen(t, opts)
	defer l.Close()
	found := false
	for _, p := range rec.Problems {
		found = found || p.Kind == MissingRecords
	}
	if !found {
		t.Fatalf("missing segment not reported: %v", rec.Problems)
	}
	if rec.MaxID != m.next {
		t.Fatalf("MaxID %d want %d", rec.MaxID, m.next)
	}
}

// named: is job id named by a problem? A skipped record leaves its job in a
// state that never existed (an update is missing), which is fine as long
// as it is reported. The id in a damaged record is unverified: the flipped
// bit may be in the id itself, so one bit off counts too.
func named(ps []Problem, id uint64) bool {
	for _, p := range ps {
		for _, n := range p.JobIDs {
			if x := n ^ id; x&(x-1) == 0 {
				return true
			}
		}
	}
	return false
}
