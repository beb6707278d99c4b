package engine

import (
	"errors"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/beanpole/beanpole/record"
)

// Operator makes the changes an operator asks for outside the protocol
// (the dashboard's actions). Each is one engine step under the locks a
// protocol command would take, its records go through the journal exactly
// like a command's, and it returns once they are as durable as the -f
// flags promise, or with the error that says they never will be. Actions
// run one at a time.
//
// The operator is a client of its own on the timers' shard: it is not a
// connection (no current-connections; no tube used or watched, but for
// the target of a move while the move runs), and its changes are not
// counted as commands (cmd-delete, cmd-kick, ...).
type Operator struct {
	mu   sync.Mutex
	c    *Client
	woke operatorWaker
}

// Errors of the operator's actions besides the journal's. Nothing changed.
var (
	ErrNoTube   = errors.New("no such tube")
	ErrNoJob    = errors.New("no such job")
	ErrReserved = errors.New("the job is reserved by a worker")
	ErrSameTube = errors.New("the job is in that tube already")
	ErrBadState = errors.New("the job is not in a state this action applies to")
)

type operatorWaker chan struct{}

func (w operatorWaker) Wake(*Client) {
	select {
	case w <- struct{}{}:
	default:
	}
}

// NewOperator makes the engine's operator; one is enough.
func (e *Engine) NewOperator() *Operator {
	w := make(operatorWaker, 1)
	c := &Client{e: e, waker: w}
	if e.jl != nil {
		c.journalState = &journalState{}
		c.wakeAt.Store(noWake)
	}
	return &Operator{c: c, woke: w}
}

// do runs change and waits until the records it appended are durable.
func (o *Operator) do(change func(c *Client) error) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.c
	if c.journalState == nil {
		return change(c)
	}
	before := c.appended.Load()
	err := change(c)
	o.awaitAcks(c.appended.Load())
	if _, _, failed := c.Durability(); failed > before && err == nil {
		err = ErrLogFailed
	}
	return err
}

// appended counts the records the operator has appended; 0 without a
// binlog.
func (o *Operator) appended() uint64 {
	if o.c.journalState == nil {
		return 0
	}
	return o.c.appended.Load()
}

// awaitAcks waits until the log has acknowledged the operator's records up
// to seq. Caller holds o.mu.
func (o *Operator) awaitAcks(seq uint64) {
	c := o.c
	if c.journalState == nil || !c.WakeWhenAcked(seq) {
		return
	}
	// A wake left over from an earlier wait may come first: wait until
	// the acks are really there.
	for _, acked, _ := c.Durability(); acked < seq; _, acked, _ = c.Durability() {
		<-o.woke
	}
}

// Kick kicks up to n jobs of the named tube, as kick does in the used
// tube: buried ones if there are any, else delayed ones.
func (o *Operator) Kick(tube string, n uint32) (k uint32, err error) {
	err = o.do(func(c *Client) error {
		t := c.e.reg.lookup([]byte(tube))
		if t == nil {
			return ErrNoTube
		}
		k, err = c.kickIn(t, n)
		return err
	})
	return k, err
}

// KickJob makes one buried or delayed job ready.
func (o *Operator) KickJob(id uint64) error { return o.onJob(id, (*Client).KickJob) }

// Delete deletes one ready, delayed or buried job.
func (o *Operator) Delete(id uint64) error {
	return o.onJob(id, func(c *Client, id uint64) (bool, error) { return c.Delete(c.e.Now(), id) })
}

// onJob runs a command on job id, saying why when it found nothing to do.
func (o *Operator) onJob(id uint64, cmd func(*Client, uint64) (bool, error)) error {
	return o.do(func(c *Client) error {
		ok, err := cmd(c, id)
		if !ok && err == nil {
			return whyNot(c.e, id)
		}
		return err
	})
}

// whyNot says why an action on job id found nothing to do.
func whyNot(e *Engine, id uint64) error {
	if j := e.lockJob(id); j != nil {
		s := j.state
		j.Tube.mu.Unlock()
		if s == Reserved {
			return ErrReserved
		}
		return ErrBadState
	}
	return ErrNoJob
}

// Pause pauses the named tube for d (0 unpauses it), as pause-tube.
func (o *Operator) Pause(tube string, d time.Duration) error {
	return o.do(func(c *Client) error {
		ok, err := c.PauseTube([]byte(tube), d)
		if !ok {
			return ErrNoTube
		}
		return err
	})
}

// Flush deletes the jobs of the named tube in the given states (Ready,
// Delayed, Buried; reserved jobs belong to their workers and stay) and
// reports how many went. It works lockChunk jobs per hold of the tube's
// lock, so clients may see the tube part flushed while it runs; jobs put
// while it runs stay, and so do jobs buried while it runs. With a binlog
// it appends a chunk's records only once those of the chunk before the
// last are acknowledged: the log's writer, which acknowledges every
// client's records in order, never has more than two chunks of the
// flush's before another client's. Should the journal refuse a record,
// the jobs before it are gone and the rest stay.
func (o *Operator) Flush(tube string, states ...State) (n int, err error) {
	err = o.do(func(c *Client) error {
		e := c.e
		t := e.reg.lookup([]byte(tube))
		if t == nil {
			return ErrNoTube
		}
		gone := make([]*Job, 0, lockChunk)
		prev := o.appended()
		t.mu.Lock()
		f := flushCursor{lastID: e.nextID.Load(), lastSeq: t.buriedSeq}
		for _, s := range states {
			f.i, f.deleted = math.MaxInt, false
			for done := false; !done; {
				var err error
				gone, done, err = t.flushSome(c, s, &f, gone[:0])
				empty := t.jobs == 0
				t.mu.Unlock()
				for _, j := range gone {
					e.forget(j, int(c.shard))
				}
				n += len(gone)
				if err != nil || empty {
					if empty {
						e.reg.maybeFree(t)
					}
					return err
				}
				o.awaitAcks(prev)
				prev = o.appended()
				runtime.Gosched()
				t.mu.Lock()
			}
		}
		t.mu.Unlock()
		return nil
	})
	return n, err
}

