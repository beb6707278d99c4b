package engine

import (
	"sync"
	"sync/atomic"
	"time"
)

// Waker is how the engine tells a connection's event loop that its parked
// reserve has an answer. Wake is called from any goroutine, never with an
// engine lock held, and must not block; the loop then calls TakeWakeup on
// its own goroutine.
type Waker interface{ Wake(c *Client) }

// Outcome is what a reserve produced.
type Outcome uint8

const (
	Parked       Outcome = iota // no answer yet: the Waker will be called
	GotJob                      // RESERVED
	TimedOut                    // TIMED_OUT
	DeadlineSoon                // DEADLINE_SOON
)

// Client is the engine's view of one connection. The fields in the first
// group belong to the connection's event loop; mu guards the reserved list,
// which timers and other loops also change.
type Client struct {
	e     *Engine
	waker Waker

	use *Tube
	// The watched tubes, never fewer than one (watched): in watchOne while
	// there is one, else all of them in *watchMany. Two words, where a
	// slice and its one-element array took four: every connection has them.
	watchOne  [1]*Tube
	watchMany *[]*Tube

	mu        sync.Mutex
	reserved  *Job // head of the list of jobs reserved by this client
	nReserved int32
	closed    bool
	// The loop's own fields, packed beside closed (separate bytes, so no
	// sharing) to keep a Client at 88 bytes (TestClientFitsIn88Bytes).
	roles uint8  // producer, worker: counted in current-producers/-workers; internal
	shard uint16 // the loop's counter shard

	// The rest exists only for connections that need it, so that an idle
	// connection costs as little as possible (hundreds of thousands of
	// them are normal): waitState from the first reserve that has to wait,
	// journalState when there is a binlog.
	*waitState
	*journalState
}

// waitState is a client's parked-reserve machinery. It is allocated by the
// owner's loop before the client is first queued on a tube, so any
// goroutine that finds it through a queue sees it whole.
type waitState struct {
	nodes     []waitNode
	wstate    atomic.Uint64
	wgen      uint64
	wjob      *Job         // set by whoever claimed the wait
	timeoutAt atomic.Int64 // monotonic ns, or never
	marginAt  atomic.Int64 // monotonic ns: soonest TTR deadline minus 1 s
	timer     timer
}

// Margin is the safety margin before a TTR deadline in which a reserve is
// answered DEADLINE_SOON.
const Margin = int64(time.Second)

// NewClient registers a connection. shard is the caller's event loop index
// (1-based; 0 is the timers' shard).
func (e *Engine) NewClient(shard int, w Waker) *Client {
	c := new(Client)
	e.InitClient(c, shard, w)
	return c
}

// InitClient registers a connection whose Client lives inside the caller's
// own per-connection state (one allocation per connection instead of two:
// idle connections are counted in hundreds of thousands). c must be zero
// and must not move or be copied afterwards.
func (e *Engine) InitClient(c *Client, shard int, w Waker) {
	e.Accepted(shard)
	e.InitAccepted(c, shard, w)
}

// Accepted counts a connection in current-connections and
// total-connections before its Client exists: an acceptor calls it as the
// kernel hands the connection over, so that `stats` on a later connection
// counts it however long it takes to reach its event loop (as in C, which
// accepts and serves on one thread). Any goroutine may call it (shard 0,
// the timers', for one that is no loop's); InitAccepted then registers the
// connection without counting it again, or Unaccepted takes it back.
func (e *Engine) Accepted(shard int) {
	e.ctr.add(shard, cConnections, 1)
	e.ctr.add(shard, cTotalConnections, 1)
}

// Unaccepted takes a connection counted by Accepted off
// current-connections: it was closed before it was registered.
func (e *Engine) Unaccepted(shard int) { e.ctr.add(shard, cConnections, -1) }

// InitAccepted is InitClient for a connection counted by Accepted.
func (e *Engine) InitAccepted(c *Client, shard int, w Waker) {
	c.e, c.shard, c.waker = e, uint16(shard), w
	if e.jl != nil {
		c.journalState = &journalState{}
		c.wakeAt.Store(noWake)
	}
	c.use = e.reg.acquire(e, shard, e.defaultTube.nameBytes, true)
	c.watchOne[0] = e.reg.acquire(e, shard, e.defaultTube.nameBytes, false)
}

// Client.roles bits.
const (
	producer uint8 = 1 << iota
	worker
	internal // the loop's mark, which the engine does not read (SetInternal)
)

// Used is the tube put and peek-* work on.
func (c *Client) Used() *Tube { return c.use }

// Watched lists the watched tubes in upstream's order.
func (c *Client) Watched() []*Tube {
	if c.watchMany != nil {
		return *c.watchMany
	}
	return c.watchOne[:]
}

// setWatched stores the watch list ws (at least one tube).
func (c *Client) setWatched(ws []*Tube) {
	if len(ws) == 1 {
		c.watchOne[0], c.watchMany = ws[0], nil
		return
	}
	if c.watchMany == nil {
		c.watchMany = new([]*Tube)
	}
	*c.watchMany = ws
}

// MarkProducer counts the connection in current-producers from now on.
func (c *Client) MarkProducer() {
	if c.roles&producer == 0 {
		c.roles |= producer
		c.e.ctr.add(int(c.shard), cProducers, 1)
	}
}

