package loop

import (
	"strings"
	"time"
	"unsafe"

	"github.com/beanpole/beanpole/codec"
	"github.com/beanpole/beanpole/engine"
	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
)

// directBody is how much of a put body must have arrived before the rest is
// read from the socket straight into it: below that, gnet's one read per
// wake-up is as cheap. It is a TLS record's plaintext less the longest
// line, so that a TLS put whose first record holds its line and the start
// of its body (the client wrote them at once) has the body given its final
// size there, not that record's size first and then a copy at the next.
const directBody = tlsRecord - codec.MaxLine

// headRead is what each read of a connection whose puts carry large bodies
// asks for (bodySize): a command line or a few and the first bytes of the
// next body, which is then read from the socket straight into the job
// (readBodyDirect). A read of gnet's whole buffer (256 KiB) would bring
// most of that body with it, to be copied out of gnet's buffer again.
const headRead = 1 << 10

// process runs c's pass: every complete command buffered for c, in order,
// with their replies sent in one write. It stops early at a reserve that has
// to wait (the rest stays in gnet's buffer until the reserve is answered, or
// cancelled: cancelParked),
// at a command that must wait for c's binlog records (see awaitFor) or
// for room for its held replies (heldFull), when
// output backs up, at quit, or at the end of its time slice (passSlice). It
// is also how a wake-up resumes c.
func (s *Server) process(c *conn) gnet.Action {
	if s.Fence != nil && !s.Fence() {
		if s.FenceMayReturn != nil && s.FenceMayReturn() {
			return s.awaitLease(c)
		}
		return gnet.Close // see Server.Fence
	}
	out := &c.ls.out
	out.claim(c)
	c.ls.now = 0
	action := s.pass(c)
	// Still waiting for the log? Ask it for a wake-up, the one place that
	// does; if the records were acknowledged meanwhile, go round again.
	for !c.closed && !c.fenced && action == gnet.None {
		need := c.ackNeed()
		if need == 0 && !c.awaiting || need != 0 && c.cl.WakeWhenAcked(need) {
			break
		}
		action = s.pass(c)
	}
	if c.closed || c.fenced {
		out.discard() // gnet closed it under a write, or the fence: nothing can be sent
		if !c.closed {
			action = gnet.Close
		}
	} else if action == gnet.None {
		s.chargeOutput(c)
		if t, ok := c.gc.(*tlsConn); ok && !c.waits() && !c.ls.yielded && t.Conn.InboundBuffered() > 0 {
			// A record still arriving that crypto/tls was not handed
			// yet (recordPipe) is input held, as a waiting connection's.
			// A pass that yielded leaves whole records behind too: those
			// are input still to run, as a plaintext connection's is.
			action = s.checkInputCap(c)
		} else if c.holdsInput && !c.waits() {
			s.holdInput(c, 0)
		}
		c.setReading()
		if c.ls.yielded {
			_ = c.gc.Wake(nil) // after the loop's other ready connections
		}
	}
	out.release(c)
	return action
}

// passSlice bounds the time one connection's pass may keep its loop from
// the others: past it, with commands still buffered, the pass ends and the
// connection yields (loopState.yielded) until the loop has served the
// events that came meanwhile. The clock is read only once a pass has run
// sliceFrom commands (short passes never read it), then again after about
// an eighth of the slice at the rate measured so far (every command when
// they are slow, every maxSliceStep when they are fast).
const (
	passSlice    = 500 * time.Microsecond
	sliceFrom    = 8
	maxSliceStep = 64
)

