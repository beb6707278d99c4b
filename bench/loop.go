package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The load generator is one OS thread running one epoll loop over
// non-blocking sockets. Every connection is a small state machine driven by
// a Handler: the loop reads, splits the byte stream into replies with
// ParseReply, pops the matching Expect (replies arrive strictly in command
// order) and calls the handler, which queues the next commands. Output is
// coalesced per connection and flushed once per loop iteration with
// writev, so a pipelined window costs one syscall.

// Expect is one command in flight on a connection.
type Expect struct {
	Op  uint8  // handler-defined
	T0  int64  // when it was queued (loop clock, ns)
	Seq int    // handler-defined (usually the ledger sequence number)
	ID  uint64 // handler-defined (usually the job id)
}

// Handler drives connections.
type Handler interface {
	// Connected is called once the TCP handshake has completed.
	Connected(c *Conn) error
	// Reply is called for every complete reply, with the command it answers.
	Reply(c *Conn, e Expect, r *Reply) error
}

// Conn is one client connection owned by a Loop.
type Conn struct {
	l   *Loop
	fd  int
	h   Handler
	Idx int // scenario-defined index

	connected bool
	closed    bool
	dirty     bool
	outArmed  bool

	in   []byte // unparsed partial reply (owned); nil when empty
	need int

	// output queue: segments referencing either the arena or caller memory
	arena []byte
	segs  []seg
	nOut  int

	exp []Expect
	eh  int

	// scenario scratch state
	State int
	Aux   int
	Aux2  int
}

type seg struct {
	ref    []byte
	a0, a1 int
}

// Loop is the epoll event loop.
type Loop struct {
	epfd   int
	addr   unix.SockaddrInet4
	conns  []*Conn
	events []unix.EpollEvent
	shared []byte
	iov    [][]byte
	dirty  []*Conn
	base   time.Time
	now    int64
	err    error

	// OnTick, if set, runs after each batch of events (and at least every
	// tickInterval while idle).
	OnTick func()

	open    int
	pending int // connections with queued output
}

const tickInterval = 5 // ms

// NewLoop makes a loop whose connections go to 127.0.0.1:port.
func NewLoop(port int, maxFD int) (*Loop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	l := &Loop{
		epfd:   epfd,
		conns:  make([]*Conn, maxFD+64),
		events: make([]unix.EpollEvent, 512),
		shared: make([]byte, 256<<10),
		base:   time.Now(),
	}
	l.addr.Port = port
	l.addr.Addr = [4]byte{127, 0, 0, 1}
	l.now = l.Now()
	return l, nil
}

// Now reads the loop clock (monotonic ns).
func (l *Loop) Now() int64 { return int64(time.Since(l.base)) }

// Time returns the loop clock as of the current batch.
func (l *Loop) Time() int64 { return l.now }

// Fail records the first fatal error; the running Run returns it.
func (l *Loop) Fail(err error) {
	if l.err == nil && err != nil {
		l.err = err
	}
}

// Err returns the recorded error.
func (l *Loop) Err() error { return l.err }

// Open is the number of open connections.
func (l *Loop) Open() int { return l.open }

// Idle reports whether no connection has unsent output.
func (l *Loop) Idle() bool { return l.pending == 0 && len(l.dirty) == 0 }

// Close closes every connection and the epoll descriptor.
func (l *Loop) Close() {
	for _, c := range l.conns {
		if c != nil {
			c.Close()
		}
	}
	if l.epfd >= 0 {
		unix.Close(l.epfd)
		l.epfd = -1
	}
}

// Dial starts a non-blocking connect; h.Connected runs when it completes.
func (l *Loop) Dial(h Handler, idx int) (*Conn, error) {
	return l.DialPort(h, idx, l.addr.Port)
}

