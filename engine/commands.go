package engine

import (
	"time"

	"github.com/beanpole/beanpole/persist"
)

// Put creates a job with a fresh id from NextID in the used tube. delay and
// ttr are as given on the wire; a ttr below 1 s becomes 1 s. An error means
// the binlog refused the record (OUT_OF_MEMORY) and no job was made.
func (c *Client) Put(id uint64, pri uint32, delay, ttr time.Duration, body []byte) (*Job, error) {
	if ttr < time.Second {
		ttr = time.Second
	}
	wall := time.Now()
	now := int64(wall.Sub(c.e.base))
	t := c.use
	j := &Job{ID: id, Tube: t, Body: body, Pri: pri, heapIndex: -1,
		delay: int64(delay), ttr: int64(ttr), createdAt: wall.UnixNano()}
	// In the table first: once the tube has it, a waiter on another loop
	// may be handed the job and act on its id before Put returns.
	c.e.jobs.Put(j)
	var cl claims
	state := Ready
	if delay > 0 {
		state = Delayed
		j.deadline = now + int64(delay)
	}
	t.mu.Lock()
	if c.e.jl != nil {
		j.state = state
		r := c.e.record(j)
		c.rec = persist.AppendFull(c.rec[:0], &r)
		if err := c.journal(c.rec); err != nil {
			t.mu.Unlock()
			c.e.jobs.Delete(id)
			return nil, err
		}
	}
	t.jobs++
	t.totalJobs++
	if state == Delayed {
		t.insert(j, Delayed, c.shard)
	} else {
		t.insert(j, Ready, c.shard)
		if t.waiters.head != nil {
			t.serveWaiters(now, c.shard, &cl)
		}
	}
	t.mu.Unlock()
	c.e.ctr.add(c.shard, cTotalJobs, 1)
	cl.deliver(nil)
	return j, nil
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
// An error means the binlog failed to take the record (INTERNAL_ERROR);
// the job is deleted all the same, as upstream.
func (c *Client) Delete(id uint64) (bool, error) {
	j := c.e.lockJob(id)
	if j == nil {
		return false, nil
	}
	t := j.Tube
	if j.state == Reserved {
		if j.owner != c {
			t.mu.Unlock()
			return false, nil
		}
		c.unlinkReserved(j)
		j.owner = nil
	}
	var err error
	if c.e.jl != nil {
		c.rec = persist.AppendDelete(c.rec[:0], id)
		err = c.journal(c.rec)
	}
	t.remove(j, c.shard)
	j.state = Deleted
	t.jobs--
	t.cmdDelete++
	empty := t.jobs == 0
	t.mu.Unlock()
	c.e.jobs.Delete(id)
	if empty {
		c.e.reg.maybeFree(t)
	}
	return true, err
}

// Release gives back a job c holds, with a new priority and delay.
// An error means the binlog refused the record (OUT_OF_MEMORY): nothing
// changed. Unlike upstream, a release with delay 0 is logged too, so its
// new priority survives a restart (#597).
func (c *Client) Release(id uint64, pri uint32, delay time.Duration) (bool, error) {
	j := c.lockReserved(id)
	if j == nil {
		return false, nil
	}
	t := j.Tube
	now := c.e.mono()
	if c.e.jl != nil {
		var deadline int64
		if delay > 0 {
			deadline = c.e.wall(now + int64(delay))
		}
		cnt := j.counters()
		cnt.Releases++
		c.rec = persist.AppendRelease(c.rec[:0], id, pri, delay, deadline, cnt)
		if err := c.journal(c.rec); err != nil {
			t.mu.Unlock()
			return true, err
		}
	}
	t.remove(j, c.shard)
	c.unlinkReserved(j)
	j.owner = nil
	j.Pri = pri
	j.delay = int64(delay)
	j.releases++
	var cl claims
	if delay > 0 {
		j.deadline = now + int64(delay)
		t.insert(j, Delayed, c.shard)
	} else {
		t.insert(j, Ready, c.shard)
		if t.waiters.head != nil {
			t.serveWaiters(now, c.shard, &cl)
		}
	}
	t.mu.Unlock()
	cl.deliver(nil)
	return true, nil
}

// Bury moves a job c holds to the tail of its tube's buried list.
// An error means the binlog refused the record (OUT_OF_MEMORY).
func (c *Client) Bury(id uint64, pri uint32) (bool, error) {
	j := c.lockReserved(id)
	if j == nil {
		return false, nil
	}
	t := j.Tube
	if c.e.jl != nil {
		cnt := j.counters()
		cnt.Buries++
		c.rec = persist.AppendBury(c.rec[:0], id, pri, t.buriedSeq+1, cnt)
		if err := c.journal(c.rec); err != nil {
			t.mu.Unlock()
			return true, err
		}
	}
	t.remove(j, c.shard)
	c.unlinkReserved(j)
	j.owner = nil
	j.Pri = pri
	j.buries++
	t.buriedSeq++
	j.buriedSeq = t.buriedSeq
	t.insert(j, Buried, c.shard)
	t.mu.Unlock()
	return true, nil
}

// Touch restarts the TTR of a job c holds.
func (c *Client) Touch(id uint64) bool {
	j := c.lockReserved(id)
	if j == nil {
		return false
	}
	j.deadline = c.e.mono() + j.ttr
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
	t.remove(j, c.shard)
	c.mu.Lock()
	t.reserveLocked(j, c, c.e.mono(), c.shard)
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
		c.rec = persist.AppendKick(c.rec[:0], j.ID, cnt)
		if err := c.journal(c.rec); err != nil {
			return err
		}
	}
	shard := c.shard
	t.remove(j, shard)
	j.kicks++
	t.insert(j, Ready, shard)
	return nil
}

// Kick kicks up to n jobs in the used tube: buried ones if there are any
// (oldest first), otherwise delayed ones (soonest first).
func (c *Client) Kick(n uint32) uint32 {
	t := c.use
	var cl claims
	var k uint32
	t.mu.Lock()
	if t.buried.head != nil {
		for ; k < n && t.buried.head != nil; k++ {
			if c.kickLocked(t, t.buried.head) != nil {
				break
			}
		}
	} else {
		for ; k < n && t.delay.Len() > 0; k++ {
			if c.kickLocked(t, t.delay.Top()) != nil {
				break
			}
		}
	}
	if k > 0 && t.waiters.head != nil {
		t.serveWaiters(c.e.mono(), c.shard, &cl)
	}
	t.mu.Unlock()
	cl.deliver(nil)
	return k
}

// KickJob kicks one buried or delayed job in any tube. An error means the
// binlog refused the record (OUT_OF_MEMORY).
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
		t.serveWaiters(c.e.mono(), c.shard, &cl)
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
// its waiters. It reports false when the tube does not exist.
func (e *Engine) PauseTube(name []byte, delay time.Duration) bool {
	// Hold the registry lock until the tube's own lock is taken, so the
	// tube cannot be freed in between and the pause lost.
	e.reg.mu.Lock()
	t := e.reg.byName[string(name)]
	if t == nil {
		e.reg.mu.Unlock()
		return false
	}
	t.mu.Lock()
	e.reg.mu.Unlock()
	t.cmdPauseTube++
	// 0 becomes 1 ns: "unpause now, and let the timer serve the waiters",
	// upstream's fix for #113.
	d := max(int64(delay), 1)
	t.pauseDur = int64(delay)
	t.pauseUntil = e.mono() + d
	t.schedule(t.pauseUntil)
	t.mu.Unlock()
	return true
}
