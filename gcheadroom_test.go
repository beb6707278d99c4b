package main

import "testing"

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
