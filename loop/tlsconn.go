package loop

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"sync"
	"time"

	"github.com/beanpole/beanpole/engine"
	"github.com/panjf2000/gnet/v2"
)

// A TLS connection, once its handshake is done, is served by its event
// loop like any other: gnet reads and writes the TCP socket, and tlsConn,
// which the connection uses in place of gnet's Conn, turns the records
// gnet read into plaintext for the parser and the replies into records
// for gnet to write. crypto/tls does every record (and any key update);
// it is driven without blocking through recordPipe, whose reads answer
// "would block" (a temporary net.Error, which crypto/tls leaves
// retryable) once gnet's buffer is empty.
//
// So a TLS command costs what a plaintext one does, the same two
// syscalls, plus the cipher: no goroutine, no descriptor and no buffer
// of its own while the connection is idle beyond crypto/tls's state.

// tlsRecord is the most plaintext one TLS record carries.
const tlsRecord = 16 << 10

// errWouldBlock is recordPipe's read when gnet holds no more input.
var errWouldBlock error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "no more TLS input buffered" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }

// recordPipe is the net.Conn under a connection's tls.Conn. During the
// handshake, which runs on a goroutine of its own with a deadline, it is
// the accepted socket itself (hs); from the handoff on, its reads take
// the records gnet read (from) and its writes append to the loop's
// record buffer (to), which tlsConn hands to gnet.
//
// crypto/tls keeps the records it opens in a buffer of its own, which it
// grows to hold a whole record (and a read's slack, bytes.MinRead) and
// never shrinks: that buffer is the connection's record buffer for good.
// Each read is handed at most one record, and leaves crypto/tls that
// slack, so the buffer grows only for a record larger than it holds (a
// read that filled it would have it doubled for nothing); a read's b is
// the buffer's free space, so the pipe knows its size (bufSize), which
// the connection charges against the memory ceiling (tlsConn.charge). A
// record still arriving is handed over as soon as the buffer holds it
// without growing, or half of it has arrived, so that a header alone
// costs no buffer, as a put line alone costs no body; until then it
// stays in gnet's buffer, counted as the connection's input.
type recordPipe struct {
	hs   net.Conn
	from gnet.Conn
	to   *[]byte
	// rec is the size of the record crypto/tls has the start of, header
	// included, and left how much of it is still in gnet's buffer; both 0
	// between records.
	rec, left int
	// bufSize is crypto/tls's record buffer as the last read found it.
	bufSize int
	// hdr holds the hdrN bytes read so far of a record header during the
	// handshake (readHandshake).
	hdr  [recordHeader]byte
	hdrN int
}

func (p *recordPipe) Read(b []byte) (int, error) {
	if p.from == nil {
		return p.readHandshake(b)
	}
	// b is what follows the part of the record crypto/tls holds.
	p.bufSize = max(p.bufSize, len(b)+p.rec-p.left)
	avail := p.from.InboundBuffered()
	closed := p.from.PeerClosed()
	limit := len(b) - bytes.MinRead
	if limit < recordHeader {
		limit = len(b)
	}
	n := 0
	switch {
	case closed:
		n = avail // after the client's end: crypto/tls reports what is left
	case p.left > 0:
		n = min(p.left, avail)
	case avail >= recordHeader:
		hdr, _ := p.from.Peek(recordHeader)
		size := recordHeader + (int(hdr[3])<<8 | int(hdr[4]))
		switch {
		case size > recordHeader+maxRecord:
			n = recordHeader // for crypto/tls to refuse
		case size <= avail || size+bytes.MinRead <= len(b) || 2*avail >= size+bytes.MinRead:
			n = min(size, avail)
		}
	}
	if n = min(n, limit); n == 0 {
		if closed {
			return 0, io.EOF
		}
		return 0, errWouldBlock
	}
	// Only what is handed over is peeked: gnet copies a peek that wraps
	// round its ring buffer.
	buf, _ := p.from.Peek(n)
	n = copy(b, buf)
	// Follow the records handed over: the next read starts inside one
	// when this one did not hand it all.
	for i := 0; i < n; {
		if p.left == 0 {
			if n-i < recordHeader {
				break // after the client's end: nothing more to follow
			}
			p.rec = recordHeader + (int(buf[i+3])<<8 | int(buf[i+4]))
			p.left = p.rec
		}
		k := min(p.left, n-i)
		p.left -= k
		i += k
	}
	if p.left == 0 {
		p.rec = 0
	}
	_, _ = p.from.Discard(n)
	return n, nil
}

