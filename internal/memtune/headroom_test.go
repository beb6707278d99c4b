package memtune

import (
	"testing"
	"time"
)

func TestHeapHeadroomPercent(t *testing.T) {
	const mib = 1 << 20
	tu := &heapTuner{floor: 64 * mib, base: 100, asked: 100}
	for _, c := range []struct {
		live uint64
		cur  int
		want int
	}{
		{live: 0, cur: 100, want: 100_000},      // empty heap: capped
		{live: 4 * mib, cur: 100, want: 1600},   // 4 MiB live: 64 MiB headroom
		{live: 4 * mib, cur: 1500, want: 1500},  // within an eighth: keep
		{live: 16 * mib, cur: 1600, want: 400},  // heap grew: less percent
		{live: 64 * mib, cur: 400, want: 100},   // past the floor: GOGC rules
		{live: 1024 * mib, cur: 100, want: 100}, // big heaps are untouched
		{live: 60 * mib, cur: 100, want: 100},   // 106 is within an eighth of 100
	} {
		tu.asked = c.cur
		if got := tu.percentFor(c.live); got != c.want {
			t.Errorf("live %d MiB, current %d%%: got %d%%, want %d%%", c.live/mib, c.cur, got, c.want)
		}
	}
}

func TestHeapHeadroomOnlyWhileChurning(t *testing.T) {
	const mib = 1 << 20
	ms := time.Millisecond
	for _, c := range []struct {
		name      string
		hot       bool
		live, got uint64 // live heap; bytes allocated during the last cycle
		elapsed   time.Duration
		want      bool
	}{
		{"64 KiB bodies at 400 MB/s on 2 MiB live", false, 2 * mib, 40 * mib, 100 * ms, true},
		{"idle connections arriving at 10 MB/s", false, 20 * mib, 10 * mib, time.Second, false},
		{"a heap past the floor churning fast", false, 100 * mib, 100 * mib, 50 * ms, false},
		{"still busy, cycles of 100 ms at GOGC alone", true, 2 * mib, 40 * mib, time.Second, true},
		{"calmed down", true, 2 * mib, 4 * mib, time.Second, false},
		{"nothing allocated", true, 2 * mib, 0, time.Second, false},
	} {
		tu := &heapTuner{floor: 64 * mib, base: 100, hot: c.hot}
		if got := tu.churning(c.live, c.got, c.elapsed); got != c.want {
			t.Errorf("%s: churning = %v, want %v", c.name, got, c.want)
		}
	}
}

// A burst that stops leaves no collection to end its headroom: the calm
// watcher does, once a tick allocates under calmBytes, and only then.
func TestHeadroomEndsWhenAllocationStops(t *testing.T) {
	tu := &heapTuner{floor: 64 << 20, base: 100, asked: 1600, hot: true}
	if tu.calmed(64 << 20) {
		t.Fatal("headroom ended while the heap allocates 256 MB/s")
	}
	if tu.asked != 1600 || !tu.hot {
		t.Fatalf("headroom changed while busy: asked %d%%, hot %v", tu.asked, tu.hot)
	}
	if !tu.calmed(calmBytes - 1) {
		t.Fatal("headroom kept after allocation stopped")
	}
	if tu.asked != 100 || tu.hot {
		t.Fatalf("after calm: asked %d%%, hot %v; want 100%%, false", tu.asked, tu.hot)
	}
	if tu.calmed(0) {
		t.Fatal("a heap without headroom was released again")
	}
}
