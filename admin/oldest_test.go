package admin

import (
	"strconv"
	"sync"
	"testing"
	"time"
)

// However many pages ask, a tube's oldest ready job is read at most once
// a second; in between, the age read grows with the time passed.
func TestOldestReadyIsReadAtMostOnceASecondPerTube(t *testing.T) {
	reads := map[string]int{}
	var mu sync.Mutex
	c := newOldestCache(func(tube []byte) (time.Duration, bool) {
		mu.Lock()
		defer mu.Unlock()
		reads[string(tube)]++
		switch string(tube) {
		case "q":
			return 30 * time.Second, true
		case "empty":
			return 0, true
		}
		return 0, false
	})
	t0 := time.Unix(1_000_000, 0)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if age, ok := c.get("q", t0); !ok || age != 30*time.Second {
					t.Errorf("q at t0: %v %v", age, ok)
				}
			}
		})
	}
	wg.Wait()
	if age, _ := c.get("q", t0.Add(900*time.Millisecond)); age != 30*time.Second+900*time.Millisecond {
		t.Errorf("q 0.9 s later: %v, want 30.9s", age)
	}
	if reads["q"] != 1 {
		t.Fatalf("800 pages within a second read q %d times, want once", reads["q"])
	}
	c.get("q", t0.Add(time.Second))
	if reads["q"] != 2 {
		t.Fatalf("a second later q was read %d times in all, want twice", reads["q"])
	}
	if age, ok := c.get("empty", t0.Add(500*time.Millisecond)); age != 0 || !ok {
		t.Errorf("a tube with no ready job: %v %v, want 0 true", age, ok)
	}
	if _, ok := c.get("gone", t0); ok {
		t.Errorf("a tube that does not exist: ok")
	}
	// The tubes remembered stay bounded.
	for i := range 3 * oldestTubes {
		c.get("t"+strconv.Itoa(i), t0.Add(time.Duration(i)*time.Millisecond))
	}
	if len(c.m) > oldestTubes {
		t.Fatalf("%d tubes remembered, want at most %d", len(c.m), oldestTubes)
	}
}
