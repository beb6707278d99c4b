package engine

import (
	"sync/atomic"
	"time"
)

// clock replaces the engine's time source, the monotonic clock and the
// runtime timers behind TTR, delays, pauses and reserve timeouts, so that
// unit tests move time by hand instead of sleeping. A running server has
// none (Engine.clk is nil).
type clock struct {
	now       atomic.Int64 // ns since the engine started
	afterFunc func(d time.Duration, f func()) timer
}

// timer is a one-shot timer as the engine uses it: *time.Timer, or a test
// clock's.
type timer interface {
	Reset(d time.Duration) bool
	Stop() bool
}

// afterFunc calls f after d, like time.AfterFunc.
func (e *Engine) afterFunc(d time.Duration, f func()) timer {
	if e.clk != nil {
		return e.clk.afterFunc(d, f)
	}
	return time.AfterFunc(d, f)
}

// SetWallOffset makes the engine's wall clock (what records carry: delay
// deadlines, creation times) run d ahead of the host's (behind, for a
// negative d), as on a host whose clock is off by d. Fault tests use it to
// give one node of a cluster a clock that disagrees with the others'
// (BEANPOLE_WALL_CLOCK_OFFSET); it must be called before the engine runs.
func (e *Engine) SetWallOffset(d time.Duration) { e.baseWall = e.base.UnixNano() + int64(d) }