// DialPort is Dial to 127.0.0.1:port (another node of a cluster).
func (l *Loop) DialPort(h Handler, idx, port int) (*Conn, error) {
	addr := l.addr
	addr.Port = port
	var fd int
	for try := 0; ; try++ {
		var err error
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("socket: %w", err)
		}
		if fd >= len(l.conns) {
			unix.Close(fd)
			return nil, fmt.Errorf("fd %d beyond the loop's table", fd)
		}
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		if try < 64 {
			bindSourcePort(fd)
		}
		err = unix.Connect(fd, &addr)
		if err == nil || errors.Is(err, unix.EINPROGRESS) {
			break
		}
		unix.Close(fd)
		if try < 64 && (errors.Is(err, unix.EADDRNOTAVAIL) || errors.Is(err, unix.EADDRINUSE)) {
			continue // that source port's 4-tuple is still in use; next one
		}
		return nil, fmt.Errorf("connect 127.0.0.1:%d: %w", port, err)
	}
	c := &Conn{l: l, fd: fd, h: h, Idx: idx}
	ev := unix.EpollEvent{Events: unix.EPOLLOUT | unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(fd)}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("epoll_ctl add: %w", err)
	}
	c.outArmed = true
	l.conns[fd] = c
	l.open++
	return c, nil
}

// Source ports. Left to itself, connect() searches the ephemeral range
// for a free 4-tuple, even ports first; once half the range is in use
// towards one server every connect scans it all (~0.5 ms each), so opening
// 20,000 connections would measure the client's kernel, not the server's
// accept path. We therefore bind each socket to the next port of the
// ephemeral range ourselves (SO_REUSEADDR; ports in use by anything else
// are skipped by bind), falling back to the kernel's choice.
var (
	portLo, portHi = ephemeralRange()
	portNext       = portLo
)

func ephemeralRange() (int, int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		f := strings.Fields(string(b))
		if len(f) == 2 {
			lo, err1 := strconv.Atoi(f[0])
			hi, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && lo > 0 && hi > lo && hi < 65536 {
				return lo, hi
			}
		}
	}
	return 32768, 60999
}

func bindSourcePort(fd int) {
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	for i := 0; i < 512; i++ {
		p := portNext
		portNext++
		if portNext > portHi {
			portNext = portLo
		}
		if reservedPort(p) {
			continue
		}
		if unix.Bind(fd, &unix.SockaddrInet4{Port: p, Addr: [4]byte{127, 0, 0, 1}}) == nil {
			return
		}
	}
}

// SetHandler switches the connection to another handler.
func (c *Conn) SetHandler(h Handler) { c.h = h }

// Loop returns the owning loop.
func (c *Conn) Loop() *Loop { return c.l }

// Connected reports whether the handshake has completed.
func (c *Conn) Connected() bool { return c.connected }

// InFlight is the number of commands awaiting a reply.
func (c *Conn) InFlight() int { return len(c.exp) - c.eh }

// Send queues a command (copied) and the reply it expects.
func (c *Conn) Send(b []byte, e Expect) {
	c.Write(b)
	c.Expect(e)
}

// Expect registers an expected reply without writing anything (for commands
// written with Write/WriteRef).
func (c *Conn) Expect(e Expect) {
	if c.eh > 0 && c.eh == len(c.exp) {
		c.exp = c.exp[:0]
		c.eh = 0
	}
	c.exp = append(c.exp, e)
}

// Write queues bytes (copied into the connection's arena).
func (c *Conn) Write(b []byte) {
	if len(b) == 0 || c.closed {
		return
	}
	n := len(c.segs)
	if n > 0 && c.segs[n-1].ref == nil && c.segs[n-1].a1 == len(c.arena) {
		c.arena = append(c.arena, b...)
		c.segs[n-1].a1 = len(c.arena)
	} else {
		a0 := len(c.arena)
		c.arena = append(c.arena, b...)
		c.segs = append(c.segs, seg{a0: a0, a1: len(c.arena)})
	}
	c.queued(len(b))
}

// WriteString queues a string.
func (c *Conn) WriteString(s string) {
	if len(s) == 0 || c.closed {
		return
	}
	c.arena = append(c.arena, s...)
	n := len(c.segs)
	if n > 0 && c.segs[n-1].ref == nil && c.segs[n-1].a1 == len(c.arena)-len(s) {
		c.segs[n-1].a1 = len(c.arena)
	} else {
		c.segs = append(c.segs, seg{a0: len(c.arena) - len(s), a1: len(c.arena)})
	}
	c.queued(len(s))
}

// WriteRef queues b without copying; b must stay unchanged until sent.
func (c *Conn) WriteRef(b []byte) {
	if len(b) == 0 || c.closed {
		return
	}
	c.segs = append(c.segs, seg{ref: b})
	c.queued(len(b))
}

