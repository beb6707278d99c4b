package route

import (
	"bytes"
	"errors"
	"net"
	"slices"
	"time"

	"github.com/beanpole/beanpole/codec"
)

// flushAt is how many bytes of replies a session gathers before it writes
// them, when its client sends commands faster than they are answered.
const flushAt = 64 << 10

// session is one client's connection: what it uses and watches, and its
// backends. It runs on one goroutine, which reads the client's input a
// chunk at a time, so a client that sends and does not read is held back
// by TCP; while a reserve waits, a second goroutine reads the client
// (watchInput), so that a hang-up is seen.
type session struct {
	r   *Router
	c   net.Conn
	buf []byte // input not yet run
	dec codec.Decoder
	// putTo is the backend a put's body goes to as it arrives, from its
	// line on: the group's engine charges a body under way to its memory
	// ceiling, and the router holds no more of it than a write buffer.
	putTo *backend
	out   []byte
	use   string
	watch []string
	b     map[int]*backend
	// gone[g] is the leader the session's last backend of group g went
	// to, while the router still knows it as the group's (drop): a leader
	// that lost its lead, died or is stopping.
	gone  map[int]*leaderAt
	ended bool // the client's input ended
	// pend are the replies still to come, in the client's order: of
	// commands sent to backends and not answered yet, or ones the router
	// gave itself behind those.
	pend []pending
	// more: the client sent more behind the command being run.
	more    bool
	scratch []byte
	soon    *time.Timer // awaitSoon's
	// fd is the client's socket, if the session may be parked (-1: not);
	// deadline: a read deadline is set on the client's connection, to park
	// the session.
	fd       int
	deadline bool
	// fds are the sockets a suspended reserve waits on (suspend).
	fds []int
	// rsv is the reserve under way.
	rsv reserving
	// lost is the backend whose failure ended the last settle that
	// failed, if one did.
	lost *backend
	// lastTake is the group a reserve over several groups last took a
	// job from (0: none yet).
	lastTake int
	// heldIn is what the session holds against the router's budget of
	// its client's input while a reserve waits; heldOut of a long reply
	// its client has not taken.
	heldIn, heldOut int64
}

// pending is one reply still to come to a client.
type pending struct {
	b     *backend // nil: reply is the router's own
	reply []byte
	// own: the backend's reply is to a command the router sent for
	// itself (to set a backend's used tube or watch list): it must begin
	// with own, and the client does not see it.
	own string
	id  uint64 // the job the command names, for held
	// wait: the command is a reserve, which may wait; its client is read
	// meanwhile, as while any reserve waits (session.waitGo).
	wait bool
}

// window bounds the commands a session has on their way to backends
// before it reads their replies.
const window = 64

func newSession(r *Router, c net.Conn) *session {
	s := &session{r: r, c: c, fd: -1,
		dec: codec.Decoder{MaxJobSize: r.cfg.MaxJobSize}, use: "default", watch: []string{"default"}, b: map[int]*backend{}}
	if r.park != nil {
		if fd, ok := descriptor(socket(c)); ok {
			s.fd = fd
		}
	}
	return s
}

// readChunk is the most a session reads at once: a session that waits for
// its client holds one such buffer, until it is parked.
const readChunk = 4 << 10

// run serves the client until it quits, hangs up, or a backend fails
// (false: end the session), or until its session is parked (the client
// is idle) or its reserve suspended (true): the parking starts run again
// on a goroutine of its own when a socket the session waits on has input.
func (s *session) run() bool {
	if s.rsv.on && !s.resume() { // woken
		return false
	}
	for {
		if s.rsv.on {
			// The replies before the reserve go out, as on one server.
			if !s.flush() {
				return false
			}
			if i := s.rsv.buffered(); i >= 0 {
				s.rsv.woke = i
				if !s.resume() {
					return false
				}
				continue
			}
			return s.suspend()
		}
		if !s.runBuffered() || !s.flush() || s.ended {
			return false
		}
		if s.rsv.on {
			continue
		}
		s.rest()
		// A client with no command under way that sends nothing for
		// parkAfter is parked.
		idle := s.fd >= 0 && len(s.buf) == 0 && s.dec.Idle() && s.putTo == nil
		if idle || s.deadline {
			var at time.Time
			if idle {
				at = time.Now().Add(parkAfter)
			}
			_ = s.c.SetReadDeadline(at)
			s.deadline = idle
		}
		s.buf = slices.Grow(s.buf, readChunk)
		n, err := s.c.Read(s.buf[len(s.buf) : len(s.buf)+readChunk])
		s.buf = s.buf[:len(s.buf)+n]
		if idle && n == 0 && isTimeout(err) {
			_ = s.c.SetReadDeadline(time.Time{})
			s.deadline = false
			s.buf, s.out, s.scratch = nil, nil, nil
			s.fds = append(s.fds[:0], s.fd)
			if s.r.park.park(s, s.fds) {
				return true
			}
			continue
		}
		for _, b := range s.b {
			b.bufs()
		}
		if err != nil {
			if n == 0 {
				return false
			}
			s.ended = true // what came with the end is run first
		}
	}
}