func (s *Server) pass(c *conn) gnet.Action {
	gc := c.gc
	c.ls.yielded = false
	if c.closing {
		return s.finishClosing(c)
	}
	if c.heldPending() {
		c.sendHeld()
		if c.closed {
			return gnet.Close
		}
	}
	if c.parked {
		var in []byte
		if c.cl.Internal() {
			in, _ = gc.Peek(-1)
			if t, ok := gc.(*tlsConn); ok && len(in) < len(codec.CancelWaitLine) && t.more() {
				// A TLS connection's input is decrypted a record at a
				// time, and a parked one's only here.
				t.fill()
				in, _ = gc.Peek(-1)
			}
		}
		s.consume(c, s.cancelParked(c, in))
	}
	if c.parked {
		j, outcome := c.cl.TakeWakeup()
		if outcome == engine.Parked {
			// Nothing runs until the reserve is answered; that path
			// re-checks the output.
			c.throttled = false
			return s.checkInputCap(c)
		}
		c.parked = false
		p, from := c.ls.out.pos(), c.appended()
		s.reserveReply(c, j, outcome)
		s.settle(c, p, from)
	}
	if c.awaiting {
		if _, acked, _ := c.cl.Durability(); acked < c.awaitSeq || s.heldFull(c) {
			s.send(c, 0)
			return s.checkInputCap(c) // process asks the log to wake us
		}
		c.awaiting = false
	}
	if c.throttled {
		// Its output drains while it is not read; gnet's "output
		// drained" event brings it back here.
		if gc.OutboundBuffered() > 0 {
			s.send(c, 0)
			return s.checkInputCap(c)
		}
		c.throttled = false
	}
	out := &c.ls.out
	buf, _ := gc.Peek(-1)
	off := 0
	action := gnet.None
	ran, check, checkFrom := 0, sliceFrom, 0
	var sliceStart time.Time
	d := c.decoder()
	var f codec.Frame
	out.room = s.cfg.HighWater - gc.OutboundBuffered()
	for {
		if c.parked {
			// A router may have sent its cancel line with the reserve.
			if off += s.cancelParked(c, buf[off:]); c.parked {
				break
			}
		}
		p, from := out.pos(), c.appended()
		d.Next(buf[off:], &f)
		d = c.keepDecoder(d)
		switch f.Event {
		case codec.More:
			off += f.N
			if t, ok := gc.(*tlsConn); ok && t.more() {
				// A TLS connection's input is decrypted a record at a time.
				s.consume(c, off)
				t.fill()
				buf, _ = gc.Peek(-1)
				off = 0
				continue
			}
			goto done // an incomplete line, or all there is of a body
		case codec.Line:
			f.Status = hideInternal(c, f.Status, f.Cmd.Op)
			if seq := awaitFor(c, f.Status, f.Cmd.Op); seq != 0 || s.heldFull(c) {
				c.awaiting = true
				c.extra().awaitSeq = seq
				// The line stays buffered until the log wakes us, and is
				// read again then: the decoder forgets it (a put's line
				// has it expect the body).
				d.Reset()
				goto done
			}
			off += f.N
			if c.connExtra != nil && c.bigBodies && (f.Cmd.Op != codec.OpPut || f.Status != codec.OK) && off < len(buf) {
				// Small commands pipelined behind large puts: whole
				// reads again. One sent on its own (a producer's
				// reserve or delete between its puts) fits a small
				// read, and its next body is read into the job.
				c.setBigBodies(false)
			}
			if act := s.dispatch(c, f.Status, &f.Cmd); act != gnet.None {
				s.settle(c, p, from)
				action = act
				goto done
			}
		case codec.BodyPart:
			off += f.N
			if c.readBody(f.Body) && off == len(buf) && cap(c.body) >= directBody {
				c.readBodyDirect(d)
			}
		case codec.Body, codec.ExpectedCRLF:
			off += f.N
			c.bodySize()
			if c.readBody(f.Body) {
				c.releaseBody() // the job is charged for it
				if f.Event == codec.Body {
					s.finishPut(c)
				} else {
					c.body = nil
					out.buf = append(out.buf, codec.RepExpectedCRLF...)
				}
			}
		case codec.JobTooBig:
			off += f.N
			out.buf = append(out.buf, codec.RepJobTooBig...)
		case codec.Dropped: // refuseBody
			off += f.N
			out.buf = append(out.buf, codec.RepOutOfMemory...)
		case codec.LineTooLong:
			// Too long to be a command: discarded through its CRLF and
			// answered with one BAD_FORMAT, keeping the connection.
			off += f.N
			out.buf = append(out.buf, codec.RepBadFormat...)
		}
		s.settle(c, p, from)
		// Near the memory ceiling each reply is written on its own, so
		// that a connection whose client does not read holds at most one
		// of them past it before it is throttled.
		if out.full() || out.tight && !out.empty() {
			s.send(c, off)
			if c.closed || c.fenced {
				return gnet.Close
			}
			buf, _ = gc.Peek(-1)
			off = 0
			if !s.chargeOutput(c) || gc.OutboundBuffered() > s.cfg.HighWater {
				break
			}
			out.room = s.cfg.HighWater - gc.OutboundBuffered()
		}
		if ran++; ran >= check && off < len(buf) {
			if sliceStart.IsZero() {
				sliceStart, checkFrom = time.Now(), ran
				check = ran + 1
			} else if d := time.Since(sliceStart); d < passSlice {
				step := int64(ran-checkFrom) * int64(passSlice/8) / int64(d+1)
				check = ran + int(min(max(step, 1), maxSliceStep))
			} else {
				c.ls.yielded = true
				break
			}
		}
	}
done:
	s.send(c, off)
	if c.heldPending() {
		c.sendHeld()
	}
	if c.closed || c.fenced {
		return gnet.Close
	}
	if action == gnet.Close { // quit: what came before it is answered
		return s.startClosing(c)
	}
	if !s.chargeOutput(c) || gc.OutboundBuffered() > s.cfg.HighWater {
		// Its replies back up: it is not read until they are sent, and
		// then gnet's "output drained" event resumes it. A reply is never
		// cut short, however large: a client that reads gets it all.
		c.throttled = true
	}
	if c.awaiting || c.heldPending() || c.parked {
		return s.checkInputCap(c)
	}
	if c.gc.PeerClosed() && !c.throttled && !c.ls.yielded {
		// Every complete command the peer sent is answered; an incomplete
		// one never will be.
		return s.startClosing(c)
	}
	return gnet.None
}

