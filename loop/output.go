package loop

import (
	"fmt"

	"github.com/panjf2000/gnet/v2"
)

// output batches one processing pass's replies into a single write (or one
// writev when job bodies are attached), because gnet's Write is one syscall
// per call. There is one per event loop, shared by the loop's connections:
// a pass takes it with claim and must leave it empty with release, so no
// reply can ever be written to another connection's socket.
type output struct {
	owner *conn // the connection whose pass is running, or nil
	buf   []byte
	mark  int      // start of the part of buf not yet referenced by iov
	iov   [][]byte // header chunks interleaved with job bodies
	// bodies is how many body bytes iov references: a batch is written
	// once it holds a few MiB, so one pass of pipelined peeks of big jobs
	// cannot make gnet copy gigabytes before the output caps are checked.
	bodies int
	// tight: the loop's last charge for unsent output did not fit under
	// the memory ceiling (chargeOutput). Until one fits again, each reply
	// is written on its own.
	tight bool
}

// Bodies up to this size are copied into the batch: a copy is cheaper than
// an extra iovec for them.
const inlineBody = 1024

// Keep well under the kernel's IOV_MAX of 1024 (gnet does not split).
const maxIOV = 512

// claim starts c's pass. The batch must be empty and unowned: anything
// else is a reply on its way to the wrong connection.
func (o *output) claim(c *conn) {
	if o.owner != nil || !o.empty() {
		panic(fmt.Sprintf("loop: reply batch taken by a new pass while owned (%v) or not empty (%d bytes, %d iovecs)", o.owner != nil, len(o.buf), len(o.iov)))
	}
	o.owner = c
}

// release ends c's pass; everything batched must have been written or held.
func (o *output) release(c *conn) {
	if o.owner != c || !o.empty() {
		panic(fmt.Sprintf("loop: pass ended with its reply batch not empty (%d bytes, %d iovecs) or owned by another connection (%v)", len(o.buf), len(o.iov), o.owner != c))
	}
	o.owner = nil
}

func (o *output) empty() bool { return len(o.buf) == 0 && len(o.iov) == 0 }

func (o *output) body(b []byte) {
	if len(b) <= inlineBody {
		o.buf = append(o.buf, b...)
		return
	}
	o.iov = append(o.iov, o.buf[o.mark:], b)
	o.mark = len(o.buf)
	o.bodies += len(b)
}

func (o *output) full() bool {
	return len(o.iov) >= maxIOV || len(o.buf) >= 256<<10 || o.bodies >= 4<<20
}

// flush writes everything batched so far to c, resets the batch and
// reports the bytes gnet took. The bodies are referenced, not copied: gnet
// copies only what the kernel does not take at once.
func (o *output) flush(c gnet.Conn) (n int) {
	if len(o.iov) == 0 {
		if len(o.buf) > 0 {
			n, _ = c.Write(o.buf)
		}
	} else {
		if o.mark < len(o.buf) {
			o.iov = append(o.iov, o.buf[o.mark:])
		}
		n, _ = c.Writev(o.iov)
	}
	o.reset()
	return n
}

// discard drops the batch unsent (the connection is gone).
func (o *output) discard() { o.reset() }

func (o *output) reset() {
	clear(o.iov) // do not pin job bodies
	o.iov = o.iov[:0]
	o.mark, o.bodies = 0, 0
	if cap(o.buf) > 4<<20 {
		o.buf = make([]byte, 0, 64<<10)
	}
	o.buf = o.buf[:0]
}

// outPos is a point in the batch, taken between two commands.
type outPos struct{ buf, iov, mark int }

func (o *output) pos() outPos { return outPos{len(o.buf), len(o.iov), o.mark} }

// takeSince moves the replies batched since p to the end of h, header
// bytes copied and bodies referenced (they are immutable), and truncates
// the batch back to p.
func (o *output) takeSince(p outPos, h *heldReplies) {
	for i := p.iov; i < len(o.iov); i++ {
		b := o.iov[i]
		if i%2 == 0 { // a header chunk, buf[mark:…]; the first began before p
			if i == p.iov {
				b = b[p.buf-p.mark:]
			}
			h.header(b)
		} else {
			o.bodies -= len(b)
			h.parts = append(h.parts, heldPart{body: b})
			h.cost += int64(len(b))
		}
	}
	h.header(o.buf[max(o.mark, p.buf):])
	clear(o.iov[p.iov:])
	o.iov = o.iov[:p.iov]
	o.buf = o.buf[:p.buf]
	o.mark = p.mark
}
