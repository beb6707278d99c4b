package loop

import (
	"context"

	"github.com/beanpole/beanpole/codec"
	"github.com/beanpole/beanpole/engine"
	"github.com/panjf2000/gnet/v2"
)

// conn is one client connection. Every field is owned by the connection's
// event loop.
type conn struct {
	gc gnet.Conn
	ls *loopState
	// cl is the engine's side of the connection, kept inside it: one
	// allocation per connection, not two (engine.InitClient).
	cl engine.Client

	parked    bool // a reserve is waiting: input after it stays buffered
	throttled bool // too much unsent output: input waits
	closed    bool // OnClose ran: never touch gc again
	fenced    bool // Fence refused a write (fenceWrites): nothing more is sent
	// awaiting: the next command reads or changes shared state while
	// the connection's own puts are not durable yet, so it waits for them
	// (awaitFor), or the connection holds as many replies as it may
	// (Server.heldFull); input after it stays buffered.
	awaiting bool
	// closing: every reply is written or queued in gnet; the connection
	// closes once gnet has sent them all (or the grace time runs out).
	closing bool
	// readPaused: gnet does not read the socket (see setReading).
	readPaused bool
	// holdsInput: input c buffered while it waits is counted against its
	// loop's budget (loopState.heldIn; checkInputCap).
	holdsInput bool

	// What only some connections need, allocated at first use: see
	// connExtra. Idle connections and workers without -b never carry it.
	*connExtra
}

// connExtra is a connection's state for reading puts (producers) and for
// replies held for the binlog (-b): one pointer in conn, so that an idle
// connection fits its size class (TestConnFitsItsSizeClass).
type connExtra struct {
	putState
	held heldReplies
	// outCharged is c's unsent output as last charged against the memory
	// ceiling (chargeOutput).
	outCharged int64
	// awaitSeq: while c.awaiting, the seq of c's records the next command
	// waits for (awaitFor); 0 when it waits for room for held replies.
	awaitSeq uint64
}

// holdsOutput reports whether c's unsent output is charged against the
// memory ceiling.
func (c *conn) holdsOutput() bool { return c.connExtra != nil && c.outCharged != 0 }

// extra returns c's connExtra, allocating it at first use.
func (c *conn) extra() *connExtra {
	if c.connExtra == nil {
		c.connExtra = &connExtra{}
	}
	return c.connExtra
}

// heldPending reports whether replies wait for the binlog.
func (c *conn) heldPending() bool { return c.connExtra != nil && len(c.held.entries) > 0 }

// hungUp reports whether the peer shut down its side (EOF, or a FIN seen
// while reads are paused; gnet keeps both flags). What it sent before is
// still answered, then we close.
func (c *conn) hungUp() bool { return c.gc.PeerClosed() || c.gc.PeerHangup() }

// setReading is beanpole's flow control, the one C gets for free by not
// reading a client it cannot serve: while c's input cannot be processed
// (a reserve waits, a command awaits the binlog, unsent output is past the
// high-water mark or the memory ceiling, or it is closing) gnet stops
// reading its socket, the kernel's buffers fill and TCP's window holds the
// client back, instead of the input piling up in our memory. Reading
// resumes (and gnet replays what it had buffered) as soon as c can go on.
// Output that merely waits to be sent does not pause c: gnet reports its
// drain by an OnTraffic either way, which gives its charge back
// (chargeOutput), so a large reply to a client that reads costs no
// epoll_ctl calls beyond gnet's own.
//
// A connection that yielded its loop with commands still buffered is not
// read either until it has caught up, so that its buffer does not grow
// with every read while it is served a slice at a time.
//
// A connection that waits but has sent nothing more (a worker parked in
// reserve, the common case) is left alone: pausing and resuming it would
// cost two epoll_ctl calls per wait. It is paused at its first read that
// cannot be served, so gnet still buffers at most one read of it.
//
// An internal connection (ServeInternal) is read while its reserve waits,
// so that the router's cancel line is seen (cancelParked); what it sends
// meanwhile is bounded by checkInputCap, as a waiting connection's.
func (c *conn) setReading() {
	pause := c.closing || (c.parked && !c.cl.Internal() || c.awaiting || c.throttled || c.ls.yielded) &&
		c.gc.InboundBuffered() > 0
	if pause == c.readPaused || c.closed {
		return
	}
	var err error
	if pause {
		err = c.gc.PauseRead()
	} else {
		err = c.gc.ResumeRead()
	}
	if err == nil {
		c.readPaused = pause
	}
}

// heldReplies are replies that wait for the binlog, in order. Each entry
// is one command's reply (or a run of replies with no records of their
// own) and may be sent once the client's records up to its seq `to` are
// acknowledged; if one of its own records (from, to] failed, it is
// answered INTERNAL_ERROR instead. Their header bytes are copied into one
// buffer that is reused (no allocation per held reply); bodies are
// referenced.
type heldReplies struct {
	hdr     []byte
	parts   []heldPart
	entries []heldEntry
	// cost is what they hold: header and body bytes, and heldEntryCost
	// per entry. It is capped (heldFull) and charged against the memory
	// ceiling with the unsent output (chargeOutput).
	cost int64
}

// heldPart is a run of header bytes, hdr[off:off+n], or a body.
type heldPart struct {
	body   []byte
	off, n int
}

type heldEntry struct {
	end      int // parts[previous end:end]
	from, to uint64
}