// cancelParked answers c's parked reserve TIMED_OUT if its wait is still
// open and is to end: its peer hung up (as upstream does: the commands
// it sent after the reserve still run), or c is internal and in, its
// input after the reserve, begins with codec.CancelWaitLine (the router
// has its answer from another group). It returns the length of the
// cancel line it took, which has no reply of its own. A wait that has its
// answer already is left to be answered as usual; the cancel line is then
// a command of its own (NOT_WAITING).
func (s *Server) cancelParked(c *conn, in []byte) int {
	n := len(codec.CancelWaitLine)
	if !c.cl.Internal() || len(in) < n || string(in[:n]) != codec.CancelWaitLine {
		n = 0
	}
	if n == 0 && !c.hungUp() || !c.cl.CancelWait() {
		return 0
	}
	c.parked = false
	p, from := c.ls.out.pos(), c.appended()
	c.ls.out.buf = append(c.ls.out.buf, codec.RepTimedOut...)
	s.settle(c, p, from) // behind the replies held for the log
	return n
}

// closeGrace is how long a closing connection's replies may take to drain
// to a peer that reads slowly or not at all.
const closeGrace = 30 * time.Second

// startClosing stops reading c and closes it once its replies are sent.
func (s *Server) startClosing(c *conn) gnet.Action {
	c.closing = true
	c.setReading()
	if c.gc.OutboundBuffered() == 0 {
		return gnet.Close
	}
	c.throttled = false
	s.throttled.addClosing(c, time.Now().Add(closeGrace))
	return gnet.None
}

