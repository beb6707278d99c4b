package engine

import (
	"runtime"
	"time"

	"github.com/beanpole/beanpole/record"
)

// Put creates a job with a fresh id from NextID in the used tube. delay and
// ttr are as given on the wire; a ttr below 1 s becomes 1 s. An error
// (ErrNoIDs for id 0, ErrNoMemory, ErrNoRoom, ErrLogFailed) means no job
// was made.
//
// The job's memory is charged here, before anything else (memory.go): past
// the ceiling the put is refused with ErrNoMemory. With a binlog a put
// waiting for its record is charged too.
//
// With a binlog the job is published (put in the id table and its tube's
// heaps, where reserves, peeks and stats see it) only once its record is
// as durable as the -f flags promise: no client can be handed a job that a
// crash would then take back. The putting client's later commands that
// read or change shared state wait for that too (PutsUnacked, the loop's
// rule), so it never misses its own job and its changes are seen in the
// order it made them.
//
// now is the engine's clock (Engine.Now) when the put arrived: a loop
// reads it once for all the puts of one pass.
func (c *Client) Put(now int64, id uint64, pri uint32, delay, ttr time.Duration, body []byte) (*Job, error) {
	if id == 0 {
		return nil, ErrNoIDs
	}
	if ttr < time.Second {
		ttr = time.Second
	}
	cost := jobCost(body)
	if !c.e.charge(int(c.shard), cJobBytes, cost) {
		return nil, ErrNoMemory
	}
	// The creation time is the engine's monotonic clock on its wall-clock
	// base (journal.go), which is also what stats-job's age is measured
	// against.
	t := c.use
	j := &Job{ID: id, Tube: t, Body: body, Pri: pri, heapIndex: -1,
		delay: seconds(delay), ttr: seconds(ttr), createdAt: c.e.wall(now)}
	if delay > 0 {
		j.deadline = now + int64(delay)
	}
	if c.e.jl == nil {
		c.e.publish(j, int(c.shard), now)
		return j, nil
	}
	r := record.Job{ID: id, Tube: t.Name, Pri: pri, State: record.StateReady,
		Delay: delay, TTR: ttr, CreatedAt: j.createdAt, Body: body}
	if delay > 0 {
		r.State, r.Deadline = record.StateDelayed, c.e.wall(j.deadline)
	}
	// The job keeps its tube alive while it waits for the log, and it
	// names its putter for the ack. The ack may run before Put returns.
	t.mu.Lock()
	t.jobs++
	t.mu.Unlock()
	j.owner = c
	seq := c.appended.Add(1)
	if err := c.e.jl.Put(&r, (*putAck)(j)); err != nil {
		c.appended.Add(^uint64(0))
		c.e.unpublished(j, int(c.shard))
		return nil, c.e.refused(err)
	}
	c.lastPut = seq
	return j, nil
}

// publish makes a new job visible to every client: in the id table first
// (once the tube has it, a waiter on another loop may be handed the job
// and act on its id at once), then in its tube, serving waiters.
// now is the engine's clock, for serving waiters.
func (e *Engine) publish(j *Job, shard int, now int64) {
	e.jobs.Put(j)
	t := j.Tube
	var cl claims
	t.mu.Lock()
	if e.jl == nil {
		t.jobs++ // with a binlog, counted when the put was logged
	}
	t.totalJobs++
	if j.deadline != 0 { // a delayed put (Put set when it becomes ready)
		t.insert(j, Delayed, shard)
	} else {
		t.insertReady(j, now, shard)
		if t.waiters.head != nil {
			t.serveWaiters(now, shard, &cl)
		}
	}
	t.mu.Unlock()
	e.ctr.add(shard, cTotalJobs, 1)
	cl.deliver(nil)
}

// unpublished drops a put whose record was refused or failed: it never
// existed for anyone. Its memory goes back on shard.
func (e *Engine) unpublished(j *Job, shard int) {
	e.uncharge(shard, jobCost(j.Body))
	t := j.Tube
	t.mu.Lock()
	t.jobs--
	empty := t.jobs == 0
	t.mu.Unlock()
	if empty {
		e.reg.maybeFree(t)
	}
}

