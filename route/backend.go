package route

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// backend is a session's connection to the leader of one group. It holds,
// at that leader, the session's reservations in the group, and a used tube
// and watch list of its own, which the router sets before each command
// that reads them (ensureUse, ensureWatch).
type backend struct {
	g     int
	addr  string
	c     net.Conn
	rd    *bufio.Reader
	wr    *bufio.Writer
	use   string
	watch []string
	reply []byte
	// held are the jobs reserved through the backend that the client has
	// not deleted, released or buried through it since (one whose TTR ran
	// out stays until then).
	held map[uint64]struct{}
	// probe: the session waited for its client since b last ran a
	// command, so b's leader may have closed it meanwhile (alive).
	probe bool
	// fd is b's socket (-1: unknown), which the parking watches while the
	// session's reserve waits at b, suspended (suspend).
	fd int
}

// The internal commands: cancelWait ends a reserve that waits (answered
// TIMED_OUT, the line itself unanswered), or, once the reserve was
// answered, is answered NOT_WAITING; unreserve puts a job the backend
// reserved back, ready, with no release counted. syncLine follows a
// cancel, so that its answer, USING, marks where the cancel's answers end.
var (
	cancelWait = []byte("beanpole-cancel-wait\r\n")
	syncLine   = []byte("list-tube-used\r\n")
)

var (
	errNoLeader    = errors.New("route: the group has no leader")
	errBackendLost = errors.New("route: a connection to a group's leader was lost")
	// errShortOfFDs: a connection to a group would take a descriptor
	// kept for raft (Config.ReserveFDs).
	errShortOfFDs = errors.New("route: near the open-file limit: no connection to a group, to keep descriptors for raft")
)

// backend is the session's backend of group g, opened once the group has
// a leader (within LeaderWait).
func (s *session) backend(g int) (*backend, error) {
	if b := s.b[g]; b != nil {
		switch addr := s.r.leader(g); {
		case addr == b.addr || addr == "":
			// The leader the session knows, or no other yet (an election).
			// A backend its leader closed while the session waited for its
			// client (the leader died, or handed its lead over) took
			// nothing the session sent since: one that holds none of the
			// session's reservations is replaced unseen, and the command
			// goes to the group's next leader.
			if !b.probe || len(b.held) > 0 || b.alive() {
				b.probe = false
				return b, nil
			}
			s.drop(b)
		case len(b.held) > 0:
			// Another node leads the group: the reservations the session
			// held there are ready again at it (docs/cluster.md), so the
			// client's connection ends, as a single server's death ends
			// it.
			return nil, fmt.Errorf("%w: group %d moved to %s", errBackendLost, g, addr)
		default:
			// A backend to a node that no longer leads the group is of no
			// use; one that holds none of the session's reservations is
			// replaced without the client noticing (a lead handed over to
			// spread the leaders, say). Its replies still to come are read
			// first: one may reserve, and the reservation is void.
			if !s.settle() || len(b.held) > 0 {
				return nil, errBackendLost
			}
			s.drop(b)
		}
	}
	deadline := time.Now().Add(s.r.cfg.LeaderWait)
	for {
		// Not back to a leader that closed the session's backend: it is
		// going, and the router has not heard of the next yet.
		if at := s.r.leaders[g].Load(); at != nil && at.addr != "" && at != s.gone[g] {
			addr := at.addr
			c, err := s.r.cfg.Dial(addr)
			if err == nil && s.r.short(socket(c)) {
				// The descriptors left are raft's: the client's
				// connection is closed, as a new client's would be.
				return nil, fmt.Errorf("%w: group %d", errShortOfFDs, g)
			}
			if err == nil {
				b := &backend{g: g, addr: addr, c: c, use: "default", watch: []string{"default"}, held: map[uint64]struct{}{}, fd: -1}
				if fd, ok := descriptor(socket(c)); ok {
					b.fd = fd
				}
				b.bufs()
				s.b[g] = b
				s.r.open[g].add(b)
				return b, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: group %d", errNoLeader, g)
		}
		// An election is on, or its winner has not said where it
		// serves yet, or the node that led the group is gone and the
		// router has not heard of its successor yet.
		time.Sleep(20 * time.Millisecond)
	}
}

// drop closes b and forgets it: the session's next command for its group
// opens another, to another leader.
func (s *session) drop(b *backend) {
	if s.gone == nil {
		s.gone = map[int]*leaderAt{}
	}
	if at := s.r.leaders[b.g].Load(); at != nil && at.addr == b.addr {
		s.gone[b.g] = at
	} else {
		delete(s.gone, b.g)
	}
	b.c.Close()
	s.r.open[b.g].remove(b)
	if s.b[b.g] == b {
		delete(s.b, b.g)
	}
}

// alive reports whether b's leader had not closed it when asked: its
// socket is peeked at (MSG_PEEK, not waiting), which consumes nothing. A
// leader closes a router's connection when it dies or loses its lead. Only
// the session closes b's socket, so b.fd is b's while b is in use.
func (b *backend) alive() bool {
	b.probe = false
	if b.fd < 0 || b.rd != nil && b.rd.Buffered() > 0 {
		return true
	}
	var one [1]byte
	for {
		n, _, err := syscall.Recvfrom(b.fd, one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err == syscall.EINTR {
			continue
		}
		// Bytes waiting (a TLS session ticket, say) leave it to the
		// reader; no bytes at all is the leader's close.
		return n > 0 || err == syscall.EAGAIN
	}
}

// A backend's buffers are the session's only while it runs commands: a
// session waiting for its client lends them back (rest), and an idle
// client costs no buffers of its backends.
var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, backendBuf) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, backendBuf) }}
)

