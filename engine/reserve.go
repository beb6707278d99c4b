package engine

import "time"

// The reserve wait, one per client at a time. Client.wstate holds the state
// in its low bits and the wait's generation above them, so a node queued
// for an earlier wait can never claim a later one. Exactly one party ends a
// wait: the one whose CAS moves it out of waiting.
//
//	state       | moved by                                  | to           | under
//	------------+-------------------------------------------+--------------+-----------------------------
//	idle        | park (the client's loop)                  | waiting      | nothing: an idle client is
//	            |                                           |              |   its loop's alone
//	waiting     | serveWaiters: a put, release, kick, timer | claiming     | the serving tube's lock (CAS)
//	            |   or published put, on any goroutine      |              |
//	waiting     | onTimer (timeout or TTR margin)           | claiming     | nothing (CAS)
//	waiting     | CancelWait, Close (the client's loop)     | claiming     | nothing (CAS)
//	claiming    | the claimer, in finish, once it has       | woke,        | nothing (store): the claimer
//	            |   stored the job (serveWaiters, under the |   wokeTimed- |   owns a claiming client's
//	            |   tube lock and c.mu) and unlinked every  |   Out, woke- |   wait
//	            |   node of the client from every tube      |   DeadlineS.,|
//	            |                                           |   cancelled  |
//	woke…       | TakeWakeup (the client's loop)            | idle         | nothing
//
// claiming exists because the loop can look at its wait at any time: a
// binlog acknowledgement wakes it too, not only the claimer's Wake. Until
// the claimer has stored the job and unlinked the nodes, TakeWakeup sees
// claiming, answers Parked and leaves wjob and the nodes alone; the final
// store publishes both, and only then does the claimer call the Waker
// (unless the claimer is the client itself, answering synchronously).
// cWaiting drops at the CAS out of waiting.
const (
	idle uint64 = iota
	waiting
	claiming // the wait is ending: the claimer is storing its answer
	woke     // a job was assigned
	wokeTimedOut
	wokeDeadlineSoon
	cancelled
	stateBits = 3
	stateMask = 1<<stateBits - 1
)

// Reserve runs reserve (timeout < 0) or reserve-with-timeout. It answers at
// once when it can; otherwise it parks the client on every watched tube and
// returns Parked, and the Waker is called exactly once with the answer.
// now is the engine's clock (Engine.Now) when the reserve arrived, as for
// Put: a loop reads it once per pass.
func (c *Client) Reserve(now int64, timeout time.Duration) (*Job, Outcome) {
	j, anyReady := c.take(now)
	if j != nil {
		return j, GotJob
	}
	// Only a reserve that found no job needs the TTR margin, and finding it
	// walks every job the client holds: a worker pipelining reserves holds
	// many.
	soonest, holding := c.soonestDeadline()
	margin := int64(never)
	inMargin := false
	if holding {
		margin = soonest - Margin
		inMargin = now >= margin
	}
	// Upstream answers DEADLINE_SOON only when no watched tube has a ready
	// job (pause ignored), so a worker inside its margin can still take
	// more work (#646).
	if inMargin && !anyReady {
		return nil, DeadlineSoon
	}
	if timeout == 0 {
		// Upstream's timer answers the margin before the timeout.
		if inMargin {
			return nil, DeadlineSoon
		}
		return nil, TimedOut
	}
	return c.park(now, timeout, margin)
}