// finishClosing closes c once gnet has written everything (gnet's own
// close would send only what the socket takes at once) or the grace time
// is over. gnet's "output drained" event and the sweeper bring us here.
func (s *Server) finishClosing(c *conn) gnet.Action {
	if c.gc.OutboundBuffered() == 0 || s.throttled.closeDue(c, time.Now()) {
		return gnet.Close
	}
	return gnet.None
}

// send discards the consumed input and writes the batched replies (those
// that wait for the binlog are in c.held, not in the batch).
func (s *Server) send(c *conn, consumed int) {
	s.consume(c, consumed)
	if s.fenceWrites(c) {
		c.ls.out.discard()
		return
	}
	if n := c.ls.out.flush(c.ls, c.gc); n > 0 {
		c.ls.bytesOut.Add(uint64(n))
	}
}

// leaseRetry is how soon a pass that Fence refused while the lead may
// return is tried again: a fraction of a lease round.
const leaseRetry = 10 * time.Millisecond

// awaitLease leaves c as it is, its input unread but bounded as a waiting
// connection's, and has its pass tried again after leaseRetry (see
// Server.FenceMayReturn).
func (s *Server) awaitLease(c *conn) gnet.Action {
	gc := c.gc
	time.AfterFunc(leaseRetry, func() { _ = gc.Wake(nil) })
	return s.checkInputCap(c)
}

// fenceWrites asks Fence again before replies are written: a pass can be
// paused between the check at its start and its writes (SIGSTOP, a
// starved process) for longer than the lease, and a reply it decided
// before the pause, a reservation above all, may meanwhile have been
// handed out by another leader too. Once refused, c writes nothing more
// and its pass closes it.
func (s *Server) fenceWrites(c *conn) bool {
	if !c.fenced && s.Fence != nil && !s.Fence() {
		c.fenced = true
	}
	return c.fenced
}

// consume discards the input c's commands consumed.
func (s *Server) consume(c *conn, n int) {
	if n > 0 { // never Discard(0): it means "everything" to gnet
		_, _ = c.gc.Discard(n)
		c.ls.bytesIn.Add(uint64(n))
	}
}

// appended is how many binlog records c's commands have appended so far.
func (c *conn) appended() uint64 {
	n, _, _ := c.cl.Durability()
	return n
}

// settle runs after each command (p and from taken before it): its reply
// stays in the batch, to be sent with this pass's write, unless it must
// wait for the binlog, because the command appended records that are not
// durable yet or earlier replies are held (replies never overtake each
// other).
//
// A command whose record failed is held too, even if its ack came before
// settle looked: sendHeld is the one place that turns a failed record's
// reply into INTERNAL_ERROR.
func (s *Server) settle(c *conn, p outPos, from uint64) {
	to, acked, failedAt := c.cl.Durability()
	if to > acked || c.heldPending() || failedAt != 0 && from < to && failedAt <= to {
		c.hold(p, from, to)
	}
}