// readHandshake reads the socket during the handshake, never past the
// record crypto/tls is reading: the client's first records after its
// Finished stay in the socket for gnet, and crypto/tls holds none of them,
// whole or in part, at the handoff (a part would leave the loop reading
// the rest of a record as the start of one).
func (p *recordPipe) readHandshake(b []byte) (int, error) {
	if p.left == 0 {
		// The next header, then the record it announces.
		n, err := p.hs.Read(b[:min(len(b), recordHeader-p.hdrN)])
		copy(p.hdr[p.hdrN:], b[:n])
		if p.hdrN += n; p.hdrN == recordHeader {
			p.hdrN, p.left = 0, int(p.hdr[3])<<8|int(p.hdr[4])
		}
		return n, err
	}
	n, err := p.hs.Read(b[:min(len(b), p.left)])
	p.left -= n
	return n, err
}

// recordHeader is a TLS record's header: type, version, length;
// maxRecord is the most a record may carry after it (TLS 1.2's bound,
// above TLS 1.3's).
const (
	recordHeader = 5
	maxRecord    = tlsRecord + 2048
)

func (p *recordPipe) Write(b []byte) (int, error) {
	if p.from == nil {
		return p.hs.Write(b)
	}
	*p.to = append(*p.to, b...)
	return len(b), nil
}

func (p *recordPipe) Close() error {
	if p.from == nil {
		return p.hs.Close()
	}
	return nil // gnet owns the socket
}

func (p *recordPipe) LocalAddr() net.Addr  { return p.hs.LocalAddr() }
func (p *recordPipe) RemoteAddr() net.Addr { return p.hs.RemoteAddr() }

func (p *recordPipe) SetDeadline(t time.Time) error {
	if p.from == nil {
		return p.hs.SetDeadline(t)
	}
	return nil
}

func (p *recordPipe) SetReadDeadline(t time.Time) error {
	if p.from == nil {
		return p.hs.SetReadDeadline(t)
	}
	return nil
}

func (p *recordPipe) SetWriteDeadline(t time.Time) error {
	if p.from == nil {
		return p.hs.SetWriteDeadline(t)
	}
	return nil
}

// tlsSession is what the handshake hands to the loop with the socket.
type tlsSession struct {
	tc       *tls.Conn
	pipe     *recordPipe
	internal bool // accepted by ServeInternalTLS
}

// tlsConn is a TLS connection as its conn sees it: gnet's Conn for the
// TCP socket, with input and output in plaintext. Every method runs on the
// connection's loop.
type tlsConn struct {
	gnet.Conn
	tc   *tls.Conn
	pipe *recordPipe
	ls   *loopState
	// plain is the decrypted input not yet consumed. While a callback
	// runs it may be the loop's buffer (borrowed); settle moves what is
	// left into memory of the connection's own, so an idle connection
	// holds none.
	plain    []byte
	borrowed bool
	// ended: the client sent close_notify or a FIN, or a record that
	// does not decrypt; nothing more comes.
	ended bool
	// drained: the last read found no more input.
	drained bool
	// held: crypto/tls may hold plaintext not yet read (its last Read
	// filled the buffer it was given).
	held bool
	// charged is crypto/tls's record buffer (recordPipe.bufSize) as
	// charged against the memory ceiling (MemPartialBodies).
	charged int64
}

func newTLSConn(gc gnet.Conn, s *tlsSession, ls *loopState) *tlsConn {
	s.pipe.from, s.pipe.to = gc, &ls.tlsOut
	t := &tlsConn{Conn: gc, tc: s.tc, pipe: s.pipe, ls: ls, held: true}
	ls.tlsConns[t] = struct{}{}
	ls.s.tlsOpen.Add(1)
	return t
}