// flushCursor is how far a flush has gone in one state.
type flushCursor struct {
	lastID  uint64 // the last id handed out when the flush began: later jobs stay
	lastSeq uint64 // the tube's last buried place then: jobs buried later stay
	// i is the heap's place to read next (jobHeap.at), walking from the
	// last one toward the root; jobs move between two chunks, so a walk
	// that deleted anything is followed by another.
	i       int
	deleted bool // the walk under way deleted a job
}

// flushSome deletes up to lockChunk jobs of state s for a flush, appending
// them to gone, and reports whether none is left to delete. Caller holds
// t.mu, and once it has let go of it calls Engine.forget on the jobs gone.
func (t *Tube) flushSome(c *Client, s State, f *flushCursor, gone []*Job) ([]*Job, bool, error) {
	e := t.e
	h := &t.ready
	if s == Delayed {
		h = &t.delay
	}
	for range lockChunk {
		var j *Job
		if s == Buried {
			if j = t.buried.head; j == nil || j.buriedSeq > f.lastSeq {
				return gone, true, nil
			}
		} else {
			if f.i = min(f.i, h.slots()-1); f.i < 0 {
				if !f.deleted {
					return gone, true, nil
				}
				f.i, f.deleted = math.MaxInt, false
				continue
			}
			if j = h.at(f.i); j == nil || j.ID > f.lastID {
				f.i--
				continue
			}
			f.deleted = true
		}
		if e.jl != nil {
			if err := c.logged(e.jl.Delete(j.ID, c.ack())); err != nil {
				return gone, true, err
			}
		}
		t.deleteLocked(j, int(c.shard))
		gone = append(gone, j)
	}
	return gone, false, nil
}

// Move moves a ready, delayed or buried job to the named tube (made if
// need be), in one step: the job there is a new one, with a new id, the
// same priority, TTR and body, ready, or delayed for the time the old one
// had left; the old one is deleted. With a binlog the new job's record is
// appended before the old one's delete, so a crash in between leaves the
// job in both tubes, never in neither. It returns the new id.
func (o *Operator) Move(id uint64, tube string) (newID uint64, err error) {
	err = o.do(func(c *Client) error {
		e := c.e
		j := e.jobs.Get(id)
		if j == nil {
			return ErrNoJob
		}
		src := j.Tube // a job's tube never changes
		if src.Name == tube {
			return ErrSameTube
		}
		dst := e.reg.acquire(e, int(c.shard), []byte(tube), true)
		if dst == nil {
			return ErrNoMemory
		}
		defer e.reg.release(dst, true)
		var buf [2]*Tube
		tubes := lockInOrder(append(buf[:0], src, dst))
		unlock := func() {
			for _, t := range tubes {
				t.mu.Unlock()
			}
		}
		switch j.state {
		case Ready, Delayed, Buried:
		case Reserved:
			unlock()
			return ErrReserved
		default:
			unlock()
			return ErrNoJob
		}
		nid := e.NextID()
		if nid == 0 {
			unlock()
			return ErrNoIDs
		}
		cost := jobCost(j.Body)
		if !e.charge(int(c.shard), cJobBytes, cost) {
			unlock()
			return ErrNoMemory
		}
		now := e.mono() // the engine's clock, as a put's: tests drive it
		nj := &Job{ID: nid, Tube: dst, Body: j.Body, Pri: j.Pri, heapIndex: -1,
			delay: j.delay, ttr: j.ttr, createdAt: e.wall(now)}
		if j.state == Delayed {
			nj.deadline = j.deadline
		}
		if e.jl != nil {
			r := record.Job{ID: nj.ID, Tube: dst.Name, Pri: nj.Pri, State: record.StateReady,
				Delay: time.Duration(nj.delay) * time.Second, TTR: time.Duration(nj.ttrNs()), CreatedAt: nj.createdAt, Body: nj.Body}
			if nj.deadline != 0 {
				r.State, r.Deadline = record.StateDelayed, e.wall(nj.deadline)
			}
			nj.owner = c
			c.appended.Add(1)
			if err := e.jl.Put(&r, (*putAck)(nj)); err != nil {
				c.appended.Add(^uint64(0))
				unlock()
				e.uncharge(int(c.shard), cost)
				return e.refused(err)
			}
			dst.jobs++ // as Put counts a job waiting for its record
			if err := c.logged(e.jl.Delete(id, c.ack())); err != nil {
				// The new job stands; the old one stays too: a duplicate,
				// not a loss.
				unlock()
				newID = nj.ID
				return err
			}
		}
		src.deleteLocked(j, int(c.shard))
		empty := src.jobs == 0
		unlock()
		e.forget(j, int(c.shard))
		if empty {
			e.reg.maybeFree(src)
		}
		if e.jl == nil {
			e.publish(nj, int(c.shard), now)
		}
		newID = nj.ID
		return nil
	})
	return newID, err
}