// take reserves the most urgent ready job, by (pri, id), across the
// unpaused watched tubes, and reports whether any watched tube, paused or
// not, has a ready job. It decides on one snapshot: with several tubes it
// holds all their locks at once (in the tubes' creation order, the one
// order every multi-tube lock follows), so no other reserve can take the
// best job between the comparison and the take.
func (c *Client) take(now int64) (j *Job, anyReady bool) {
	var buf [8]*Tube
	tubes := c.Watched()
	if len(tubes) > 1 {
		tubes = lockInOrder(append(buf[:0], tubes...))
	} else {
		tubes[0].mu.Lock()
	}
	var best *Tube
	for _, t := range tubes {
		top := t.ready.Top()
		if top == nil {
			continue
		}
		anyReady = true
		if t.paused(now) {
			continue
		}
		if best == nil {
			best = t
		} else if b := best.ready.Top(); top.Pri < b.Pri || top.Pri == b.Pri && top.ID < b.ID {
			best = t
		}
	}
	if best != nil {
		j = best.ready.Top()
		best.remove(j, int(c.shard))
		c.mu.Lock()
		best.reserveLocked(j, c, now, int(c.shard))
		c.mu.Unlock()
	}
	for _, t := range tubes {
		t.mu.Unlock()
	}
	return j, anyReady
}

// Peek is the job take would reserve now, by (pri, id), across the
// unpaused watched tubes, without reserving it: ok is false when there is
// none. Each tube is looked at under its own lock in turn, so the answer
// may be out of date by the time it is read: a router asks it of every
// group, then reserves at the group with the most urgent job.
func (c *Client) Peek(now int64) (id uint64, pri uint32, ok bool) {
	for _, t := range c.Watched() {
		t.mu.Lock()
		if top := t.ready.Top(); top != nil && !t.paused(now) && (!ok || top.Pri < pri || top.Pri == pri && top.ID < id) {
			id, pri, ok = top.ID, top.Pri, true
		}
		t.mu.Unlock()
	}
	return id, pri, ok
}

// lockInOrder sorts tubes by creation order and locks them all.
func lockInOrder(tubes []*Tube) []*Tube {
	for i := 1; i < len(tubes); i++ { // insertion sort: watch lists are short
		for k := i; k > 0 && tubes[k].order < tubes[k-1].order; k-- {
			tubes[k], tubes[k-1] = tubes[k-1], tubes[k]
		}
	}
	for _, t := range tubes {
		t.mu.Lock()
	}
	return tubes
}

func (c *Client) park(now int64, timeout time.Duration, margin int64) (*Job, Outcome) {
	if c.waitState == nil {
		c.waitState = &waitState{}
	}
	c.wgen++
	gen := c.wgen
	c.wjob = nil
	deadline := int64(never)
	if timeout > 0 {
		deadline = now + int64(timeout)
	}
	c.timeoutAt.Store(deadline)
	c.marginAt.Store(margin)
	// The nodes are filled before the wait is published: from then on a
	// claimer (a stale timer fire included) may unlink them.
	watched := c.Watched()
	if len(c.nodes) != len(watched) {
		c.nodes = make([]waitNode, len(watched))
	}
	for i, t := range watched {
		c.nodes[i].c, c.nodes[i].t = c, t
	}
	c.e.ctr.add(int(c.shard), cWaiting, 1)
	c.wstate.Store(gen<<stateBits | waiting)
	var cl claims
	for i := range c.nodes {
		n := &c.nodes[i]
		t := n.t
		t.mu.Lock()
		t.waiters.remove(n) // a node left behind by an earlier wait
		n.gen = gen
		t.waiters.pushBack(n)
		// A job may have arrived between take and now: serving the queue
		// here closes that window (the queue is FIFO, so an earlier waiter
		// gets it first, as it should).
		if t.ready.Len() > 0 {
			t.serveWaiters(now, int(c.shard), &cl)
		}
		t.mu.Unlock()
		if c.wstate.Load()&stateMask != waiting {
			break
		}
	}
	if cl.deliver(c) {
		return c.wjob, GotJob
	}
	if c.wstate.Load()&stateMask != waiting {
		// Claimed by another goroutine while we were still queueing: make
		// sure no node queued after its cleanup stays behind, so the next
		// wait starts with every node unlinked.
		c.unlinkNodes()
		return nil, Parked
	}
	if c.wstate.Load() == gen<<stateBits|waiting {
		if at := min(deadline, margin); at != never {
			d := time.Duration(at - c.e.mono())
			if c.timer == nil {
				c.timer = c.e.afterFunc(d, c.onTimer)
			} else {
				c.timer.Reset(d)
			}
		}
	}
	return nil, Parked
}