// heldEntryCost is what an entry costs besides its bytes: the entry and
// its parts.
const heldEntryCost = 64

// header appends header bytes b, extending the last part if it is a
// header run too.
func (h *heldReplies) header(b []byte) {
	if len(b) == 0 {
		return
	}
	if k := len(h.parts) - 1; k >= 0 && h.parts[k].body == nil && h.parts[k].off+h.parts[k].n == len(h.hdr) &&
		(len(h.entries) == 0 || h.entries[len(h.entries)-1].end <= k) {
		h.parts[k].n += len(b)
	} else {
		h.parts = append(h.parts, heldPart{off: len(h.hdr), n: len(b)})
	}
	h.hdr = append(h.hdr, b...)
	h.cost += int64(len(b))
}

// bytes is part p's bytes.
func (h *heldReplies) bytes(p heldPart) []byte {
	if p.body != nil {
		return p.body
	}
	return h.hdr[p.off : p.off+p.n]
}

type putState struct {
	// dec frames c's input while it is inside a command (a put body, an
	// over-long line being discarded); see conn.decoder.
	dec  codec.Decoder
	put  putHeader
	body []byte
	// bodyCharged is what body is charged against the memory ceiling
	// (growBody); a body cloned whole in one pass is not.
	bodyCharged int64
	// bigBodies: c's last put body was at least directBody (bodySize).
	bigBodies bool
}

// decoder is c's input decoder. A connection between commands needs none
// of its own, so one without connExtra (idle, or a worker without -b)
// borrows its loop's, which is always between commands when a pass
// starts; keepDecoder moves it into c once a line leaves it inside one.
func (c *conn) decoder() *codec.Decoder {
	d := &c.ls.dec
	if c.connExtra != nil {
		d = &c.dec
	}
	d.MaxJobSize = c.ls.s.cfg.MaxJobSize
	return d
}

// keepDecoder gives c the loop's decoder d if it is no longer between
// commands, returning the decoder c goes on with.
func (c *conn) keepDecoder(d *codec.Decoder) *codec.Decoder {
	if d != &c.ls.dec || d.Idle() {
		return d
	}
	x := c.extra()
	x.dec = *d
	d.Reset()
	return &x.dec
}

// hold moves the replies batched since p (one command's, which appended
// the client's records (from, to]) to the end of c.held.
func (c *conn) hold(p outPos, from, to uint64) {
	h := &c.extra().held
	c.ls.out.takeSince(p, h)
	h.entries = append(h.entries, heldEntry{end: len(h.parts), from: from, to: to})
	h.cost += heldEntryCost
}

// sendHeld writes, in order, every held reply whose records are
// acknowledged.
func (c *conn) sendHeld() {
	if c.ls.s.fenceWrites(c) {
		return
	}
	h := &c.held
	_, acked, failedAt := c.cl.Durability()
	w := c.ls.iov[:0]
	k, start := 0, 0
	for ; k < len(h.entries) && h.entries[k].to <= acked; k++ {
		e := h.entries[k]
		if failedAt != 0 && e.from < e.to && failedAt <= e.to {
			// Never acknowledge what the log did not keep.
			w = append(w, codec.RepInternalError)
		} else {
			for _, p := range h.parts[start:e.end] {
				w = append(w, h.bytes(p))
			}
		}
		start = e.end
	}
	if k == 0 {
		return
	}
	c.writeBufs(w)
	clear(w)
	c.ls.iov = w[:0]
	// Drop what was sent: the header bytes of the parts left move to the
	// front of hdr.
	cut := len(h.hdr)
	for _, p := range h.parts[:start] {
		h.cost -= int64(p.n + len(p.body))
	}
	for _, p := range h.parts[start:] {
		if p.body == nil {
			cut = p.off
			break
		}
	}
	h.hdr = h.hdr[:copy(h.hdr, h.hdr[cut:])]
	n := copy(h.parts, h.parts[start:])
	clear(h.parts[n:]) // let the bodies go
	h.parts = h.parts[:n]
	for i := range h.parts {
		if h.parts[i].body == nil {
			h.parts[i].off -= cut
		}
	}
	m := copy(h.entries, h.entries[k:])
	h.entries = h.entries[:m]
	h.cost -= int64(k) * heldEntryCost
	for i := range h.entries {
		h.entries[i].end -= start
	}
	if m == 0 && cap(h.hdr) > 64<<10 {
		h.hdr = nil // a burst's buffer is not kept for good
	}
}

// ackNeed is the seq of c's records whose acknowledgement would let it go
// on: the oldest held reply's, else, while a command awaits, the one it
// waits for (awaitFor). 0 means it waits for nothing from the log (a
// command that waited for room for held replies has it: they were sent).
func (c *conn) ackNeed() uint64 {
	if c.heldPending() {
		return c.held.entries[0].to
	}
	if c.awaiting {
		return c.awaitSeq
	}
	return 0
}

// writeBufs writes bufs (writeChunks).
func (c *conn) writeBufs(bufs [][]byte) {
	if !c.closed {
		c.ls.bytesOut.Add(uint64(c.ls.writeChunks(c.gc, bufs)))
	}
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
// binlog records became durable.
func (c *conn) Run(context.Context) error {
	if c.closed {
		return nil
	}
	if c.ls.s.process(c) == gnet.Close && !c.closed {
		_ = c.gc.Close()
	}
	return nil
}