// awaitFor is the ordering rule that makes -b (and the cluster) safe to
// pipeline: it is the seq of c's records that must be acknowledged before
// the command on a line may run, or 0 if it may run now.
//
// A connection's commands must take effect in the order they were sent,
// for every client to see, and a client must never observe what its own
// unacknowledged changes could still take back. A put is held back in
// memory until its record is durable (nobody can see the job before, and
// a failed put never existed), while a delete, release, bury or kick
// changes memory when its record is appended. So the only thing a command
// can overtake is c's own unacknowledged puts: a command that reads or
// changes shared state waits for them, since it could observe them (a
// reserve, peek or stats missing c's own job) or be observed before them
// (another client seeing c's later delete while c's earlier put is still
// invisible). Nothing waits for the other records:
//
//	command                                     waits for c's     why
//	put use watch ignore                        nothing           they touch only c's own state (a put
//	list-tube-used list-tubes-watched                             is published in the order of its ack)
//	reserve reserve-with-timeout reserve-job    unacked puts      they read or change shared state,
//	delete release bury touch kick kick-job                       which c's unacked puts have not
//	peek peek-ready peek-delayed peek-buried                      reached yet
//	stats stats-job stats-tube list-tubes
//	pause-tube beanpole-unreserve
//	beanpole-cancel-wait                        nothing           it answers that c does not wait
//	quit                                        every record      its close follows every reply
//	(unknown command, bad format)               nothing           the reply says nothing of the state
//
// The replies keep their order anyway: a reply that follows one waiting
// for its records is held behind it (settle), each is sent only once its
// own records and every earlier reply's are durable, and a reply whose
// record failed is INTERNAL_ERROR (sendHeld). So a reservation, a delete
// or a stats reply still reaches the client only after what came before
// it on the connection is durable, as with upstream, which writes each
// record before it runs the next command; but the records of pipelined
// reserves and deletes, like those of pipelined puts, share one write,
// one fsync, one raft entry.
func awaitFor(c *conn, st codec.Status, op codec.Op) uint64 {
	if st == codec.Unknown || st == codec.BadFormat {
		return 0
	}
	switch awaitRules[op] {
	case awaitPuts:
		return c.cl.PutsUnacked()
	case awaitAll:
		if appended, acked, _ := c.cl.Durability(); acked < appended {
			return appended
		}
	}
	return 0
}

// heldFull reports whether c holds as many replies waiting for the binlog
// as it may: as many bytes as HighWater allows unsent output, or, with its
// unsent output, more than fits under the memory ceiling (chargeOutput,
// which brings their charge up to date). Its next command waits, and the
// connection is not read, until some are sent: a client that pipelines
// without end holds at most one command's reply past either bound.
func (s *Server) heldFull(c *conn) bool {
	if !c.heldPending() {
		return false
	}
	return c.held.cost >= int64(s.cfg.HighWater) || !s.chargeOutput(c)
}

// awaitRule is a command's row of awaitFor's table. awaitPuts is the zero
// value, so a command awaitRules does not name waits: the safe side.
type awaitRule uint8

const (
	awaitPuts    awaitRule = iota // c's unacked puts
	awaitNothing                  // connection-local commands
	awaitAll                      // all c's records
)

var awaitRules = [codec.NumOps]awaitRule{
	codec.OpPut:              awaitNothing,
	codec.OpUse:              awaitNothing,
	codec.OpWatch:            awaitNothing,
	codec.OpIgnore:           awaitNothing,
	codec.OpListTubeUsed:     awaitNothing,
	codec.OpListTubesWatched: awaitNothing,
	codec.OpCancelWait:       awaitNothing,
	codec.OpQuit:             awaitAll,
}

// chargeOutput brings the charge for c's unsent output (what gnet holds
// because the socket did not take it) against the memory ceiling
// (MemReplies) up to date. It reports false when the output is past the
// ceiling: the bytes exist, so they are counted anyway, and c is to be
// throttled until they are sent. gnet's "output drained" OnTraffic brings
// c back here, and the charge goes back. Connections whose output the
// socket took at once, the common case, cost a look at gnet's counter.
//
// Replies held for the binlog (heldReplies) are unsent output too and are
// charged with it.
func (s *Server) chargeOutput(c *conn) bool {
	n := 0
	if !c.closed {
		n = c.gc.OutboundBuffered()
		if c.connExtra != nil {
			n += int(c.held.cost)
		}
	}
	if n == 0 && !c.holdsOutput() {
		return true
	}
	x := c.extra()
	d := int64(n) - x.outCharged
	x.outCharged = int64(n)
	ls := c.ls
	switch {
	case d < 0:
		s.eng.Uncharge(ls.shard, engine.MemReplies, -d)
		ls.out.tight = false
	case d > 0:
		if !s.eng.Charge(ls.shard, engine.MemReplies, d) {
			s.eng.ChargeAnyway(ls.shard, engine.MemReplies, d)
			ls.out.tight = true
			return false
		}
		ls.out.tight = false
	}
	return !ls.out.tight || n == 0
}