// closed forgets t, whose socket gnet has closed, and gives back the
// charge for its record buffer.
func (t *tlsConn) closed() {
	t.plain = nil
	t.ls.s.eng.Uncharge(t.ls.shard, engine.MemPartialBodies, t.charged)
	t.charged = 0
	delete(t.ls.tlsConns, t)
	t.ls.s.tlsOpen.Add(-1)
}

// fill decrypts the next record into plain, if there is one: the loop
// asks for records as it parses (process), so that a large put body can
// be decrypted straight into the job (readDirect) rather than through
// plain. A reply crypto/tls owes the client meanwhile (to a key update) is
// sent.
func (t *tlsConn) fill() {
	if t.ended || t.starved() {
		return
	}
	if len(t.plain) == 0 {
		if t.ls.tlsIn == nil {
			t.ls.tlsIn = make([]byte, 0, 2*tlsRecord)
		}
		t.plain, t.borrowed = t.ls.tlsIn[:0], true
	}
	if cap(t.plain)-len(t.plain) < tlsRecord {
		t.grow(len(t.plain) + tlsRecord)
	}
	n, err := t.tc.Read(t.plain[len(t.plain):cap(t.plain)])
	t.plain = t.plain[:len(t.plain)+n]
	t.note(len(t.plain) == cap(t.plain), err)
}

// starved reports, and notes as drained, that a read of crypto/tls would
// find nothing: it holds no plaintext, and gnet no input (or its end).
// That read is not made: it would cost a pass through crypto/tls's record
// layer and an allocation there, once per pass, to learn what the pipe
// says at once.
func (t *tlsConn) starved() bool {
	if t.held || t.Conn.InboundBuffered() > 0 || t.Conn.PeerClosed() {
		return false
	}
	t.drained = true
	return true
}

// note records what a read of crypto/tls said about the input; full: it
// filled the buffer it was given.
func (t *tlsConn) note(full bool, err error) {
	t.held = full && err == nil
	switch {
	case err == errWouldBlock:
		t.drained = true
	case err != nil:
		t.ended = true
	default:
		t.drained = false
	}
	t.charge()
	t.flushRecords()
}

// charge counts crypto/tls's record buffer against the memory ceiling as
// it grows, past the ceiling if need be: it holds the record being opened
// (or still arriving), as a put body under way is held, and is kept, as
// crypto/tls keeps it, for the connection's life.
func (t *tlsConn) charge() {
	d := int64(t.pipe.bufSize) - t.charged
	if d <= 0 {
		return
	}
	t.charged += d
	if eng := t.ls.s.eng; !eng.Charge(t.ls.shard, engine.MemPartialBodies, d) {
		eng.ChargeAnyway(t.ls.shard, engine.MemPartialBodies, d)
	}
}

// more reports whether records may wait to be decrypted: the last read
// did not find crypto/tls and gnet out of input.
func (t *tlsConn) more() bool { return !t.drained && !t.ended }

// readDirect decrypts input straight into b, the rest of a put body, once
// plain is all consumed; it reports the bytes read, 0 when no more input
// is buffered (or none comes).
func (t *tlsConn) readDirect(b []byte) int {
	if t.ended || t.starved() {
		return 0
	}
	n, err := t.tc.Read(b)
	t.note(n == len(b), err)
	return n
}

// grow gives plain room for want bytes, in memory of the connection's own.
func (t *tlsConn) grow(want int) {
	nb := make([]byte, len(t.plain), max(want, 2*cap(t.plain)))
	copy(nb, t.plain)
	t.plain, t.borrowed = nb, false
}

// settle ends a callback: input left in the loop's buffer is copied out.
func (t *tlsConn) settle() {
	switch {
	case len(t.plain) == 0:
		t.plain, t.borrowed = nil, false
	case t.borrowed:
		t.plain, t.borrowed = append([]byte(nil), t.plain...), false
	}
}