// lockJob finds job id and locks its tube. It returns nil (and holds no
// lock) when there is no such job.
func (e *Engine) lockJob(id uint64) *Job {
	j := e.jobs.Get(id)
	if j == nil {
		return nil
	}
	j.Tube.mu.Lock()
	if j.state == Deleted || j.state == 0 {
		j.Tube.mu.Unlock()
		return nil
	}
	return j
}

// lockReserved finds job id if c holds it, with its tube locked.
func (c *Client) lockReserved(id uint64) *Job {
	j := c.e.lockJob(id)
	if j != nil && (j.state != Reserved || j.owner != c) {
		j.Tube.mu.Unlock()
		return nil
	}
	return j
}

// Delete removes a job that is ready, delayed, buried, or reserved by c.
// An error (ErrLogFailed) means the binlog could not take the record and
// nothing changed. now is the engine's clock when the delete arrived, as
// for Put.
func (c *Client) Delete(now int64, id uint64) (bool, error) {
	j := c.e.lockJob(id)
	if j == nil {
		return false, nil
	}
	t := j.Tube
	if j.state == Reserved && j.owner != c {
		t.mu.Unlock()
		return false, nil
	}
	if c.e.jl != nil {
		if err := c.logged(c.e.jl.Delete(id, c.ack())); err != nil {
			t.mu.Unlock()
			return true, err
		}
	}
	if j.state == Reserved {
		t.observeRun(j, now)
		c.unlinkReserved(j)
		j.owner = nil
	}
	t.deleteLocked(j, int(c.shard))
	t.cmdDelete++
	empty := t.jobs == 0
	t.mu.Unlock()
	c.e.forget(j, int(c.shard))
	if empty {
		c.e.reg.maybeFree(t)
	}
	return true, nil
}

// deleteLocked takes j (no longer reserved) out of t for good. Caller
// holds t.mu and, once it has let go of it, calls Engine.forget.
func (t *Tube) deleteLocked(j *Job, shard int) {
	t.remove(j, shard)
	j.state = Deleted
	t.jobs--
}

// forget drops a deleted job from the id table and uncharges its memory.
// Caller holds no lock.
func (e *Engine) forget(j *Job, shard int) {
	e.jobs.Delete(j.ID)
	e.uncharge(shard, jobCost(j.Body))
}

// Release gives back a job c holds, with a new priority and delay.
// An error (ErrNoRoom, ErrLogFailed) means the binlog refused the record:
// nothing changed. Unlike upstream, a release with delay 0 is logged too, so its
// new priority survives a restart (#597).
func (c *Client) Release(id uint64, pri uint32, delay time.Duration) (bool, error) {
	j := c.lockReserved(id)
	if j == nil {
		return false, nil
	}
	return true, c.release(j, pri, delay, true)
}

// Unreserve gives back a job c holds as a release with the job's own
// priority and no delay does, but counts neither a release nor the
// reserve that took it: a router that reserved on several groups at once
// puts back the job a group handed out that its client was not given, and
// nobody reserved or released it. Its record is that release's, with the
// job's counters so. Errors as Release's.
func (c *Client) Unreserve(id uint64) (bool, error) {
	j := c.lockReserved(id)
	if j == nil {
		return false, nil
	}
	return true, c.release(j, j.Pri, 0, false)
}

