package persist

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/beanpole/beanpole/record"
)

func TestFrameHeader(t *testing.T) {
	var b [frameHeaderSize]byte
	putFrameHeader(b[:], frameHeader{n: 1234, lsn: 99, crc: 0xdeadbeef})
	h, ok := parseFrameHeader(b[:])
	if !ok || h.n != 1234 || h.lsn != 99 || h.crc != 0xdeadbeef {
		t.Fatalf("got %+v %v", h, ok)
	}
	for i := range len(b) * 8 {
		c := b
		c[i/8] ^= 1 << (i % 8)
		if _, ok := parseFrameHeader(c[:]); ok {
			t.Fatalf("bit %d flip not detected", i)
		}
	}
	var zero [frameHeaderSize]byte
	if _, ok := parseFrameHeader(zero[:]); ok {
		t.Fatal("all-zero header accepted as a frame")
	}
	var sh [segHeaderSize]byte
	putSegHeader(sh[:], 17)
	if seq, st := parseSegHeader(sh[:]); st != hdrOK || seq != 17 {
		t.Fatalf("segment header: %d %v", seq, st)
	}
	sh[20] ^= 1
	if _, st := parseSegHeader(sh[:]); st != hdrBad {
		t.Fatalf("damaged segment header: %v", st)
	}
}

func TestAppendValidates(t *testing.T) {
	l, _ := mustOpen(t, fastOpts(t.TempDir()))
	defer l.Close()
	for name, rec := range map[string][]byte{
		"id 0":      record.AppendDelete(nil, 0),
		"state 0":   record.AppendFull(nil, &record.Job{ID: 1, Tube: "t"}),
		"id mark":   record.AppendHighWater(nil, 5),
		"truncated": record.AppendKick(nil, 1, record.Counters{})[:10],
	} {
		if err := l.Append(rec, nil); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: %v, want ErrBadRecord", name, err)
		}
	}
}

// A binlog never holds a pause record (the single server does not log
// pauses, as upstream's does not): a frame of one, however well formed, is
// damage or a stranger's bytes, reported like any frame this version does
// not read, and the records around it still replay.
func TestReplayReportsAPauseRecordAsABadFrame(t *testing.T) {
	buf := make([]byte, segHeaderSize)
	putSegHeader(buf, 1)
	for i, p := range [][]byte{
		record.AppendHighWater(nil, 0),
		record.AppendPause(nil, &record.Pause{Tube: "t", Delay: time.Minute, Until: 1}),
		record.AppendFull(nil, &record.Job{ID: 1, Tube: "t", State: record.StateReady, Body: []byte("x\r\n")}),
	} {
		buf = appendFrame(buf, uint64(i+1), p, checksum(p))
	}
	rp := newReplay()
	sc := scanSegment(buf, 1, 0, func(r *record.Record, lsn uint64, n int64) error { return rp.apply(r, 1, lsn, n) })
	if len(sc.bad) != 1 || sc.bad[0].lsn != 2 || !strings.Contains(sc.bad[0].why, "pause") {
		t.Fatalf("bad frames %+v, want the pause record's (LSN 2)", sc.bad)
	}
	if _, ok := rp.live.Jobs[1]; !ok || sc.records != 2 {
		t.Fatalf("%d records replayed, job 1 live: %v; want the id mark and job 1", sc.records, ok)
	}
}
