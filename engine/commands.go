package engine

import "time"

// Put creates a job with a fresh id from NextID in the used tube. delay and
// ttr are as given on the wire; a ttr below 1 s becomes 1 s.
func (c *Client) Put(id uint64, pri uint32, delay, ttr time.Duration, body []byte) *Job {
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
	t.mu.Lock()
	t.jobs++
	t.totalJobs++
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
	c.e.ctr.add(c.shard, cTotalJobs, 1)
	cl.deliver(nil)
	return j
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
func (c *Client) Delete(id uint64) bool {
	j := c.e.lockJob(id)
	if j == nil {
		return false
	}
	t := j.Tube
	if j.state == Reserved {
		if j.owner != c {
			t.mu.Unlock()
			return false
		}
		c.unlinkReserved(j)
		j.owner = nil
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
	return true
}

// Release gives back a job c holds, with a new priority and delay.
func (c *Client) Release(id uint64, pri uint32, delay time.Duration) bool {
	j := c.lockReserved(id)
	if j == nil {
		return false
	}
	t := j.Tube
	now := c.e.mono()
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
	return true
}

// Bury moves a job c holds to the tail of its tube's buried list.
func (c *Client) Bury(id uint64, pri uint32) bool {
	j := c.lockReserved(id)
	if j == nil {
		return false
	}
	t := j.Tube
	t.remove(j, c.shard)
	c.unlinkReserved(j)
	j.owner = nil
	j.Pri = pri
	j.buries++
	t.insert(j, Buried, c.shard)
	t.mu.Unlock()
	return true
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

// kickLocked makes a buried or delayed job ready. Caller holds the tube lock.
func (t *Tube) kickLocked(j *Job, shard int) {
	t.remove(j, shard)
	j.kicks++
	t.insert(j, Ready, shard)
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
			t.kickLocked(t.buried.head, c.shard)
		}
	} else {
		for ; k < n && t.delay.Len() > 0; k++ {
			t.kickLocked(t.delay.Top(), c.shard)
		}
	}
	if k > 0 && t.waiters.head != nil {
		t.serveWaiters(c.e.mono(), c.shard, &cl)
	}
	t.mu.Unlock()
	cl.deliver(nil)
	return k
}

// KickJob kicks one buried or delayed job in any tube.
func (c *Client) KickJob(id uint64) bool {
	j := c.e.lockJob(id)
	if j == nil {
		return false
	}
	t := j.Tube
	if j.state != Buried && j.state != Delayed {
		t.mu.Unlock()
		return false
	}
	var cl claims
	t.kickLocked(j, c.shard)
	if t.waiters.head != nil {
		t.serveWaiters(c.e.mono(), c.shard, &cl)
	}
	t.mu.Unlock()
	cl.deliver(nil)
	return true
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
func (c *Client) PeekReady() *Job {
	t := c.use
	t.mu.Lock()
	j := t.ready.Top()
	t.mu.Unlock()
	return j
}

// PeekDelayed is the delayed job in the used tube that becomes ready first.
func (c *Client) PeekDelayed() *Job {
	t := c.use
	t.mu.Lock()
	j := t.delay.Top()
	t.mu.Unlock()
	return j
}

// PeekBuried is the oldest buried job in the used tube.
func (c *Client) PeekBuried() *Job {
	t := c.use
	t.mu.Lock()
	j := t.buried.head
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
