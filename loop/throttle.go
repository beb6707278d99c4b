package loop

import (
	"sync"
	"sync/atomic"
	"time"
)

// throttleSet holds connections whose input waits because their unsent
// output passed the high-water mark. gnet has no "output drained" event,
// so while the set is non-empty a sweeper wakes them every few
// milliseconds to re-check (their next read event does the same). An empty
// set costs nothing: the sweeper sleeps until the next add.
type throttleSet struct {
	mu    sync.Mutex
	conns map[*conn]struct{}
	kick  chan struct{}
}

func (t *throttleSet) init() { t.kick = make(chan struct{}, 1) }

func (t *throttleSet) add(c *conn) {
	t.mu.Lock()
	if t.conns == nil {
		t.conns = make(map[*conn]struct{})
	}
	t.conns[c] = struct{}{}
	t.mu.Unlock()
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

func (t *throttleSet) remove(c *conn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
}

func (t *throttleSet) sweep(stop *atomic.Bool) {
	for !stop.Load() {
		t.mu.Lock()
		n := len(t.conns)
		for c := range t.conns {
			_ = c.gc.Wake(nil)
		}
		t.mu.Unlock()
		if n == 0 {
			select {
			case <-t.kick:
			case <-time.After(time.Second): // re-check stop now and then
			}
			continue
		}
		time.Sleep(5 * time.Millisecond)
	}
}
