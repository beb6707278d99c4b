package loop

import (
	"sync"
	"sync/atomic"
	"time"
)

// throttleSet holds connections whose input waits because their unsent
// output passed the high-water mark. gnet has no "output drained" event,
// so a sweeper wakes them every few milliseconds to re-check; their next
// read event does the same.
type throttleSet struct {
	mu    sync.Mutex
	conns map[*conn]struct{}
	n     atomic.Int64
}

func (t *throttleSet) add(c *conn) {
	t.mu.Lock()
	if t.conns == nil {
		t.conns = make(map[*conn]struct{})
	}
	t.conns[c] = struct{}{}
	t.n.Store(int64(len(t.conns)))
	t.mu.Unlock()
}

func (t *throttleSet) remove(c *conn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.n.Store(int64(len(t.conns)))
	t.mu.Unlock()
}

func (t *throttleSet) sweep(stop *atomic.Bool) {
	for !stop.Load() {
		time.Sleep(5 * time.Millisecond)
		if t.n.Load() == 0 {
			continue
		}
		t.mu.Lock()
		for c := range t.conns {
			_ = c.gc.Wake(nil)
		}
		t.mu.Unlock()
	}
}
