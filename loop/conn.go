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

	// The put being read.
	put  putHeader
	body []byte
	skip uint64
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

// Run is the loop-side half of Wake.
func (c *conn) Run(context.Context) error {
	if c.closed || !c.parked {
		return nil
	}
	j, outcome := c.cl.TakeWakeup()
	c.parked = false
	c.s.reserveReply(c, j, outcome)
	if c.s.process(c) == gnet.Close && !c.closed {
		_ = c.gc.Close()
	}
	return nil
}