// backendBuf is the size of a backend's read and write buffers.
const backendBuf = 4 << 10

// bufs gives b buffers, after rest took them.
func (b *backend) bufs() {
	if b.rd == nil {
		b.rd, b.wr = readers.Get().(*bufio.Reader), writers.Get().(*bufio.Writer)
		b.rd.Reset(b.c)
		b.wr.Reset(b.c)
	}
}

// socket is the connection under c's TLS, if it has TLS.
func socket(c net.Conn) net.Conn {
	if tc, ok := c.(*tls.Conn); ok {
		return tc.NetConn()
	}
	return c
}

// rest lends b's buffers back while nothing is in them, and lets a large
// reply's buffer go: the session waits for its client.
func (b *backend) rest() {
	b.probe = true
	b.lend()
}

// lend lends b's buffers back while nothing is in them, and lets a large
// reply's buffer go.
func (b *backend) lend() {
	if b.rd != nil && b.rd.Buffered() == 0 && b.wr.Buffered() == 0 {
		b.rd.Reset(nil)
		b.wr.Reset(nil)
		readers.Put(b.rd)
		writers.Put(b.wr)
		b.rd, b.wr = nil, nil
	}
	if cap(b.reply) > backendBuf {
		b.reply = nil
	}
}

// send writes parts, then flushes them.
func (b *backend) send(parts ...[]byte) error {
	for _, p := range parts {
		if _, err := b.wr.Write(p); err != nil {
			return err
		}
	}
	return b.wr.Flush()
}

// readReply reads one reply, its body included; it is valid until the
// next read.
func (b *backend) readReply() ([]byte, error) {
	line, err := b.rd.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	b.reply = append(b.reply[:0], line...)
	if n, ok := bodyLen(line); ok {
		start := len(b.reply)
		b.reply = slices.Grow(b.reply, n+2)[:start+n+2]
		if _, err := io.ReadFull(b.rd, b.reply[start:]); err != nil {
			return nil, err
		}
	}
	return b.reply, nil
}

// roundTrip sends a command and reads its reply.
func (b *backend) roundTrip(parts ...[]byte) ([]byte, error) {
	if err := b.send(parts...); err != nil {
		return nil, err
	}
	return b.readReply()
}

