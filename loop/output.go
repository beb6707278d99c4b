package loop

import "github.com/panjf2000/gnet/v2"

// output batches one processing pass's replies into a single write (or one
// writev when job bodies are attached), because gnet's Write is one syscall
// per call. There is one per event loop: a loop runs one pass at a time.
type output struct {
	buf  []byte
	mark int      // start of the part of buf not yet referenced by iov
	iov  [][]byte // header chunks interleaved with job bodies
	// bodies is how many body bytes iov references: a batch is written
	// once it holds a few MiB, so one pass of pipelined peeks of big jobs
	// cannot make gnet copy gigabytes before the output caps are checked.
	bodies int
}

// Bodies up to this size are copied into the batch: a copy is cheaper than
// an extra iovec for them.
const inlineBody = 1024

// Keep well under the kernel's IOV_MAX of 1024 (gnet does not split).
const maxIOV = 512

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

// flush writes everything batched so far to c and resets the batch. The
// bodies are referenced, not copied: gnet copies only what the kernel does
// not take at once.
func (o *output) flush(c gnet.Conn) {
	if len(o.iov) == 0 {
		if len(o.buf) > 0 {
			_, _ = c.Write(o.buf)
		}
	} else {
		if o.mark < len(o.buf) {
			o.iov = append(o.iov, o.buf[o.mark:])
		}
		_, _ = c.Writev(o.iov)
	}
	o.reset()
}

func (o *output) reset() {
	clear(o.iov) // do not pin job bodies
	o.iov = o.iov[:0]
	o.mark, o.bodies = 0, 0
	if cap(o.buf) > 4<<20 {
		o.buf = make([]byte, 0, 64<<10)
	}
	o.buf = o.buf[:0]
}
