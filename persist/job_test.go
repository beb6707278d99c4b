package persist

import (
	"errors"
	"testing"
	"time"
)

func TestRecordRoundTrip(t *testing.T) {
	j := &Job{ID: 42, Tube: "emails", Pri: 1024, State: StateDelayed, Delay: 5 * time.Second,
		TTR: 120 * time.Second, CreatedAt: 1_700_000_000_123_456_789, Deadline: 1_700_000_005_000_000_000,
		BuriedSeq: 7, Counters: Counters{1, 2, 3, 4, 5}, Body: []byte("hello\r\n\x00world")}
	b := AppendFull(nil, j)
	if len(b) != FullSize(j) {
		t.Fatalf("FullSize %d, encoded %d", FullSize(j), len(b))
	}
	var r record
	if err := decodeRecord(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.kind != kindFull || r.id != 42 || string(r.tube) != "emails" || r.pri != 1024 || r.state != StateDelayed ||
		r.delay != int64(5*time.Second) || r.ttr != int64(120*time.Second) || r.created != j.CreatedAt ||
		r.deadline != j.Deadline || r.buriedSeq != 7 || r.c != j.Counters || string(r.body) != string(j.Body) {
		t.Fatalf("full record decoded as %+v", r)
	}

	c := Counters{Reserves: 9, Buries: 1}
	cases := []struct {
		b    []byte
		want record
	}{
		{AppendDelete(nil, 3), record{kind: kindDelete, id: 3}},
		{AppendBury(nil, 4, 77, 12, c), record{kind: kindBury, id: 4, pri: 77, buriedSeq: 12, c: c}},
		{AppendKick(nil, 5, c), record{kind: kindKick, id: 5, c: c}},
		{AppendRelease(nil, 6, 99, 0, 0, c), record{kind: kindRelease, id: 6, pri: 99, c: c}},
		{AppendRelease(nil, 6, 99, time.Second, 123, c), record{kind: kindRelease, id: 6, pri: 99, delay: int64(time.Second), deadline: 123, c: c}},
		{appendHighWater(nil, 1<<40), record{kind: kindHighWater, id: 1 << 40}},
	}
	for _, tc := range cases {
		if err := decodeRecord(tc.b, &r); err != nil {
			t.Fatalf("%v: %v", tc.want.kind, err)
		}
		if r.kind != tc.want.kind || r.id != tc.want.id || r.pri != tc.want.pri || r.buriedSeq != tc.want.buriedSeq ||
			r.delay != tc.want.delay || r.deadline != tc.want.deadline || r.c != tc.want.c {
			t.Fatalf("decoded %+v, want %+v", r, tc.want)
		}
	}
}

func TestPeekRecordRejectsMalformed(t *testing.T) {
	full := AppendFull(nil, &Job{ID: 1, Tube: "t", State: StateReady, Body: []byte("x")})
	for name, b := range map[string][]byte{
		"empty":        nil,
		"short":        {1, 2, 3},
		"unknown kind": append([]byte{99}, make([]byte, 8)...),
		"long delete":  append(AppendDelete(nil, 1), 0),
		"short bury":   AppendBury(nil, 1, 0, 0, Counters{})[:burySize-1],
		"short full":   full[:fullFixedSize-1],
		"tube overrun": full[:fullFixedSize],
	} {
		if _, _, err := peekRecord(b); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: err %v, want ErrBadRecord", name, err)
		}
	}
	bad := AppendFull(nil, &Job{ID: 1, Tube: "t", State: 9})
	var r record
	if err := decodeRecord(bad, &r); !errors.Is(err, ErrBadRecord) {
		t.Errorf("state 9: err %v", err)
	}
}

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
		"id 0":      AppendDelete(nil, 0),
		"state 0":   AppendFull(nil, &Job{ID: 1, Tube: "t"}),
		"id mark":   appendHighWater(nil, 5),
		"truncated": AppendKick(nil, 1, Counters{})[:10],
	} {
		if err := l.Append(rec, nil); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: %v, want ErrBadRecord", name, err)
		}
	}
}
