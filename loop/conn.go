package loop

import (
	"context"

	"github.com/beanpole/beanpole/engine"
	"github.com/panjf2000/gnet/v2"
)

// phase is where a connection's input parser is.
type phase uint8

const (
	phaseCommand     phase = iota // expecting a command line
	phaseBody                     // reading a put body
	phaseSkip                     // discarding an oversized put body (JOB_TOO_BIG)
	phaseDiscardLine              // discarding an over-long line up to its CRLF
)

// conn is one client connection. Every field is owned by the connection's
// event loop.
type conn struct {
	s     *Server
	gc    gnet.Conn
	ls    *loopState
	cl    *engine.Client
	phase phase

	parked    bool // a reserve is waiting: input after it stays buffered
	throttled bool // too much unsent output: input waits
	closed    bool // OnClose ran: never touch gc again
	// holding: replies wait in held for their binlog records to be
	// durable; input waits too, so replies stay in order.
	holding bool

	held *heldReplies // allocated at the first hold (only with -b)

	// The put being read; allocated at the connection's first put, so that
	// connections that never put (idle ones, workers) do not carry it.
	*putState
}

type heldReplies struct{ bufs [][]byte }

type putState struct {
	put  putHeader
	body []byte
	skip uint64 // body bytes of a too-big put still to drop
}

// hold moves the loop's reply batch into c.held: the headers are copied
// (the batch is reused), job bodies are referenced (they are immutable).
func (c *conn) hold() {
	if c.held == nil {
		c.held = &heldReplies{}
	}
	h := c.held
	o := &c.ls.out
	for i, b := range o.iov {
		if i%2 == 0 { // header chunks alternate with bodies
			b = append([]byte(nil), b...)
		}
		h.bufs = append(h.bufs, b)
	}
	if o.mark < len(o.buf) {
		h.bufs = append(h.bufs, append([]byte(nil), o.buf[o.mark:]...))
	}
	c.holding = true
	o.reset()
}

func (c *conn) writeHeld() {
	h := c.held
	for sent := 0; sent < len(h.bufs) && !c.closed; {
		n := min(len(h.bufs)-sent, maxIOV)
		_, _ = c.gc.Writev(h.bufs[sent : sent+n])
		sent += n
	}
	clear(h.bufs) // let the bodies go
	h.bufs = h.bufs[:0]
	c.holding = false
}

type putHeader struct {
	id                uint64
	pri               uint32
	delay, ttr, bytes uint32
}

// Wake is the engine telling us a parked reserve has its answer. It runs on
// any goroutine; the answer is written on the connection's own loop, which
// then resumes the commands pipelined after the reserve, so replies can
// never be reordered.
func (c *conn) Wake(*engine.Client) {
	_ = c.gc.EventLoop().Execute(context.Background(), c)
}

// Run is the loop-side half of Wake: a parked reserve has its answer, or
// held replies became durable.
func (c *conn) Run(context.Context) error {
	if c.closed {
		return nil
	}
	if c.holding {
		if !c.cl.ReleaseHold() {
			return nil
		}
		c.writeHeld()
		if c.closed {
			return nil
		}
	}
	if c.parked {
		j, outcome := c.cl.TakeWakeup()
		if outcome == engine.Parked {
			return nil
		}
		c.parked = false
		c.s.reserveReply(c, j, outcome)
	}
	if c.s.process(c) == gnet.Close && !c.closed {
		_ = c.gc.Close()
	}
	return nil
}