// MarkWorker counts the connection in current-workers from now on.
func (c *Client) MarkWorker() {
	if c.roles&worker == 0 {
		c.roles |= worker
		c.e.ctr.add(int(c.shard), cWorkers, 1)
	}
}

// SetInternal marks the connection as internal (a router's, which may use
// beanpole's own commands); Internal reports the mark. It is the loop's,
// kept here because a Client has room for it and the loop's conn has none.
func (c *Client) SetInternal()   { c.roles |= internal }
func (c *Client) Internal() bool { return c.roles&internal != 0 }

// Use switches the used tube. ok is false, and nothing changed, when the
// tube is new and does not fit under the memory ceiling (OUT_OF_MEMORY).
func (c *Client) Use(name []byte) (ok bool) {
	if string(c.use.nameBytes) == string(name) {
		return true
	}
	t := c.e.reg.acquire(c.e, int(c.shard), name, true)
	if t == nil {
		return false
	}
	old := c.use
	c.use = t
	c.e.reg.release(old, true)
	return true
}

// Watch adds a tube to the watch list and returns the list's length. ok is
// false, and nothing changed, when the tube is new and does not fit under
// the memory ceiling (OUT_OF_MEMORY).
func (c *Client) Watch(name []byte) (n int, ok bool) {
	ws := c.Watched()
	for _, t := range ws {
		if string(t.nameBytes) == string(name) {
			return len(ws), true
		}
	}
	t := c.e.reg.acquire(c.e, int(c.shard), name, false)
	if t == nil {
		return len(ws), false
	}
	// A full slice: appending never writes into watchOne.
	ws = append(ws[:len(ws):len(ws)], t)
	c.setWatched(ws)
	return len(ws), true
}

// Ignore drops a tube from the watch list. ok is false when it is the only
// watched tube (NOT_IGNORED); ignoring an unwatched tube is not an error.
func (c *Client) Ignore(name []byte) (n int, ok bool) {
	ws := c.Watched()
	for i, t := range ws {
		if string(t.nameBytes) != string(name) {
			continue
		}
		if len(ws) < 2 {
			return 1, false
		}
		// Swap-remove, as upstream's ms_remove does: clients see it in
		// list-tubes-watched.
		last := len(ws) - 1
		ws[i] = ws[last]
		ws[last] = nil
		ws = ws[:last]
		c.setWatched(ws)
		c.e.reg.release(t, false)
		break
	}
	return len(ws), true
}

func (c *Client) linkReservedLocked(j *Job) {
	j.prev = nil
	j.next = c.reserved
	if c.reserved != nil {
		c.reserved.prev = j
	}
	c.reserved = j
	j.inList = true
	c.nReserved++
}

// unlinkReserved takes j out of c's reserved list. Callers hold j's tube lock.
func (c *Client) unlinkReserved(j *Job) {
	c.mu.Lock()
	if j.inList {
		j.unlinkFrom(&c.reserved, nil)
		j.inList = false
		c.nReserved--
	}
	c.mu.Unlock()
}

// soonestDeadline is the earliest TTR deadline of the jobs c holds.
func (c *Client) soonestDeadline() (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nReserved == 0 {
		return 0, false
	}
	soonest := int64(never)
	for j := c.reserved; j != nil; j = j.next {
		if j.deadline < soonest {
			soonest = j.deadline
		}
	}
	return soonest, true
}

// Close is the connection going away: a parked reserve is cancelled and
// every job it holds goes back to ready at once, as upstream does.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	held := make([]*Job, 0, c.nReserved)
	for j := c.reserved; j != nil; j = j.next {
		held = append(held, j)
	}
	c.mu.Unlock()

	if c.waitState != nil { // else it never waited: nothing is queued
		if st := c.wstate.Load(); st&stateMask == waiting && c.claim(st>>stateBits) {
			c.finish(cancelled, c)
		} else {
			// Another goroutine claimed the wait (a put on another loop,
			// say, which found us closed): its finish unlinks our nodes
			// only once it has released its tube lock. Unlink them here
			// too (it is idempotent), so that none of a closed client's
			// nodes is queued when Close returns.
			c.unlinkNodes()
		}
	}
	now := c.e.mono()
	for _, j := range held {
		t := j.Tube
		var cl claims
		t.mu.Lock()
		if j.owner == c && j.state == Reserved {
			t.remove(j, int(c.shard))
			c.unlinkReserved(j)
			j.owner = nil
			t.insertReady(j, now, int(c.shard))
			t.serveWaiters(now, int(c.shard), &cl)
		}
		t.mu.Unlock()
		cl.deliver(nil)
	}
	if c.waitState != nil && c.timer != nil {
		c.timer.Stop()
	}
	for _, t := range c.Watched() {
		c.e.reg.release(t, false)
	}
	c.e.reg.release(c.use, true)
	c.watchOne[0], c.watchMany, c.use = nil, nil, nil
	e := c.e
	e.ctr.add(int(c.shard), cConnections, -1)
	if c.roles&producer != 0 {
		e.ctr.add(int(c.shard), cProducers, -1)
	}
	if c.roles&worker != 0 {
		e.ctr.add(int(c.shard), cWorkers, -1)
	}
}