// end closes the session's backends and its client's connection, and
// gives back what it held of the router's budget.
func (s *session) end() {
	s.hold(&s.heldIn, 0)
	s.hold(&s.heldOut, 0)
	for _, b := range s.b {
		s.drop(b)
	}
	s.r.untrack(s.c)
}

// rest lets go of what the session holds for the commands it runs while
// it waits for its client: its backends' buffers, and a large reply's.
func (s *session) rest() {
	for _, b := range s.b {
		b.rest()
	}
	if cap(s.out) > readChunk {
		s.out = nil
	}
}

// watchInput reads the client on a goroutine of its own while a reserve
// waits: its input comes on in, which is closed once the client's input
// ends. stop ends the reading (a deadline in the past wakes it), takes
// what it read meanwhile, and reports false if that is more than a
// session may hold (waitCap), as take does; once the client's input has
// ended, the session has ended.
func (s *session) watchInput() (in <-chan []byte, stop func() bool) {
	if s.deadline {
		_ = s.c.SetReadDeadline(time.Time{})
		s.deadline = false
	}
	ch := make(chan []byte, 1)
	var readErr error
	go func() {
		defer close(ch)
		for {
			chunk := make([]byte, readChunk)
			n, err := s.c.Read(chunk)
			if n > 0 {
				ch <- chunk[:n]
			}
			if err != nil {
				readErr = err
				return
			}
		}
	}()
	return ch, func() bool {
		_ = s.c.SetReadDeadline(time.Unix(1, 0))
		ok := true
		for p := range ch {
			ok = s.take(p) && ok
		}
		_ = s.c.SetReadDeadline(time.Time{})
		if !isTimeout(readErr) {
			s.ended = true
		}
		return ok
	}
}

// isTimeout: err is a read that ran into its deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// take adds a chunk of the client's input that watchInput read to what is
// buffered. A session holds at most waitCap of input, as one server holds
// of a connection whose reserve waits: past it, take reports false and the
// client's connection is closed.
func (s *session) take(p []byte) bool {
	s.buf = append(s.buf, p...)
	return len(s.buf) <= s.r.waitCap && s.hold(&s.heldIn, len(s.buf))
}

// hold has *held, one of the session's charges against the router's
// budget, be n bytes; false, leaving it as it was, if the budget cannot
// take the growth.
func (s *session) hold(held *int64, n int) bool {
	d := int64(n) - *held
	if d > 0 && !s.r.charge(d) {
		return false
	}
	if d < 0 {
		s.r.held.Add(d)
	}
	*held = int64(n)
	return true
}

func (s *session) flush() bool {
	if len(s.out) == 0 {
		return true
	}
	_, err := s.c.Write(s.out)
	s.out = s.out[:0]
	s.hold(&s.heldOut, 0)
	return err == nil
}