func (c *Conn) queued(n int) {
	if c.nOut == 0 {
		c.l.pending++
	}
	c.nOut += n
	if !c.dirty {
		c.dirty = true
		c.l.dirty = append(c.l.dirty, c)
	}
}

// Close closes the connection (pending output and expectations are dropped).
func (c *Conn) Close() {
	if c.closed {
		return
	}
	c.closed = true
	if c.nOut > 0 {
		c.l.pending--
	}
	c.nOut = 0
	c.segs, c.arena, c.in, c.exp = nil, nil, nil, nil
	c.l.conns[c.fd] = nil
	c.l.open--
	unix.Close(c.fd)
}

func (c *Conn) fail(err error) {
	c.l.Fail(fmt.Errorf("conn %d: %w", c.Idx, err))
}

func (l *Loop) flush() {
	for _, c := range l.dirty {
		c.dirty = false
		if !c.closed && c.connected {
			c.flush()
		}
	}
	l.dirty = l.dirty[:0]
}

func (c *Conn) flush() {
	for c.nOut > 0 {
		iov := c.l.iov[:0]
		for _, s := range c.segs {
			if len(iov) == 64 {
				break
			}
			if s.ref != nil {
				iov = append(iov, s.ref)
			} else {
				iov = append(iov, c.arena[s.a0:s.a1])
			}
		}
		c.l.iov = iov
		n, err := unix.Writev(c.fd, iov)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) {
				break
			}
			if errors.Is(err, unix.EINTR) {
				continue
			}
			c.fail(fmt.Errorf("write: %w", err))
			return
		}
		c.advance(n)
	}
	want := c.nOut > 0
	if want != c.outArmed {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(c.fd)}
		if want {
			ev.Events |= unix.EPOLLOUT
		}
		if err := unix.EpollCtl(c.l.epfd, unix.EPOLL_CTL_MOD, c.fd, &ev); err != nil {
			c.fail(fmt.Errorf("epoll_ctl mod: %w", err))
			return
		}
		c.outArmed = want
	}
}

func (c *Conn) advance(n int) {
	c.nOut -= n
	i := 0
	for n > 0 && i < len(c.segs) {
		s := &c.segs[i]
		var l int
		if s.ref != nil {
			l = len(s.ref)
		} else {
			l = s.a1 - s.a0
		}
		if n >= l {
			n -= l
			i++
			continue
		}
		if s.ref != nil {
			s.ref = s.ref[n:]
		} else {
			s.a0 += n
		}
		n = 0
	}
	if c.nOut == 0 {
		c.l.pending--
		for j := range c.segs {
			c.segs[j].ref = nil
		}
		c.segs = c.segs[:0]
		c.arena = c.arena[:0]
		if cap(c.arena) > 64<<10 {
			c.arena = nil
		}
		return
	}
	if i > 0 {
		k := copy(c.segs, c.segs[i:])
		for j := k; j < len(c.segs); j++ {
			c.segs[j].ref = nil
		}
		c.segs = c.segs[:k]
	}
	c.compactArena()
}

// compactArena drops already-sent arena bytes once they dominate, so a
// connection whose output never fully drains cannot grow it without bound.
func (c *Conn) compactArena() {
	lo := len(c.arena)
	for _, s := range c.segs {
		if s.ref == nil {
			lo = s.a0
			break
		}
	}
	if lo < 64<<10 || lo < len(c.arena)/2 {
		return
	}
	n := copy(c.arena, c.arena[lo:])
	c.arena = c.arena[:n]
	for j := range c.segs {
		if c.segs[j].ref == nil {
			c.segs[j].a0 -= lo
			c.segs[j].a1 -= lo
		}
	}
}

// Run processes events until done() reports true (checked after every
// batch), an error is recorded, or the loop clock passes deadline.
func (l *Loop) Run(done func() bool, deadline int64, what string) error {
	l.now = l.Now()
	for {
		l.flush()
		if l.err != nil {
			return l.err
		}
		if done() {
			return nil
		}
		if l.now > deadline {
			return fmt.Errorf("timed out waiting for %s", what)
		}
		n, err := unix.EpollWait(l.epfd, l.events, tickInterval)
		l.now = l.Now()
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("epoll_wait: %w", err)
		}
		for i := 0; i < n; i++ {
			ev := l.events[i]
			c := l.conns[ev.Fd]
			if c == nil || c.closed {
				continue
			}
			if !c.connected {
				c.finishConnect()
				continue
			}
			if ev.Events&(unix.EPOLLIN|unix.EPOLLERR|unix.EPOLLHUP|unix.EPOLLRDHUP) != 0 {
				c.readable()
			}
			if ev.Events&unix.EPOLLOUT != 0 && !c.closed && c.nOut > 0 && !c.dirty {
				c.dirty = true
				l.dirty = append(l.dirty, c)
			}
		}
		if l.OnTick != nil {
			l.OnTick()
		}
	}
}