// checkInputCap is the last line of defence behind setReading. A
// connection that cannot be served is not read, so its buffered input
// stays within what it had sent before plus one read (256 KiB); that is
// counted against its loop's share of the input budget while it waits.
// Should one connection still buffer past the cap, or the loop's waiting
// connections together past their budget (thousands of clients, each
// parked in reserve behind a read of further commands), the connection
// that would cross it is closed rather than let memory grow.
func (s *Server) checkInputCap(c *conn) gnet.Action {
	n := c.gc.InboundBuffered()
	if n > s.inCap {
		s.log.Warn().Str("remote", addr(c.gc)).Int("buffered", n).Msg("closing connection: too much input while its reserve waits or its replies back up")
		return gnet.Close
	}
	if held := c.ls.heldBy[c]; n > held && c.ls.heldIn+int64(n-held) > s.inBudget {
		if now := time.Now(); now.Sub(c.ls.inputWarned) >= time.Second {
			c.ls.inputWarned = now
			s.log.Warn().Str("remote", addr(c.gc)).Int("buffered", n).Int64("budget", s.inBudget).
				Msg("closing connections: the input held by waiting connections is at its budget")
		}
		return gnet.Close
	}
	s.holdInput(c, n)
	return gnet.None
}

// holdInput sets the input c holds against its loop's budget. Only
// connections that wait with input buffered hold any, so the amounts live
// in a map of the loop's rather than in every connection.
func (s *Server) holdInput(c *conn, n int) {
	ls := c.ls
	ls.heldIn += int64(n - ls.heldBy[c])
	if c.holdsInput = n != 0; c.holdsInput {
		ls.heldBy[c] = n
	} else {
		delete(ls.heldBy, c)
	}
}

// waits reports whether c's input waits: for its reserve, its binlog
// records, room for its held replies, or its output to drain.
func (c *conn) waits() bool { return c.parked || c.awaiting || c.throttled || c.heldPending() }

// readBody copies p, the next part of the put body, and reports whether
// it fit. A body that is all in p is cloned in one go (append does not
// zero memory it is about to overwrite) and becomes a job in this pass.
// Otherwise the body is held across passes and charged against the memory
// ceiling as it grows (growBody), so a client that announces a large body
// and sends a byte of it holds a few bytes, not the body's size. Should the
// body not fit, the rest of it is dropped and the put answered
// OUT_OF_MEMORY (refuseBody).
func (c *conn) readBody(p []byte) bool {
	if c.body == nil && len(p) == int(c.put.bytes)+2 {
		c.body = append([]byte(nil), p...)
		return true
	}
	if want := len(c.body) + len(p); want > cap(c.body) && !c.growBody(want) {
		c.refuseBody()
		return false
	}
	c.body = append(c.body, p...)
	return true
}

// growBody makes room for at least want bytes of the put body and charges
// it (MemPartialBodies), or reports false if that does not fit under the
// ceiling. Below directBody a body doubles as bytes arrive (copies of at
// most 16 KiB); from there on, where readBodyDirect takes over, it is
// given its final size at once, so the rest is read into it with no
// further copy. A connection whose last put body was that large
// (bigBodies) has its next given its final size at once: it reads in
// small reads (bodySize), so the first part is only what shared a read
// with the put's line. So a client holds the memory of a body it has not
// sent only once it has sent directBody bytes, of that body or of the one
// before.
func (c *conn) growBody(want int) bool {
	need := int(c.put.bytes) + 2
	size := min(need, max(2*cap(c.body), want))
	if want >= directBody || c.bigBodies {
		size = need
	}
	cost := int64(engine.AllocSize(size))
	if cap(c.body) > 0 {
		cost -= int64(engine.AllocSize(cap(c.body)))
	}
	if !c.ls.s.eng.Charge(c.ls.shard, engine.MemPartialBodies, cost) {
		return false
	}
	c.bodyCharged += cost
	c.body = append(uninitBytes(size), c.body...)
	return true
}