// release is Release (counted) and Unreserve (not) for j, which c holds,
// with its tube locked (lockReserved); counted, it counts a release in
// j's releases, and otherwise takes back the reserve in j's reserves. It
// unlocks the tube.
func (c *Client) release(j *Job, pri uint32, delay time.Duration, counted bool) error {
	var releases, unreserves uint32
	if counted {
		releases = 1
	} else if j.reserves > 0 {
		unreserves = 1
	}
	t := j.Tube
	now := c.e.mono()
	if c.e.jl != nil {
		var deadline int64
		if delay > 0 {
			deadline = c.e.wall(now + int64(delay))
		}
		cnt := j.counters()
		cnt.Releases += releases
		cnt.Reserves -= unreserves
		if err := c.logged(c.e.jl.Release(j.ID, pri, delay, deadline, cnt, c.ack())); err != nil {
			t.mu.Unlock()
			return err
		}
	}
	t.remove(j, int(c.shard))
	c.unlinkReserved(j)
	j.owner = nil
	j.Pri = pri
	j.delay = seconds(delay)
	j.releases += releases
	j.reserves -= unreserves
	var cl claims
	if delay > 0 {
		j.deadline = now + int64(delay)
		t.insert(j, Delayed, int(c.shard))
	} else {
		t.insertReady(j, now, int(c.shard))
		if t.waiters.head != nil {
			t.serveWaiters(now, int(c.shard), &cl)
		}
	}
	t.mu.Unlock()
	cl.deliver(nil)
	return nil
}

// Bury moves a job c holds to the tail of its tube's buried list.
// An error (ErrNoRoom, ErrLogFailed) means nothing changed.
func (c *Client) Bury(id uint64, pri uint32) (bool, error) {
	j := c.lockReserved(id)
	if j == nil {
		return false, nil
	}
	t := j.Tube
	if c.e.jl != nil {
		cnt := j.counters()
		cnt.Buries++
		if err := c.logged(c.e.jl.Bury(id, pri, t.buriedSeq+1, cnt, c.ack())); err != nil {
			t.mu.Unlock()
			return true, err
		}
	}
	t.remove(j, int(c.shard))
	c.unlinkReserved(j)
	j.owner = nil
	j.Pri = pri
	j.buries++
	t.buriedSeq++
	j.buriedSeq = t.buriedSeq
	t.insert(j, Buried, int(c.shard))
	t.mu.Unlock()
	return true, nil
}

// Touch restarts the TTR of a job c holds.
func (c *Client) Touch(id uint64) bool {
	j := c.lockReserved(id)
	if j == nil {
		return false
	}
	j.deadline = c.e.mono() + j.ttrNs()
	j.Tube.ttr.Fix(j)
	j.Tube.mu.Unlock()
	return true
}

// ReserveJob reserves a specific ready, delayed or buried job in any tube,
// ignoring the watch list and pauses.
func (c *Client) ReserveJob(id uint64) *Job {
	j := c.e.lockJob(id)
	if j == nil {
		return nil
	}
	t := j.Tube
	if j.state == Reserved {
		t.mu.Unlock()
		return nil
	}
	t.remove(j, int(c.shard))
	c.mu.Lock()
	t.reserveLocked(j, c, c.e.mono(), int(c.shard))
	c.mu.Unlock()
	t.mu.Unlock()
	return j
}

// kickLocked makes a buried or delayed job ready. Caller holds the tube
// lock. It fails only when the binlog refuses the record.
func (c *Client) kickLocked(t *Tube, j *Job) error {
	if c.e.jl != nil {
		cnt := j.counters()
		cnt.Kicks++
		if err := c.logged(c.e.jl.Kick(j.ID, cnt, c.ack())); err != nil {
			return err
		}
	}
	shard := int(c.shard)
	t.remove(j, shard)
	j.kicks++
	t.insertReady(j, c.e.mono(), shard)
	return nil
}

// Kick kicks up to n jobs in the used tube: buried ones if there are any
// (oldest first), otherwise delayed ones (soonest first). It stops early
// if the binlog refuses a record; err is that refusal.
func (c *Client) Kick(n uint32) (k uint32, err error) { return c.kickIn(c.use, n) }

