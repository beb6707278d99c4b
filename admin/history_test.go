package admin

import (
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/beanpole/beanpole/codec"
)

func times(ss []sample) []int64 {
	var t []int64
	for _, s := range ss {
		t = append(t, s.Time)
	}
	return t
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The ring answers its samples oldest first, before and after it wraps,
// and never holds more than its size.
func TestHistoryRingKeepsTheLatestInOrder(t *testing.T) {
	r := newRing(4)
	if got := r.appendTo(nil); len(got) != 0 {
		t.Fatalf("empty ring: %v", times(got))
	}
	var want []int64
	for i := int64(1); i <= 11; i++ {
		r.add(sample{Time: i})
		want = append(want, i)
		if len(want) > 4 {
			want = want[1:]
		}
		if got := times(r.appendTo(nil)); !equal(got, want) {
			t.Fatalf("after %d samples: %v, want %v", i, got, want)
		}
	}
	// Exactly full, at the wrap point.
	r = newRing(3)
	for i := int64(1); i <= 3; i++ {
		r.add(sample{Time: i})
	}
	if got := times(r.appendTo(nil)); !equal(got, []int64{1, 2, 3}) {
		t.Fatalf("a full ring: %v", got)
	}
}

// Adding samples never grows the ring: its memory is what the comment in
// history.go says, allocated once.
func TestHistoryRingIsBounded(t *testing.T) {
	if n := unsafe.Sizeof(sample{}); n != 88 {
		t.Fatalf("a sample is %d bytes, history.go and docs/operating.md say 88", n)
	}
	if n := historyLen * unsafe.Sizeof(sample{}); n != 63360 {
		t.Fatalf("the ring is %d bytes, history.go and docs/operating.md say 63,360", n)
	}
	r := newRing(historyLen)
	allocs := testing.AllocsPerRun(10, func() {
		for i := range 3 * historyLen {
			r.add(sample{Time: int64(i)})
		}
	})
	if allocs != 0 {
		t.Fatalf("adding samples allocates (%v per run)", allocs)
	}
	if n, c := len(r.buf), cap(r.buf); n != historyLen || c != historyLen {
		t.Fatalf("the ring holds %d (cap %d), want %d", n, c, historyLen)
	}
	if got := len(r.appendTo(nil)); got != historyLen {
		t.Fatalf("a full ring answers %d samples, want %d", got, historyLen)
	}
}

// addingSource is a Source whose ServerStats adds into what it is given,
// as the event loops' command counts do.
type addingSource struct {
	Source
	puts uint64
}

func (s *addingSource) ServerStats(st *codec.ServerStats) {
	s.puts += 10
	st.Cmd[codec.OpPut] += s.puts
}

// Each sample holds the counts at its moment, not a sum of all the reads
// before it.
func TestHistorySamplesAreNotSumsOfEarlierReads(t *testing.T) {
	r := newRing(8)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { sampleEvery(r, time.Millisecond, &addingSource{}, stop); close(done) }()
	for len(r.appendTo(nil)) < 3 {
		runtime.Gosched()
	}
	close(stop)
	<-done
	// The ring may have dropped the first samples (the sampler ran ahead
	// of this goroutine on a loaded machine): each sample is 10 puts more
	// than the one before it, where sums of earlier reads grow by more.
	samples := r.appendTo(nil)
	if samples[0].Puts%10 != 0 {
		t.Fatalf("sample 0: %d puts, want a multiple of 10", samples[0].Puts)
	}
	for i := 1; i < len(samples); i++ {
		if d := samples[i].Puts - samples[i-1].Puts; d != 10 {
			t.Fatalf("sample %d: %d puts after %d, want 10 more", i, samples[i].Puts, samples[i-1].Puts)
		}
	}
}
