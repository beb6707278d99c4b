package engine

import (
	"sync"
	"testing"
	"time"

	"github.com/beanpole/beanpole/codec"
)

// TestEveryDelayedJobIsPromotedUnderConcurrentPuts: concurrent puts with
// short, varied delays race schedule() against fire(); every delayed job
// is promoted soon after its deadline (within 10 s: a lost timer never
// fires).
func TestEveryDelayedJobIsPromotedUnderConcurrentPuts(t *testing.T) {
	e := New(4)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _ := newTestClient(e, 1+g)
			seed := uint32(g + 1)
			for range 400 {
				seed = seed*1664525 + 1013904223
				d := time.Duration(1+(seed>>8)%20) * time.Millisecond
				c.Put(e.Now(), e.NextID(), 0, d, time.Second, []byte("x\r\n"))
				if seed%8 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	awaitNoDelayed(t, e, 10*time.Second)
	var st codec.TubeStats
	e.StatsTube([]byte("default"), &st)
	if st.CurrentJobsDelayed != 0 || st.CurrentJobsReady != 1600 {
		t.Fatalf("%d delayed jobs, %d ready, of 1600", st.CurrentJobsDelayed, st.CurrentJobsReady)
	}
}
