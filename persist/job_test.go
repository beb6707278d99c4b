package persist

import (
	"github.com/beanpole/beanpole/record"

	"errors"
	"testing"
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