// runBuffered runs every command buffered whole; false ends the session.
// What it holds is no longer a waiting client's input.
func (s *session) runBuffered() bool {
	s.hold(&s.heldIn, 0)
	off := 0
	defer func() { s.buf = s.buf[:copy(s.buf, s.buf[off:])] }()
	for {
		var f codec.Frame
		s.dec.Next(s.buf[off:], &f)
		off += f.N
		switch f.Event {
		case codec.More:
			// The replies the client has whole go out before those still
			// to come are waited for (a job put back behind a reserve's
			// reply, say).
			return s.flush() && s.settle()
		case codec.Line:
			if !s.dec.Idle() && !s.dec.Skipping() { // a put whose body follows
				if !s.putLine(s.buf[off-f.N : off]) {
					return false
				}
				continue
			}
			s.more = off < len(s.buf)
			if !s.command(f.Status, &f.Cmd, s.buf[off-f.N:off]) {
				return false
			}
			if s.rsv.on {
				return true // the reserve waits: what follows it waits too
			}
		case codec.BodyPart:
			if _, err := s.putTo.wr.Write(f.Body); err != nil {
				return false
			}
		case codec.Body, codec.ExpectedCRLF:
			// The body's end, as the client sent it: the group answers
			// INSERTED or EXPECTED_CRLF, as a server does.
			b := s.putTo
			s.putTo = nil
			if !s.send(b, 0, f.Body) {
				return false
			}
		case codec.JobTooBig:
			s.reply(codec.RepJobTooBig)
		case codec.Dropped:
			s.reply(codec.RepOutOfMemory)
		case codec.LineTooLong:
			s.reply(codec.RepBadFormat)
		}
		if len(s.out) >= flushAt && !s.flush() {
			return false
		}
	}
}

// putLine sends the line of a put whose body follows to its group, the
// group of the tube the session uses.
func (s *session) putLine(line []byte) bool {
	b, err := s.backend(GroupOfTube([]byte(s.use), s.r.cfg.Groups))
	if err != nil {
		return false
	}
	s.useAt(b, s.use)
	if _, err := b.wr.Write(line); err != nil {
		return false
	}
	s.putTo = b
	return true
}

// command runs one command line (not a put with a body); line is it as
// the client sent it, CRLF included.
func (s *session) command(st codec.Status, cmd *codec.Command, line []byte) bool {
	// beanpole's own commands are the router's to send: to a client they
	// are unknown, as to upstream, whatever follows them on the line.
	if st == codec.Unknown || cmd.Op.Internal() {
		s.reply(codec.RepUnknownCommand)
		return true
	}
	switch st {
	case codec.BadFormat, codec.PauseTubeBadName:
		s.reply(codec.RepBadFormat)
		return true
	}
	n := s.r.cfg.Groups
	switch cmd.Op {
	case codec.OpPut:
		if !s.dec.Skipping() { // trailing garbage; else JOB_TOO_BIG comes
			s.reply(codec.RepBadFormat)
		}
	case codec.OpUse:
		// At once, as on one server: the tube exists from here on.
		s.use = string(cmd.Tube)
		b, err := s.backend(GroupOfTube(cmd.Tube, n))
		if err != nil {
			return false
		}
		s.useAt(b, s.use)
		s.scratch = codec.AppendUsing(s.scratch[:0], cmd.Tube)
		s.reply(s.scratch)
	case codec.OpWatch:
		t := string(cmd.Tube)
		b, err := s.backend(GroupOfTube(cmd.Tube, n))
		if err != nil {
			return false
		}
		s.watchAt(b, t)
		if !slices.Contains(s.watch, t) {
			s.watch = append(s.watch, t)
		}
		s.scratch = codec.AppendWatching(s.scratch[:0], uint64(len(s.watch)))
		s.reply(s.scratch)
	case codec.OpIgnore:
		t := string(cmd.Tube)
		if i := slices.Index(s.watch, t); i >= 0 {
			if len(s.watch) == 1 {
				s.reply(codec.RepNotIgnored)
				return true
			}
			s.watch = slices.Delete(s.watch, i, i+1)
		}
		s.scratch = codec.AppendWatching(s.scratch[:0], uint64(len(s.watch)))
		s.reply(s.scratch)
	case codec.OpListTubeUsed:
		s.scratch = codec.AppendUsing(s.scratch[:0], []byte(s.use))
		s.reply(s.scratch)
	case codec.OpListTubesWatched:
		names := make([][]byte, len(s.watch))
		for i, t := range s.watch {
			names[i] = []byte(t)
		}
		s.longReply(codec.AppendTubeList(nil, names))
	case codec.OpQuit:
		// What came before it is answered.
		s.settle()
		s.flush()
		return false
	case codec.OpReserve, codec.OpReserveWithTimeout:
		return s.reserve(cmd, line)
	case codec.OpKick:
		return s.forward(GroupOfTube([]byte(s.use), n), true, 0, true, line)
	case codec.OpPeekReady, codec.OpPeekDelayed, codec.OpPeekBuried:
		return s.read(GroupOfTube([]byte(s.use), n), true, 0, line)
	case codec.OpPauseTube:
		return s.forward(GroupOfTube(cmd.Tube, n), false, 0, true, line)
	case codec.OpStatsTube:
		return s.read(GroupOfTube(cmd.Tube, n), false, 0, line)
	case codec.OpDelete, codec.OpRelease, codec.OpBury, codec.OpTouch, codec.OpKickJob:
		return s.forward(GroupOfID(cmd.ID, n), false, cmd.ID, true, line)
	case codec.OpReserveJob:
		return s.forward(GroupOfID(cmd.ID, n), false, cmd.ID, false, line)
	case codec.OpPeek, codec.OpStatsJob:
		return s.read(GroupOfID(cmd.ID, n), false, cmd.ID, line)
	case codec.OpListTubes:
		return s.listTubes()
	case codec.OpStats:
		return s.stats()
	}
	return true
}