// uninitBytes returns an empty slice with room for n bytes whose memory is
// not cleared first. A body's memory is written by the reads that fill it
// before any of it is used, and clearing 64 KiB of memory the collector
// has not handed out lately (cold in the cache) costs about what copying
// the body does. strings.Builder is the one way out of the standard
// library to such memory (its Grow skips the clearing); the slice is
// memory the builder allocated as bytes, nothing of it escapes as a string.
func uninitBytes(n int) []byte {
	var b strings.Builder
	b.Grow(n)
	b.WriteByte(0)
	return unsafe.Slice(unsafe.StringData(b.String()), n)[:0]
}

// bodySize notes the size of the put body that has just fully arrived.
// From a body of directBody bytes on, c's reads ask for headRead bytes, so
// that its next large body is read from the socket straight into the job
// rather than through gnet's buffer; a smaller body, or another command
// with more input behind it (pass), sets them back to gnet's whole buffer,
// the fewest reads for a client that pipelines small commands. A command
// sent on its own (a producer that reserves and deletes between its puts)
// fits a small read and leaves them small.
func (c *conn) bodySize() { c.setBigBodies(int(c.put.bytes)+2 >= directBody) }

// setBigBodies sets c's reads for large put bodies or for anything else.
// (A TLS connection's reads bring whole records, which are decrypted into
// the job: they keep their size.)
func (c *conn) setBigBodies(big bool) {
	if big == c.bigBodies {
		return
	}
	c.bigBodies = big
	if _, ok := c.gc.(*tlsConn); ok {
		return
	}
	n := 0
	if big {
		n = headRead
	}
	c.gc.SetReadSize(n)
}

// releaseBody returns the charge for the body held so far: it became a
// job (which is charged for itself), was dropped, or its connection closed.
func (c *conn) releaseBody() {
	if c.bodyCharged != 0 {
		c.ls.s.eng.Uncharge(c.ls.shard, engine.MemPartialBodies, c.bodyCharged)
		c.bodyCharged = 0
	}
}

// refuseBody drops the put body that did not fit under the memory ceiling
// and, as upstream does when malloc fails, reads and discards the rest of
// it before answering OUT_OF_MEMORY.
func (c *conn) refuseBody() {
	c.dec.Drop() // its Dropped event answers
	c.body = nil
	c.releaseBody()
}

// readBodyDirect reads the rest of a large put body from the socket
// straight into the job's memory, as upstream does, instead of letting gnet
// copy it into its buffer first and us copy it out again, and tells d. A
// TLS connection's records are decrypted straight into it. It runs on the
// connection's own loop with gnet's buffer fully consumed, so no bytes can
// overtake each other; it stops at EAGAIN (gnet's level-triggered poll
// brings the rest) and leaves errors and EOF for gnet's next read to see.
func (c *conn) readBodyDirect(d *codec.Decoder) {
	for d.BodyLeft() > 0 {
		if len(c.body) == cap(c.body) && !c.growBody(len(c.body)+1) {
			c.refuseBody()
			return
		}
		have := len(c.body)
		end := min(have+d.BodyLeft(), cap(c.body))
		var n int
		if t, ok := c.gc.(*tlsConn); ok {
			n = t.readDirect(c.body[have:end])
		} else if n, _ = unix.Read(c.gc.Fd(), c.body[have:end]); n < 0 {
			n = 0
		}
		if n == 0 {
			return
		}
		c.body = c.body[:have+n]
		d.BodyRead(c.body[have:])
		c.ls.bytesIn.Add(uint64(n))
	}
}
