package upstream

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The last record of a job wins; deletes remove; a reserved job comes
// back ready; a delayed one keeps its absolute deadline; counters, times
// and the first record's tube carry over; updates for jobs no full record
// named are ignored; the highest id counts deleted jobs.
func TestReplayLastRecordWins(t *testing.T) {
	a := base(1, "default", "a\r\n")
	b := base(2, "mail", "bb\r\n")
	c := base(3, "mail", "ccc\r\n")
	d := base(9, "default", "gone\r\n")
	released := b.Update(uDelayed)
	released.Pri, released.Delay, released.Deadline = 7, 10*time.Minute, 1767226200e9
	released.Reserves, released.Releases = 1, 1
	buried := c.Update(uBuried)
	buried.Reserves, buried.Timeouts, buried.Releases, buried.Buries = 2, 1, 1, 1
	kicked := buried
	kicked.State, kicked.Kicks = uReady, 1
	// Compaction moved a while reserved: a full record in state reserved.
	moved := a
	moved.State, moved.Reserves = uRsvd, 1
	rp := replay(t,
		file(layout7, 100, a, b, c, d, base(40, "", "").Update(uBuried), released),
		file(layout7, 0, buried, kicked, d.Update(uDeleted), moved, base(41, "", "").Update(uDeleted)))

	got := byID(rp)
	if len(got) != 3 {
		t.Fatalf("jobs %v, want 1, 2 and 3", got)
	}
	if j := got[1]; j.State != Ready || j.Reserves != 1 || j.Tube != "default" || j.Body.File != 2 {
		t.Errorf("job 1 (moved while reserved): %+v", j)
	}
	if j := got[2]; j.State != Delayed || j.Pri != 7 || j.Delay != 10*time.Minute || j.Deadline != 1767226200e9 || j.Releases != 1 {
		t.Errorf("job 2 (released with a delay): %+v", j)
	}
	if j := got[3]; j.State != Ready || j.Deadline != 0 || j.Kicks != 1 || j.Buries != 1 || j.Timeouts != 1 || j.TTR != time.Minute || j.CreatedAt != 1767225600e9 {
		t.Errorf("job 3 (buried, kicked): %+v", j)
	}
	if rp.MaxID() != 41 || rp.Records() != 11 || rp.ignored != 2 || len(rp.Damage()) != 0 {
		t.Errorf("max id %d, %d records, %d ignored, damage %v", rp.MaxID(), rp.Records(), rp.ignored, rp.Damage())
	}
}

// Buried jobs are ordered by when they were buried: a job moved by
// compaction keeps its place, a job kicked and buried again goes last.
func TestReplayKeepsBuriedOrder(t *testing.T) {
	a, b, c := base(1, "t", "a\r\n"), base(2, "t", "b\r\n"), base(3, "t", "c\r\n")
	movedA, movedB := a, b
	movedA.State, movedB.State = uBuried, uBuried
	rp := replay(t,
		file(layout7, 0, a, b, c, b.Update(uBuried), a.Update(uBuried), c.Update(uBuried), c.Update(uReady)),
		file(layout7, 0, movedA, movedB, c.Update(uBuried)))
	got := byID(rp)
	order := []uint64{2, 1, 3}
	for i := 1; i < len(order); i++ {
		if got[order[i-1]].BuriedSeq >= got[order[i]].BuriedSeq {
			t.Fatalf("buried order: job %d (%d) not before job %d (%d)", order[i-1], got[order[i-1]].BuriedSeq, order[i], got[order[i]].BuriedSeq)
		}
	}
}

// Each body is where Jobs says it is, and Jobs reads each file front to
// back.
func TestReplayLocatesBodies(t *testing.T) {
	bodies := map[uint64]string{1: "one\r\n", 2: "two\r\n", 3: strings.Repeat("3", 5000) + "\r\n"}
	f1 := file(layout7, 50, base(2, "x", bodies[2]), base(1, "longer-tube", bodies[1]))
	f2 := file(layout7, 0, base(3, "x", bodies[3]), base(2, "x", bodies[2]))
	rp := replay(t, f1, f2)
	files := [][]byte{f1, f2}
	var last Body
	for _, j := range rp.Jobs() {
		b := j.Body
		if b.File < last.File || (b.File == last.File && b.Offset < last.Offset) {
			t.Fatalf("job %d's body comes before the previous one's", j.ID)
		}
		last = b
		if body := files[b.File-1][b.Offset : b.Offset+b.Size]; string(body) != bodies[j.ID] {
			t.Fatalf("job %d: body %q", j.ID, body)
		}
	}
	if got := byID(rp)[2].Body.File; got != 2 {
		t.Fatalf("job 2's body is in binlog.%d, want the later full record's file", got)
	}
}