// reply gives the client a reply of the router's own, behind those still
// to come.
func (s *session) reply(rep []byte) {
	if len(s.pend) == 0 {
		s.out = append(s.out, rep...)
		return
	}
	s.pend = append(s.pend, pending{reply: bytes.Clone(rep)})
}

// settle sends what the backends were given and reads every reply still to
// come, in order.
func (s *session) settle() bool {
	if len(s.pend) == 0 {
		return true
	}
	for _, b := range s.b {
		if b.wr.Buffered() > 0 && b.wr.Flush() != nil {
			s.lost = b
			return false
		}
	}
	for i := range s.pend {
		p := &s.pend[i]
		if p.b == nil {
			s.out = append(s.out, p.reply...)
			continue
		}
		var rep []byte
		if p.wait && p.b.rd.Buffered() == 0 {
			// A reserve pipelined behind others waits here, within them:
			// its session keeps its goroutine.
			w, out := s.waitGo(p.b)
			if out != answered {
				return false
			}
			rep = w
		} else {
			var err error
			if rep, err = p.b.readReply(); err != nil {
				s.lost = p.b
				return false
			}
		}
		if p.own != "" {
			if !bytes.HasPrefix(rep, []byte(p.own)) {
				s.r.cfg.Log.Warn().Int("group", p.b.g).Bytes("reply", bytes.TrimSpace(rep)).Str("want", p.own).
					Msg("route: a group refused what the router asked of it for a session")
				return false
			}
			continue
		}
		p.b.note(rep, p.id)
		s.out = append(s.out, rep...)
	}
	clear(s.pend)
	s.pend = s.pend[:0]
	return true
}

// send queues a command for b, whose reply the client gets in its turn.
func (s *session) send(b *backend, id uint64, parts ...[]byte) bool {
	for _, p := range parts {
		if _, err := b.wr.Write(p); err != nil {
			return false
		}
	}
	s.pend = append(s.pend, pending{b: b, id: id})
	return len(s.pend) < window || s.settle()
}

// own queues a command the router sends b for itself.
func (s *session) own(b *backend, want string, line string) {
	_, _ = b.wr.WriteString(line)
	s.pend = append(s.pend, pending{b: b, own: want})
}

// useAt has b use tube.
func (s *session) useAt(b *backend, tube string) {
	if b.use != tube {
		s.own(b, "USING ", "use "+tube+"\r\n")
		b.use = tube
	}
}

// watchAt has b watch tube too.
func (s *session) watchAt(b *backend, tube string) {
	if !slices.Contains(b.watch, tube) {
		s.own(b, "WATCHING ", "watch "+tube+"\r\n")
		b.watch = append(b.watch, tube)
	}
}

// watchExactly has b watch tubes (not empty) and no other: the new ones
// first, so that its list is never left empty.
func (s *session) watchExactly(b *backend, tubes []string) {
	for _, t := range tubes {
		s.watchAt(b, t)
	}
	for _, t := range slices.Clone(b.watch) {
		if !slices.Contains(tubes, t) {
			s.own(b, "WATCHING ", "ignore "+t+"\r\n")
			b.watch = slices.DeleteFunc(b.watch, func(w string) bool { return w == t })
		}
	}
}