// flushRecords hands the records written so far to gnet.
func (t *tlsConn) flushRecords() {
	out := &t.ls.tlsOut
	if len(*out) > 0 {
		t.ls.writeChunks(t.Conn, [][]byte{*out})
		*out = (*out)[:0]
	}
	if cap(*out) > 4<<20 {
		*out = make([]byte, 0, 64<<10)
	}
}

// Peek is the plaintext buffered; n must be -1, as the loop asks.
func (t *tlsConn) Peek(int) ([]byte, error) { return t.plain, nil }

// Discard consumes n bytes of plaintext.
func (t *tlsConn) Discard(n int) (int, error) {
	n = min(n, len(t.plain))
	t.plain = t.plain[n:]
	return n, nil
}

// InboundBuffered counts the plaintext and the records not yet decrypted.
func (t *tlsConn) InboundBuffered() int { return len(t.plain) + t.Conn.InboundBuffered() }

// PeerClosed: the client ended its input and all of it is decrypted.
func (t *tlsConn) PeerClosed() bool { return t.ended }

func (t *tlsConn) Write(b []byte) (int, error) {
	bs := append(t.ls.tlsBufs[:0], b)
	n, err := t.Writev(bs)
	clear(bs)
	t.ls.tlsBufs = bs[:0]
	return n, err
}

// Writev encrypts bs into as few records as they fill (crypto/tls makes at
// least one record per Write, so small replies share one) and hands them
// to gnet in one write. crypto/tls copies what it seals into a record
// buffer of its own, so a slice of a record or more (a job body) is
// handed to it where it lies, not first copied after what is staged: the
// staged bytes and the slice's first len%tlsRecord bytes make a record,
// then the rest of the slice makes whole ones.
func (t *tlsConn) Writev(bs [][]byte) (int, error) {
	stage := t.ls.tlsStage[:0]
	n := 0
	var err error
	for _, b := range bs {
		n += len(b)
		if len(stage)+len(b) <= tlsRecord {
			stage = append(stage, b...)
			continue
		}
		k := tlsRecord - len(stage) // fill the staged record from b
		if r := len(b) % tlsRecord; len(b) >= tlsRecord && r <= k {
			k = r // or only up to where b's whole records start
		}
		if stage = append(stage, b[:k]...); len(stage) > 0 {
			if _, err = t.tc.Write(stage); err != nil {
				break
			}
			stage = stage[:0]
		}
		b = b[k:]
		if whole := len(b) - len(b)%tlsRecord; whole > 0 {
			if _, err = t.tc.Write(b[:whole]); err != nil {
				break
			}
			b = b[whole:]
		}
		stage = append(stage, b...)
	}
	if err == nil && len(stage) > 0 {
		_, err = t.tc.Write(stage)
	}
	t.ls.tlsStage = stage[:0]
	t.flushRecords()
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Close sends close_notify, then closes the socket once gnet has written
// what it holds.
func (t *tlsConn) Close() error {
	t.closeNotify()
	return t.Conn.Close()
}

// closeNotify tells the client that the server is done: a client's TLS
// library can then tell an orderly close from a cut connection.
func (t *tlsConn) closeNotify() {
	_ = t.tc.CloseWrite()
	t.flushRecords()
}

// closeTLS closes every TLS connection with close_notify, each on its own
// loop, before Stop closes the loops (which close sockets without a word).
func (s *Server) closeTLS(ctx context.Context) {
	s.mu.Lock()
	var wg sync.WaitGroup
	for el, ls := range s.loops {
		wg.Add(1)
		if el.Execute(ctx, closeAllTLS{ls, &wg}) != nil {
			wg.Done()
		}
	}
	s.mu.Unlock()
	waitAtMost(ctx, wg.Wait)
}

type closeAllTLS struct {
	ls *loopState
	wg *sync.WaitGroup
}

func (a closeAllTLS) Run(context.Context) error {
	defer a.wg.Done()
	for t := range a.ls.tlsConns {
		_ = t.Close()
	}
	return nil
}
