package record

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
	var r Record
	if err := Decode(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.Kind != KindFull || r.ID != 42 || string(r.Tube) != "emails" || r.Pri != 1024 || r.State != StateDelayed ||
		r.Delay != int64(5*time.Second) || r.TTR != int64(120*time.Second) || r.Created != j.CreatedAt ||
		r.Deadline != j.Deadline || r.BuriedSeq != 7 || r.Counters != j.Counters || string(r.Body) != string(j.Body) {
		t.Fatalf("full record decoded as %+v", r)
	}

	c := Counters{Reserves: 9, Buries: 1}
	cases := []struct {
		b    []byte
		want Record
	}{
		{AppendDelete(nil, 3), Record{Kind: KindDelete, ID: 3}},
		{AppendBury(nil, 4, 77, 12, c), Record{Kind: KindBury, ID: 4, Pri: 77, BuriedSeq: 12, Counters: c}},
		{AppendKick(nil, 5, c), Record{Kind: KindKick, ID: 5, Counters: c}},
		{AppendRelease(nil, 6, 99, 0, 0, c), Record{Kind: KindRelease, ID: 6, Pri: 99, Counters: c}},
		{AppendRelease(nil, 6, 99, time.Second, 123, c), Record{Kind: KindRelease, ID: 6, Pri: 99, Delay: int64(time.Second), Deadline: 123, Counters: c}},
		{AppendHighWater(nil, 1<<40), Record{Kind: KindHighWater, ID: 1 << 40}},
		{AppendPause(nil, &Pause{Tube: "emails", Delay: time.Minute, Until: 1_700_000_060_000_000_000}),
			Record{Kind: KindPause, Delay: int64(time.Minute), Deadline: 1_700_000_060_000_000_000, Tube: []byte("emails")}},
		{AppendPause(nil, &Pause{Tube: "t"}), Record{Kind: KindPause, Tube: []byte("t")}},
	}
	for _, tc := range cases {
		if err := Decode(tc.b, &r); err != nil {
			t.Fatalf("%v: %v", tc.want.Kind, err)
		}
		if r.Kind != tc.want.Kind || r.ID != tc.want.ID || r.Pri != tc.want.Pri || r.BuriedSeq != tc.want.BuriedSeq ||
			r.Delay != tc.want.Delay || r.Deadline != tc.want.Deadline || r.Counters != tc.want.Counters ||
			string(r.Tube) != string(tc.want.Tube) {
			t.Fatalf("decoded %+v, want %+v", r, tc.want)
		}
	}
}

func TestPeekRejectsMalformed(t *testing.T) {
	full := AppendFull(nil, &Job{ID: 1, Tube: "t", State: StateReady, Body: []byte("x")})
	for name, b := range map[string][]byte{
		"empty":          nil,
		"short":          {1, 2, 3},
		"unknown kind":   append([]byte{99}, make([]byte, 8)...),
		"long delete":    append(AppendDelete(nil, 1), 0),
		"short bury":     AppendBury(nil, 1, 0, 0, Counters{})[:burySize-1],
		"short full":     full[:fullFixedSize-1],
		"tube overrun":   full[:fullFixedSize],
		"pause, no tube": AppendPause(nil, &Pause{Tube: "t", Delay: 1, Until: 2})[:pauseFixedSize],
		"pause of a job": func() []byte {
			b := AppendPause(nil, &Pause{Tube: "t", Delay: 1, Until: 2})
			b[1] = 5
			return b
		}(),
	} {
		if _, _, err := Peek(b); !errors.Is(err, ErrBad) {
			t.Errorf("%s: err %v, want ErrBad", name, err)
		}
	}
	bad := AppendFull(nil, &Job{ID: 1, Tube: "t", State: 9})
	var r Record
	if err := Decode(bad, &r); !errors.Is(err, ErrBad) {
		t.Errorf("state 9: err %v", err)
	}
}

// TestApplyIgnoresPause: a pause names no job, so the set of live jobs
// is the same with or without one (a binlog replay ignores it).
func TestApplyIgnoresPause(t *testing.T) {
	l := NewLive()
	var r Record
	if err := Decode(AppendPause(nil, &Pause{Tube: "t", Delay: time.Second, Until: 5}), &r); err != nil {
		t.Fatal(err)
	}
	if j := l.Apply(&r, func(b []byte) string { return string(b) }); j != nil || len(l.Jobs) != 0 || l.Orphans != 0 || l.MaxID != 0 {
		t.Fatalf("a pause changed the live jobs: %+v", l)
	}
}
