package engine

import (
	"math"
	"sync"
	"time"
)

// Tube is a named queue. All of its jobs' mutable state, its heaps, its
// buried list, its waiter queue and its counters are guarded by mu: engine
// state is sharded per tube, so loops working on different tubes never
// contend.
type Tube struct {
	Name      string
	nameBytes []byte
	e         *Engine
	order     uint64 // creation order: tubes locked together are locked in it

	mu     sync.Mutex
	ready  jobHeap // (pri, id)
	delay  jobHeap // (deadline, id)
	ttr    jobHeap // reserved jobs by TTR deadline
	buried struct{ head, tail *Job }
	// waiters are the clients parked in reserve on this tube, served FIFO.
	waiters waitQueue

	count        [Deleted]int64 // jobs per state
	urgent       int64          // ready jobs with pri < 1024
	jobs         int64          // jobs in any state: they keep the tube alive
	totalJobs    uint64
	cmdDelete    uint64
	cmdPauseTube uint64
	pauseDur     int64  // ns as given to pause-tube
	pauseUntil   int64  // monotonic ns; 0 when not paused
	buriedSeq    uint64 // last buried-list sequence handed out
	lat          *latency

	// One runtime timer per tube drives delayed→ready, TTR expiry and the
	// end of a pause. armedAt is the earliest time it is set to fire; it is
	// only moved earlier here, and a fire re-arms for whatever is next, so
	// the common case (a later deadline) never touches the timer.
	timer   timer
	armedAt int64

	// Guarded by the registry lock.
	using, watching int64
	listIndex       int
	dead            bool
}

const never = math.MaxInt64

// lockChunk bounds the jobs an operation over many of a tube's jobs (kick,
// the dashboard's flush, reading the oldest ready job) handles per hold of
// the tube's lock, a few tens of microseconds of work: between two chunks
// it lets go of the lock, so the tube's clients and the binlog's acks,
// which publish puts under it, wait for one chunk, not for all of them.
const lockChunk = 1024

func newTube(e *Engine, name []byte) *Tube {
	t := &Tube{Name: string(name), nameBytes: append([]byte(nil), name...), e: e, armedAt: never,
		order: e.tubeSeq.Add(1)}
	t.delay.byDeadline = true
	t.ttr.byDeadline = true
	return t
}

// NameBytes is the tube's name; it must not be modified.
func (t *Tube) NameBytes() []byte { return t.nameBytes }

func (t *Tube) paused(now int64) bool { return t.pauseUntil != 0 && now < t.pauseUntil }

// insertReady makes j ready, ready since now (latency.go). Caller holds mu.
func (t *Tube) insertReady(j *Job, now int64, shard int) {
	j.deadline = now
	t.insert(j, Ready, shard)
}

// insert puts j into the structure for state s and counts it; a ready job
// goes in through insertReady. Caller holds mu.
func (t *Tube) insert(j *Job, s State, shard int) {
	j.state = s
	switch s {
	case Ready:
		t.ready.Push(j)
		if urgent(j.Pri) {
			t.urgent++
			t.e.ctr.add(shard, cJobsUrgent, 1)
		}
	case Delayed:
		t.delay.Push(j)
		t.schedule(j.deadline)
	case Reserved:
		t.ttr.Push(j)
		t.schedule(j.deadline)
	case Buried:
		j.next = nil
		j.prev = t.buried.tail
		if t.buried.tail != nil {
			t.buried.tail.next = j
		} else {
			t.buried.head = j
		}
		t.buried.tail = j
	}
	t.count[s]++
	t.e.ctr.add(shard, stateCounter(s), 1)
}

// remove takes j out of its state's structure and uncounts it. Caller holds
// mu. A reserved job stays in its owner's list: see Client.unlinkReserved.
func (t *Tube) remove(j *Job, shard int) {
	s := j.state
	switch s {
	case Ready:
		t.ready.Remove(j)
		if urgent(j.Pri) {
			t.urgent--
			t.e.ctr.add(shard, cJobsUrgent, -1)
		}
	case Delayed:
		t.delay.Remove(j)
	case Reserved:
		t.ttr.Remove(j)
	case Buried:
		j.unlinkFrom(&t.buried.head, &t.buried.tail)
	}
	t.count[s]--
	t.e.ctr.add(shard, stateCounter(s), -1)
}