// expect sends a command whose reply must begin with want.
func (b *backend) expect(want string, parts ...[]byte) error {
	rep, err := b.roundTrip(parts...)
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(rep, []byte(want)) {
		return fmt.Errorf("route: group %d answered %q, want %s", b.g, bytes.TrimSpace(rep), want)
	}
	return nil
}

// endWait settles a reserve that was sent and whose reply got (it is read
// elsewhere, then delivered on got; nil: b reads it) is no longer wanted:
// the cancel ends it if it still waits. It returns the reserve's reply:
// TIMED_OUT if the cancel ended it, else what it answered before the
// cancel came.
func (b *backend) endWait(got <-chan waited) ([]byte, error) {
	if err := b.send(cancelWait, syncLine); err != nil {
		return nil, err
	}
	var w waited
	if got != nil {
		w = <-got
	} else {
		rep, err := b.readReply()
		w = waited{reply: bytes.Clone(rep), err: err}
	}
	if w.err != nil {
		return nil, w.err
	}
	rep, err := b.readReply()
	if err != nil {
		return nil, err
	}
	if bytes.HasPrefix(rep, []byte("NOT_WAITING")) {
		if rep, err = b.readReply(); err != nil {
			return nil, err
		}
	}
	if !bytes.HasPrefix(rep, []byte("USING ")) {
		return nil, fmt.Errorf("route: group %d answered %q to a cancelled wait", b.g, bytes.TrimSpace(rep))
	}
	return w.reply, nil
}

// replySoon reports whether a reply comes from b within watchAfter (or
// its connection fails): its first byte is peeked at, with a deadline.
func (b *backend) replySoon() bool {
	if b.rd.Buffered() > 0 {
		return true
	}
	_ = b.c.SetReadDeadline(time.Now().Add(watchAfter))
	_, err := b.rd.Peek(1)
	_ = b.c.SetReadDeadline(time.Time{})
	return err == nil || !isTimeout(err)
}

// waited is the reply of a reserve that may wait, read on its own
// goroutine.
type waited struct {
	reply []byte // a copy
	err   error
}

// await reads the reply of the command just sent on its own goroutine.
func (b *backend) await() <-chan waited {
	got := make(chan waited, 1)
	go func() {
		rep, err := b.readReply()
		got <- waited{reply: bytes.Clone(rep), err: err}
	}()
	return got
}

// bodyLen is the length of the body that follows a reply line, if one
// does: RESERVED <id> <bytes>, FOUND <id> <bytes>, OK <bytes>.
func bodyLen(line []byte) (int, bool) {
	line = bytes.TrimSuffix(line, []byte("\r\n"))
	var rest []byte
	switch {
	case bytes.HasPrefix(line, []byte("RESERVED ")):
		rest = line[len("RESERVED "):]
	case bytes.HasPrefix(line, []byte("FOUND ")):
		rest = line[len("FOUND "):]
	case bytes.HasPrefix(line, []byte("OK ")):
		n, err := strconv.Atoi(string(line[len("OK "):]))
		return n, err == nil && n >= 0
	default:
		return 0, false
	}
	_, size, ok := bytes.Cut(rest, []byte(" "))
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(string(size))
	return n, err == nil && n >= 0
}

// note keeps held up to date with a reply: a job reserved through b, or
// one the client let go of.
func (b *backend) note(rep []byte, id uint64) {
	switch {
	case bytes.HasPrefix(rep, []byte("RESERVED ")):
		b.held[replyID(rep)] = struct{}{}
	case bytes.HasPrefix(rep, []byte("DELETED")), bytes.HasPrefix(rep, []byte("RELEASED")), bytes.HasPrefix(rep, []byte("BURIED")):
		delete(b.held, id)
	}
}

// replyID is the job id of a RESERVED or FOUND reply.
func replyID(rep []byte) uint64 {
	_, rest, _ := bytes.Cut(rep, []byte(" "))
	id, _, _ := bytes.Cut(rest, []byte(" "))
	n, _ := strconv.ParseUint(string(id), 10, 64)
	return n
}
