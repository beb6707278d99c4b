// Package engine is beanpole's job state machine: tubes, ready and delay
// heaps, buried lists, reservations, parked reservers, TTR/delay/pause
// timers and counters. It does no I/O; the event loops call it directly and
// it calls back through Waker when a parked reserve gets its answer.
//
// Locking: state is sharded per tube (Tube.mu guards a tube's jobs, heaps,
// waiters and counters). Lock order is registry → tube → client; a reserve
// watching several tubes holds their locks together, in Tube.order; the
// job table's shard locks are never held together with any other lock.
// LOCKS.md at the top of the repository orders every lock in the process.
package engine

import (
	"errors"
	"math"
	"sync/atomic"
	"time"
)

// Engine holds all jobs and tubes.
type Engine struct {
	base        time.Time
	nextID      atomic.Uint64
	idRem       uint64 // ids handed out are idRem modulo idMod (SetIDSpace), when idMod > 1
	idMod       uint64
	jobs        *jobTable
	reg         registry
	defaultTube *Tube
	ctr         counters
	draining    atomic.Bool
	baseWall    int64 // wall-clock ns at base
	jl          Journal
	pj          PauseJournal           // jl, if it logs pauses
	logFailure  atomic.Pointer[string] // the binlog's first failure
	tubeSeq     atomic.Uint64          // hands out Tube.order
	memLimit    int64                  // ceiling on job memory (memory.go); 0: none
	clk         *clock                 // nil: the runtime's (clock.go)
}

// New makes an engine for a server with the given number of event loops.
func New(loops int) *Engine {
	if loops >= math.MaxUint16 {
		panic("engine: too many event loops") // Client.shard is 16 bits
	}
	e := &Engine{base: time.Now(), jobs: newJobTable()}
	e.baseWall = e.base.UnixNano()
	e.ctr.shards = make([]counterShard, loops+1)
	e.defaultTube = e.reg.init(e)
	return e
}

// mono is monotonic time in ns since the engine started: TTR, delays and
// pauses must not move when the wall clock is stepped.
func (e *Engine) mono() int64 {
	if e.clk == nil {
		return int64(time.Since(e.base))
	}
	return e.clk.now.Load()
}

// Now is the engine's clock, for Client.Put.
func (e *Engine) Now() int64 { return e.mono() }

// Shards is the number of loop shards the engine was made for.
func (e *Engine) Shards() int { return len(e.ctr.shards) - 1 }

// ErrNoIDs: every job id, up to the largest (2^64-1), has been handed out,
// so no new job can be made: a put answers INTERNAL_ERROR. Ids are never
// reused, so this lasts; every other command goes on.
var ErrNoIDs = errors.New("every job id has been handed out: no job can be made")

// NextID hands out a job id. Ids are global and never reused: once the
// largest (2^64-1) is out, it returns 0, which is no id (Put refuses it
// with ErrNoIDs). With an id space (SetIDSpace), the ids are the next of
// that space.
func (e *Engine) NextID() uint64 {
	for {
		id := e.nextID.Load()
		next := id + 1
		if e.idMod > 1 {
			next += (e.idRem + e.idMod - next%e.idMod) % e.idMod
		}
		if next <= id { // past the largest id
			return 0
		}
		if e.nextID.CompareAndSwap(id, next) {
			return next
		}
	}
}

// SetIDSpace makes the engine hand out only ids that are rem modulo mod
// (rem < mod), still increasing: the engine of data group g of a cluster's
// mod groups gives out ids that name its group, so that no two groups'
// ids meet and a command naming an id reaches the group that holds it
// with no lookup. Set before the first put.
func (e *Engine) SetIDSpace(rem, mod uint64) {
	if mod == 0 || rem >= mod {
		panic("engine: an id space needs rem < mod")
	}
	e.idRem, e.idMod = rem, mod
}

// SetDraining enters drain mode (SIGUSR1); there is no way back, as upstream.
func (e *Engine) SetDraining() { e.draining.Store(true) }

// Draining reports whether puts are refused.
func (e *Engine) Draining() bool { return e.draining.Load() }

// Uptime is the time since the engine started.
func (e *Engine) Uptime() time.Duration { return time.Duration(e.mono()) }