// claim ends wait gen: only one caller wins, and it must then call finish.
func (c *Client) claim(gen uint64) bool {
	if c.wstate.CompareAndSwap(gen<<stateBits|waiting, gen<<stateBits|claiming) {
		c.e.ctr.add(int(c.shard), cWaiting, -1)
		return true
	}
	return false
}

// finish completes a claim with its result: it unlinks the client from
// every tube queue, publishes the result, then wakes the client's loop
// unless the claimer is self. It must be called with no tube lock held.
// It reports whether c is self.
func (c *Client) finish(result uint64, self *Client) bool {
	c.unlinkNodes()
	st := c.wstate.Load() // gen|claiming: only the claimer changes it now
	c.wstate.Store(st&^stateMask | result)
	if c == self {
		return true
	}
	c.waker.Wake(c)
	return false
}

func (c *Client) unlinkNodes() {
	for i := range c.nodes {
		n := &c.nodes[i]
		n.t.mu.Lock()
		n.t.waiters.remove(n)
		n.t.mu.Unlock()
	}
}

// onTimer ends a wait at its timeout or at the TTR safety margin of a job
// the client holds. It runs on a timer goroutine; a stale fire from an
// earlier wait finds nothing due and does nothing.
func (c *Client) onTimer() {
	st := c.wstate.Load()
	if st&stateMask != waiting {
		return
	}
	now := c.e.mono()
	result := wokeTimedOut
	switch margin, timeout := c.marginAt.Load(), c.timeoutAt.Load(); {
	case now >= margin:
		result = wokeDeadlineSoon
	case now >= timeout:
	default:
		c.timer.Reset(time.Duration(min(margin, timeout) - now))
		// A new wait may have begun (and set its own, earlier, deadline)
		// since we loaded the state: evaluate again so our Reset cannot
		// postpone it.
		if c.wstate.Load() != st {
			c.onTimer()
		}
		return
	}
	if c.claim(st >> stateBits) {
		c.finish(result, nil)
	}
}

// TakeWakeup is called by the loop after Wake: it returns the answer to the
// parked reserve and makes the client ready for its next command.
func (c *Client) TakeWakeup() (*Job, Outcome) {
	if c.waitState == nil {
		return nil, Parked // never waited
	}
	st := c.wstate.Load()
	if s := st & stateMask; s == waiting || s == claiming {
		// Woken for another reason (the binlog), or the claimer is not
		// done yet (it wakes us when it is): keep waiting.
		return nil, Parked
	}
	c.wstate.Store(st &^ stateMask) // idle, same generation
	switch st & stateMask {
	case woke:
		j := c.wjob
		c.wjob = nil
		return j, GotJob
	case wokeTimedOut:
		return nil, TimedOut
	case wokeDeadlineSoon:
		return nil, DeadlineSoon
	}
	return nil, Parked
}

// CancelWait is for a parked connection that is half-closed by its peer
// (upstream answers TIMED_OUT), or whose router cancels the wait because
// another group answered first (beanpole-cancel-wait). It reports whether
// the wait was still open (so the caller should answer TIMED_OUT). A wait that already has its
// answer (a job assigned, a timeout, DEADLINE_SOON) is left for
// TakeWakeup to return: an assigned job is then the client's like any job
// it reserved, and Close gives it back if the client never deletes it.
func (c *Client) CancelWait() bool {
	if c.waitState == nil {
		return false
	}
	st := c.wstate.Load()
	if st&stateMask == waiting && c.claim(st>>stateBits) {
		c.finish(cancelled, c)
		return true
	}
	return false
}