// Version 5 (beanstalkd 1.4: an 8-byte namelen, a 77-byte job struct,
// microseconds) reads to the same jobs as version 7.
func TestReplayVersion5(t *testing.T) {
	a := base(1, "default", "hello\r\n")
	a.Delay, a.TTR, a.Deadline, a.State = 30*time.Second, 2*time.Minute, 1767225630e9, uDelayed
	b := base(2, "other", "x\r\n")
	recs := []rec{a, b, b.Update(uBuried), base(3, "z", "z\r\n"), base(3, "", "").Update(uDeleted)}
	j5, j7 := byID(replay(t, file(layout5, 40, recs...))), byID(replay(t, file(layout7, 40, recs...)))
	for id, want := range j7 {
		got := j5[id]
		got.Body, want.Body = Body{}, Body{}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("job %d: version 5 %+v, version 7 %+v", id, got, want)
		}
	}
	if len(j5) != 2 {
		t.Fatalf("version 5: %d jobs, want 2", len(j5))
	}
}

// Only versions 5 and 7 are read; the others, and big-endian files, are
// refused by name; beanpole's own header and zeros are not upstream's.
func TestVersions(t *testing.T) {
	for _, c := range []struct {
		head     []byte
		upstream bool
		refusal  string
	}{
		{[]byte{7, 0, 0, 0}, true, ""},
		{[]byte{5, 0, 0, 0}, true, ""},
		{[]byte{6, 0, 0, 0}, true, "version 6"},
		{[]byte{0, 0, 0, 7}, true, "big-endian"},
		{[]byte("BPBINLOG"), false, ""},
		{[]byte{0, 0, 0, 0}, false, ""},
		{[]byte{7, 0}, false, ""},
	} {
		v, ok := Version(c.head)
		if ok != c.upstream {
			t.Errorf("% x: upstream %v", c.head, ok)
			continue
		}
		if !ok {
			continue
		}
		_, err := layoutOf(v)
		if (c.refusal == "") != (err == nil) || (err != nil && (!strings.Contains(err.Error(), c.refusal) || !errors.Is(err, ErrVersion))) {
			t.Errorf("% x: %v, want %q", c.head, err, c.refusal)
		}
	}
	big := []byte{0, 0, 0, 7}
	rp := NewReplay("/d")
	if err := rp.ReadFile(1, bytes.NewReader(big), 4); !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), "/d/binlog.1") {
		t.Fatalf("a big-endian file: %v", err)
	}
}

// A file missing from the run, and a file that is not a binlog, are
// damage; a file of zeros (killed while preallocating) holds nothing.
func TestReplayFilesMissingOrForeign(t *testing.T) {
	rp := NewReplay("/d")
	read := func(seq uint64, f []byte) {
		if err := rp.ReadFile(seq, bytes.NewReader(f), int64(len(f))); err != nil {
			t.Fatal(err)
		}
	}
	read(1, file(layout7, 0, base(1, "t", "x\r\n")))
	read(4, make([]byte, 4096))
	read(5, []byte("#!/bin/sh\n"))
	var why []string
	for _, d := range rp.Damage() {
		why = append(why, d.String())
	}
	all := strings.Join(why, "\n")
	if len(why) != 2 || !strings.Contains(all, "/d/binlog.2 at offset 0: missing, and so is every file up to binlog.3 (2 files)") ||
		!strings.Contains(all, "/d/binlog.5 at offset 0: not a beanstalkd binlog") {
		t.Fatalf("damage:\n%s", all)
	}
	if err := rp.ReadFile(5, bytes.NewReader(nil), 0); err == nil {
		t.Fatal("a file read twice")
	}
}