// kickIn is Kick in tube t. It kicks at most as many jobs as t had in the
// state it kicks from when it began, lockChunk jobs per hold of t's lock:
// other clients of t, and the binlog's acks, get the lock in between.
func (c *Client) kickIn(t *Tube, n uint32) (k uint32, err error) {
	t.mu.Lock()
	buried := t.buried.head != nil
	if buried {
		n = uint32(min(int64(n), t.count[Buried]))
	} else {
		n = uint32(min(int64(n), t.count[Delayed]))
	}
	for {
		var j *Job
		for chunk := min(k+lockChunk, n); k < chunk; k++ {
			if buried {
				j = t.buried.head
			} else {
				j = t.delay.Top()
			}
			if j == nil {
				break
			}
			if err = c.kickLocked(t, j); err != nil {
				break
			}
		}
		var cl claims
		if k > 0 && t.waiters.head != nil {
			t.serveWaiters(c.e.mono(), int(c.shard), &cl)
		}
		t.mu.Unlock()
		cl.deliver(nil)
		if j == nil || err != nil || k == n {
			return k, err
		}
		runtime.Gosched()
		t.mu.Lock()
	}
}

// KickJob kicks one buried or delayed job in any tube. An error (ErrNoRoom,
// ErrLogFailed) means nothing changed.
func (c *Client) KickJob(id uint64) (bool, error) {
	j := c.e.lockJob(id)
	if j == nil {
		return false, nil
	}
	t := j.Tube
	if j.state != Buried && j.state != Delayed {
		t.mu.Unlock()
		return false, nil
	}
	var cl claims
	if err := c.kickLocked(t, j); err != nil {
		t.mu.Unlock()
		return true, err
	}
	if t.waiters.head != nil {
		t.serveWaiters(c.e.mono(), int(c.shard), &cl)
	}
	t.mu.Unlock()
	cl.deliver(nil)
	return true, nil
}

// Peek finds a job in any state. The body is immutable, so the caller may
// send it without a lock.
func (e *Engine) Peek(id uint64) *Job {
	j := e.lockJob(id)
	if j != nil {
		j.Tube.mu.Unlock()
	}
	return j
}

// PeekReady is the next job a reserve on the used tube would get (paused
// or not, as upstream).
func (c *Client) PeekReady() *Job { return c.peekUsed(func(t *Tube) *Job { return t.ready.Top() }) }

// PeekDelayed is the delayed job in the used tube that becomes ready first.
func (c *Client) PeekDelayed() *Job { return c.peekUsed(func(t *Tube) *Job { return t.delay.Top() }) }

// PeekBuried is the oldest buried job in the used tube.
func (c *Client) PeekBuried() *Job { return c.peekUsed(func(t *Tube) *Job { return t.buried.head }) }

// peekUsed reads one end of a used-tube structure under the tube's lock.
func (c *Client) peekUsed(end func(*Tube) *Job) *Job {
	t := c.use
	t.mu.Lock()
	j := end(t)
	t.mu.Unlock()
	return j
}

// PauseTube stops reserves from a tube for delay; 0 unpauses it and wakes
// its waiters. It reports false when the tube does not exist. With a
// journal that logs pauses (the cluster's), the pause is logged first
// and an error (ErrNoRoom, ErrLogFailed) means nothing changed; the
// reply waits for the record, as for any change.
func (c *Client) PauseTube(name []byte, delay time.Duration) (bool, error) {
	e := c.e
	// Hold the registry lock until the tube's own lock is taken, so the
	// tube cannot be freed in between and the pause lost.
	e.reg.mu.Lock()
	t := e.reg.byName[string(name)]
	if t == nil {
		e.reg.mu.Unlock()
		return false, nil
	}
	t.mu.Lock()
	e.reg.mu.Unlock()
	now := e.mono()
	// 0 becomes 1 ns: "unpause now, and let the timer serve the waiters",
	// upstream's fix for #113.
	until := now + max(int64(delay), 1)
	if e.pj != nil {
		p := record.Pause{Tube: t.Name, Delay: delay}
		if delay > 0 {
			p.Until = e.wall(until)
		}
		if err := c.logged(e.pj.Pause(&p, c.ack())); err != nil {
			t.mu.Unlock()
			return true, err
		}
	}
	t.cmdPauseTube++
	t.pauseDur = int64(delay)
	t.pauseUntil = until
	t.schedule(t.pauseUntil)
	t.mu.Unlock()
	return true, nil
}
