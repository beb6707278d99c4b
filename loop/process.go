package loop

import (
	"bytes"

	"github.com/beanpole/beanpole/codec"
	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
)

// maxLine is the longest command line including CRLF (beanpole Decision 2:
// upstream's LINE_BUF_SIZE, `pause-tube <200 chars> 4294967295\r\n`).
const maxLine = 224

var crlf = []byte("\r\n")

// directBody is how much of a put body must have arrived before the rest is
// read from the socket straight into it: below that, gnet's one read per
// wake-up is as cheap.
const directBody = 16 << 10

// process runs every complete command buffered for c, in order, and sends
// their replies in one write. It stops early at a reserve that has to wait
// (the rest stays in gnet's buffer until the reserve is answered), when
// output backs up, or at quit.
func (s *Server) process(c *conn) gnet.Action {
	gc := c.gc
	if c.holding {
		return s.checkInputCap(c) // replies wait for the binlog; so does input
	}
	// The loop's reply batch must be empty whenever we leave: it is shared
	// by every connection of the loop, and a wakeup may have queued a reply
	// for c before calling us.
	if c.parked {
		s.send(c, 0)
		if c.throttled {
			// Nothing runs until the reserve is answered; that path
			// re-checks the output, so the sweeper need not poll us.
			c.throttled = false
			s.throttled.remove(c)
		}
		return s.checkInputCap(c)
	}
	if c.throttled {
		if gc.OutboundBuffered() > s.cfg.HighWater/2 {
			s.send(c, 0)
			return s.checkInputCap(c)
		}
		c.throttled = false
		s.throttled.remove(c)
	}
	out := &c.ls.out
	buf, _ := gc.Peek(-1)
	off := 0
	action := gnet.None
	for off < len(buf) && !c.parked {
		switch c.phase {
		case phaseSkip:
			n := uint64(len(buf) - off)
			if n > c.skip {
				n = c.skip
			}
			off += int(n)
			c.skip -= n
			if c.skip == 0 {
				c.phase = phaseCommand
				out.buf = append(out.buf, codec.RepJobTooBig...)
			}
		case phaseBody:
			off += c.readBody(buf[off:])
			if off == len(buf) && len(c.body) >= directBody && len(c.body) < int(c.put.bytes)+2 {
				c.readBodyDirect()
			}
			if len(c.body) == int(c.put.bytes)+2 {
				c.phase = phaseCommand
				s.finishPut(c)
			}
		case phaseDiscardLine:
			if i := bytes.Index(buf[off:], crlf); i >= 0 {
				off += i + 2
				c.phase = phaseCommand
				out.buf = append(out.buf, codec.RepBadFormat...)
			} else {
				off = keepTrailingCR(buf, off)
				goto done // a lone trailing '\r' waits for its '\n'
			}
		case phaseCommand:
			window := buf[off:min(len(buf), off+maxLine)]
			i := bytes.Index(window, crlf)
			if i < 0 {
				if len(window) == maxLine {
					// Too long to be a command: discard through the next
					// CRLF and answer one BAD_FORMAT, keeping the connection.
					c.phase = phaseDiscardLine
					continue
				}
				goto done // incomplete line: wait for more
			}
			line := window[:i]
			off += i + 2
			if act := s.dispatch(c, line); act != gnet.None {
				action = act
				goto done
			}
		}
		if out.full() {
			if s.send(c, off) {
				return action
			}
			if c.closed {
				return gnet.Close
			}
			buf, _ = gc.Peek(-1)
			off = 0
			if gc.OutboundBuffered() > s.cfg.HighWater {
				break
			}
		}
	}
done:
	if s.send(c, off) {
		return action
	}
	if c.closed || action != gnet.None {
		return action
	}
	if n := gc.OutboundBuffered(); n > s.cfg.HighWater {
		if n > s.cfg.HardCap {
			s.log.Warn().Str("remote", addr(gc)).Int("pending", n).Msg("closing connection: it does not read its replies")
			return gnet.Close
		}
		if !c.throttled {
			c.throttled = true
			s.throttled.add(c)
		}
	}
	return gnet.None
}

// send discards the consumed input and writes the batched replies, unless
// some of them acknowledge binlog records that are not durable yet: then
// they are held (and so is further input) until the log says they are.
// It reports whether it held.
func (s *Server) send(c *conn, consumed int) bool {
	if consumed > 0 { // never Discard(0): it means "everything" to gnet
		_, _ = c.gc.Discard(consumed)
	}
	if c.cl.HoldIfUndurable() {
		c.hold()
		return true
	}
	c.ls.out.flush(c.gc)
	return false
}

// keepTrailingCR consumes buf[off:] except a final '\r', which may be the
// first half of a CRLF split across reads.
func keepTrailingCR(buf []byte, off int) int {
	if n := len(buf); n > off && buf[n-1] == '\r' {
		return n - 1
	}
	return len(buf)
}

// checkInputCap closes a connection that keeps sending while it cannot be
// served (parked or throttled): gnet would otherwise buffer without bound.
func (s *Server) checkInputCap(c *conn) gnet.Action {
	if n := c.gc.InboundBuffered(); n > s.inCap {
		s.log.Warn().Str("remote", addr(c.gc)).Int("buffered", n).Msg("closing connection: too much input while its reserve waits or its replies back up")
		return gnet.Close
	}
	return gnet.None
}

// readBody copies as much of the put body as buf holds. A body that is all
// there is cloned in one go (append does not zero memory it is about to
// overwrite). Otherwise it is allocated at its final size up to 1 MiB (no
// regrowth copies); past that it grows as bytes arrive, so a client
// announcing 1 GiB cannot make us commit it before sending it.
func (c *conn) readBody(buf []byte) int {
	need := int(c.put.bytes) + 2
	have := len(c.body)
	n := min(len(buf), need-have)
	if c.body == nil && n == need {
		c.body = append([]byte(nil), buf[:n]...)
		return n
	}
	if have+n > cap(c.body) {
		c.growBody(have + n)
	}
	c.body = append(c.body, buf[:n]...)
	return n
}

// growBody makes room for at least want bytes of the put body.
func (c *conn) growBody(want int) {
	need := int(c.put.bytes) + 2
	size := min(need, max(2*cap(c.body), want, 1<<20))
	nb := make([]byte, len(c.body), size)
	copy(nb, c.body)
	c.body = nb
}

// readBodyDirect reads the rest of a large put body from the socket
// straight into the job's memory, as upstream does, instead of letting gnet
// copy it into its buffer first and us copy it out again. It runs on the
// connection's own loop with gnet's buffer fully consumed, so no bytes can
// overtake each other; it stops at EAGAIN (gnet's level-triggered poll
// brings the rest) and leaves errors and EOF for gnet's next read to see.
func (c *conn) readBodyDirect() {
	need := int(c.put.bytes) + 2
	for len(c.body) < need {
		if len(c.body) == cap(c.body) {
			c.growBody(len(c.body) + 1)
		}
		end := min(need, cap(c.body))
		n, err := unix.Read(c.gc.Fd(), c.body[len(c.body):end])
		if n <= 0 || err != nil {
			return
		}
		c.body = c.body[:len(c.body)+n]
	}
}