// schedule makes sure the tube's timer fires no later than at. Caller holds mu.
func (t *Tube) schedule(at int64) {
	if at >= t.armedAt {
		return
	}
	t.armedAt = at
	d := time.Duration(at - t.e.mono())
	if t.timer == nil {
		t.timer = t.e.afterFunc(d, t.fire)
	} else {
		t.timer.Reset(d)
	}
}

// fire runs on a timer goroutine: it promotes due delayed jobs, returns
// jobs whose TTR ran out, ends an expired pause (and frees the tube if
// nothing else holds it), serves waiters and re-arms.
// It moves at most lockChunk jobs: when more are due (a million delayed
// jobs put with the same delay), the timer is re-armed for now, and the
// next chunk waits behind whoever was waiting for the lock.
func (t *Tube) fire() {
	const shard = 0
	var cl claims
	t.mu.Lock()
	now := t.e.mono()
	t.armedAt = never
	n := 0
	for j := t.delay.Top(); j != nil && j.deadline <= now && n < lockChunk; j = t.delay.Top() {
		t.remove(j, shard)
		t.insertReady(j, now, shard)
		n++
	}
	for j := t.ttr.Top(); j != nil && j.deadline <= now && n < lockChunk; j = t.ttr.Top() {
		t.remove(j, shard)
		j.owner.unlinkReserved(j)
		j.owner = nil
		j.timeouts++
		t.e.ctr.add(shard, cJobTimeouts, 1)
		t.observeTimeout()
		t.insertReady(j, now, shard)
		n++
	}
	ended := false
	if t.pauseUntil != 0 && now >= t.pauseUntil {
		t.pauseUntil, t.pauseDur = 0, 0
		ended = t.jobs == 0
	}
	t.serveWaiters(now, shard, &cl)
	next := int64(never)
	if j := t.delay.Top(); j != nil {
		next = j.deadline
	}
	if j := t.ttr.Top(); j != nil && j.deadline < next {
		next = j.deadline
	}
	if t.pauseUntil != 0 && t.pauseUntil < next {
		next = t.pauseUntil
	}
	if next != never {
		t.schedule(next)
	}
	t.mu.Unlock()
	cl.deliver(nil)
	if ended {
		// A tube a new leader made for a pause alone (RestorePauses)
		// goes with it, unless a client uses or watches it meanwhile.
		t.e.reg.maybeFree(t)
	}
}

// serveWaiters hands ready jobs to parked reservers, oldest waiter first.
// Caller holds mu; the claimed clients are told after mu is released.
func (t *Tube) serveWaiters(now int64, shard int, cl *claims) {
	if t.paused(now) {
		return
	}
	for t.ready.Len() > 0 {
		n := t.waiters.popFront()
		if n == nil {
			return
		}
		c := n.c
		if !c.claim(n.gen) {
			continue // its wait already ended through another tube
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			cl.add(c, cancelled)
			continue
		}
		j := t.ready.Top()
		t.remove(j, shard)
		t.reserveLocked(j, c, now, shard)
		c.wjob = j
		c.mu.Unlock()
		cl.add(c, woke)
	}
}

// reserveLocked gives j to c. Caller holds t.mu and c.mu.
func (t *Tube) reserveLocked(j *Job, c *Client, now int64, shard int) {
	if j.state == Ready {
		t.observeWait(j, now)
	}
	j.owner = c
	j.deadline = now + j.ttrNs()
	j.reserves++
	t.insert(j, Reserved, shard)
	c.linkReservedLocked(j)
}

// claims collects clients whose wait was claimed while a tube lock was
// held, so that the slow part (unlinking from other tubes, waking the loop)
// happens after it is released. Small inline storage: no allocation for
// the common case of a few waiters per event.
type claims struct {
	inline [4]claim
	n      int
	more   []claim
}

type claim struct {
	c      *Client
	result uint64
}

func (cl *claims) add(c *Client, result uint64) {
	if cl.n < len(cl.inline) {
		cl.inline[cl.n] = claim{c, result}
		cl.n++
		return
	}
	cl.more = append(cl.more, claim{c, result})
}

// deliver finishes every claimed wait and wakes its loop, except self's,
// whose caller answers synchronously. It reports whether self was claimed.
func (cl *claims) deliver(self *Client) (selfClaimed bool) {
	for i := 0; i < cl.n; i++ {
		if cl.inline[i].c.finish(cl.inline[i].result, self) {
			selfClaimed = true
		}
	}
	for _, k := range cl.more {
		if k.c.finish(k.result, self) {
			selfClaimed = true
		}
	}
	return selfClaimed
}
