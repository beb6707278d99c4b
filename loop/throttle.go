package loop

import (
	"sync"
	"sync/atomic"
	"time"
)

// throttleSet holds connections whose input waits because their unsent
// output passed the high-water mark, and closing connections whose last
// replies are still being sent (with the time by which they close anyway).
// gnet reports "output drained" only when the buffer is empty, so while
// the set is non-empty a sweeper wakes them every few milliseconds to
// re-check. An empty set costs nothing: the sweeper sleeps until the next
// add.
type throttleSet struct {
	mu    sync.Mutex
	conns map[*conn]time.Time // zero for a throttled connection
	kick  chan struct{}
}

func (t *throttleSet) init() { t.kick = make(chan struct{}, 1) }

func (t *throttleSet) add(c *conn) { t.addClosing(c, time.Time{}) }

// addClosing adds a closing connection that must be closed by closeBy.
func (t *throttleSet) addClosing(c *conn, closeBy time.Time) {
	t.mu.Lock()
	if t.conns == nil {
		t.conns = make(map[*conn]time.Time)
	}
	t.conns[c] = closeBy
	t.mu.Unlock()
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// closeDue reports whether closing connection c is past its grace time.
func (t *throttleSet) closeDue(c *conn, now time.Time) bool {
	t.mu.Lock()
	by, ok := t.conns[c]
	t.mu.Unlock()
	return ok && !by.IsZero() && now.After(by)
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
