package engine

import (
	"sync"
	"time"
)

// manualClock is an engine clock that moves only when a test advances it.
// Its timers fire inside Advance, on the test's goroutine, in deadline
// order, each seeing the clock at its own deadline; so when Advance
// returns, everything due by then has happened.
type manualClock struct {
	e      *Engine
	mu     sync.Mutex
	timers []*manualTimer
}

type manualTimer struct {
	c     *manualClock
	at    int64 // engine ns
	armed bool
	f     func()
}

// newManualEngine is New with a clock the test drives, starting at 0.
func newManualEngine(loops int) (*Engine, *manualClock) {
	e := New(loops)
	mc := &manualClock{e: e}
	e.clk = &clock{afterFunc: mc.afterFunc}
	return e, mc
}

func (mc *manualClock) afterFunc(d time.Duration, f func()) timer {
	t := &manualTimer{c: mc, f: f}
	t.Reset(d)
	mc.mu.Lock()
	mc.timers = append(mc.timers, t)
	mc.mu.Unlock()
	return t
}

func (t *manualTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.armed
	t.at, t.armed = t.c.e.clk.now.Load()+int64(d), true
	return was
}

func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.armed
	t.armed = false
	return was
}

// Advance moves the clock d forward, firing the timers that fall due on
// the way. A timer set to fire at or before the current time (a Reset
// with d <= 0) fires on the next Advance, Advance(0) included. Timers
// that keep re-arming for the instant they fire at (the engine spinning on
// a deadline it does not act on) make it panic rather than loop forever.
func (mc *manualClock) Advance(d time.Duration) {
	clk := mc.e.clk
	end := clk.now.Load() + int64(d)
	for fires, last := 0, int64(-1); ; fires++ {
		mc.mu.Lock()
		var next *manualTimer
		for _, t := range mc.timers {
			if t.armed && t.at <= end && (next == nil || t.at < next.at) {
				next = t
			}
		}
		if next == nil {
			clk.now.Store(end)
			mc.mu.Unlock()
			return
		}
		next.armed = false
		clk.now.Store(max(clk.now.Load(), next.at))
		if now := clk.now.Load(); now != last {
			fires, last = 0, now
		} else if fires > 1000 {
			mc.mu.Unlock()
			panic("manualClock: timers re-armed 1000 times without time moving")
		}
		mc.mu.Unlock()
		next.f() // as a runtime timer would: with no lock of ours held
	}
}
