package loop

import (
	"sync"
	"sync/atomic"
	"time"
)

// throttleSet holds closing connections whose last replies are still
// being sent, with the time by which they close anyway. gnet's "output
// drained" event closes them once everything is sent (a closing
// connection is not read, so gnet reports it); the sweeper only enforces
// the grace time, waking each connection once it is due: it looks once a
// second while the set is non-empty and sleeps until the next add while it
// is empty.
//
// Connections throttled because their replies back up (see pass) are not
// in it: they are not read while they hold unsent output, so the same
// "output drained" event resumes them, and nothing polls them.
type throttleSet struct {
	mu    sync.Mutex
	conns map[*conn]time.Time
	kick  chan struct{}
}

// sweepEvery is how often the sweeper looks for closing connections past
// their grace time.
const sweepEvery = time.Second

func (t *throttleSet) init() { t.kick = make(chan struct{}, 1) }

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
	return ok && now.After(by)
}

func (t *throttleSet) remove(c *conn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
}

func (t *throttleSet) sweep(stop *atomic.Bool) {
	for !stop.Load() {
		now := time.Now()
		t.mu.Lock()
		n := len(t.conns)
		for c, by := range t.conns {
			if now.After(by) {
				_ = c.gc.Wake(nil)
			}
		}
		t.mu.Unlock()
		if n == 0 {
			select {
			case <-t.kick:
			case <-time.After(time.Second): // re-check stop now and then
			}
			continue
		}
		time.Sleep(sweepEvery)
	}
}