func (c *Conn) finishConnect() {
	soerr, err := unix.GetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		c.fail(fmt.Errorf("getsockopt SO_ERROR: %w", err))
		return
	}
	if soerr != 0 {
		c.fail(fmt.Errorf("connect: %w", unix.Errno(soerr)))
		return
	}
	c.connected = true
	if err := c.h.Connected(c); err != nil {
		c.fail(err)
		return
	}
	if !c.closed {
		if c.nOut > 0 && !c.dirty {
			c.dirty = true
			c.l.dirty = append(c.l.dirty, c)
		} else if c.nOut == 0 {
			// drop EPOLLOUT interest
			c.dirty = true
			c.l.dirty = append(c.l.dirty, c)
		}
	}
}

func (c *Conn) readable() {
	var data []byte
	// Read straight into the connection's own buffer while it holds a
	// partial reply or is a big one kept from earlier large bodies;
	// otherwise into the loop's shared buffer (no per-connection memory for
	// the common small replies).
	owned := len(c.in) > 0 || cap(c.in) >= 64<<10
	if owned {
		if c.need > cap(c.in) {
			nb := make([]byte, len(c.in), c.need)
			copy(nb, c.in)
			c.in = nb
		} else if len(c.in) == cap(c.in) {
			nb := make([]byte, len(c.in), 2*cap(c.in))
			copy(nb, c.in)
			c.in = nb
		}
		n, err := unix.Read(c.fd, c.in[len(c.in):cap(c.in)])
		if !c.readResult(n, err) {
			return
		}
		c.in = c.in[:len(c.in)+n]
		data = c.in
	} else {
		n, err := unix.Read(c.fd, c.l.shared)
		if !c.readResult(n, err) {
			return
		}
		data = c.l.shared[:n]
	}
	used := c.process(data)
	if c.closed || c.l.err != nil {
		return
	}
	rest := data[used:]
	switch {
	case len(rest) == 0:
		if owned {
			c.in = c.in[:0]
		}
	case owned:
		if used > 0 {
			c.in = c.in[:copy(c.in, rest)]
		}
	default:
		size := max(c.need, 4096, len(rest))
		if cap(c.in) < size {
			c.in = make([]byte, 0, size)
		}
		c.in = append(c.in[:0], rest...)
	}
}

func (c *Conn) readResult(n int, err error) bool {
	if err != nil {
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			return false
		}
		c.fail(fmt.Errorf("read: %w (%d commands in flight)", err, c.InFlight()))
		return false
	}
	if n == 0 {
		c.fail(fmt.Errorf("server closed the connection (%d commands in flight)", c.InFlight()))
		return false
	}
	return true
}

func (c *Conn) process(data []byte) int {
	used := 0
	var r Reply
	for used < len(data) {
		n, need, err := ParseReply(data[used:], &r)
		if err != nil {
			c.fail(fmt.Errorf("protocol error: %w", err))
			return used
		}
		if n == 0 {
			c.need = need
			return used
		}
		used += n
		c.need = 0
		if c.eh >= len(c.exp) {
			c.fail(fmt.Errorf("protocol error: unsolicited reply %q", clip(r.Line)))
			return used
		}
		e := c.exp[c.eh]
		c.eh++
		if c.eh == len(c.exp) {
			c.exp = c.exp[:0]
			c.eh = 0
		}
		if err := c.h.Reply(c, e, &r); err != nil {
			c.fail(err)
			return used
		}
		if c.closed || c.l.err != nil {
			return used
		}
	}
	return used
}

// unexpected builds the error for a reply of the wrong kind.
func unexpected(what string, r *Reply) error {
	return fmt.Errorf("protocol error: %s: got %q", what, clip(r.Line))
}
