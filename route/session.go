package route

import (
	"net"
	"slices"

	"github.com/beanpole/beanpole/codec"
)

// flushAt is how many bytes of replies a session gathers before it writes
// them, when its client sends commands faster than they are answered.
const flushAt = 64 << 10

// session is one client's connection: what it uses and watches, and its
// backends. Its input is read on a goroutine of its own (read), so that a
// hang-up is seen while a reserve waits; the session takes the input a
// chunk at a time, so a client that sends and does not read is held back
// by TCP.
type session struct {
	r     *Router
	c     net.Conn
	in    chan []byte // closed at the client's end of input
	done  chan struct{}
	buf   []byte // input not yet run
	dec   codec.Decoder
	put   []byte // the put line and its body so far
	out   []byte
	use   string
	watch []string
	b     map[int]*backend
	ended bool // the client's input ended
}

func newSession(r *Router, c net.Conn) *session {
	return &session{r: r, c: c, in: make(chan []byte, 1), done: make(chan struct{}),
		dec: codec.Decoder{MaxJobSize: r.cfg.MaxJobSize}, use: "default", watch: []string{"default"}, b: map[int]*backend{}}
}

// readChunk is the most a session reads at once: an idle client's
// session holds one such buffer.
const readChunk = 4 << 10

func (s *session) read() {
	defer close(s.in)
	scratch := make([]byte, readChunk)
	for {
		n, err := s.c.Read(scratch)
		if n > 0 {
			select {
			case s.in <- append([]byte(nil), scratch[:n]...):
			case <-s.done:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// run serves the client until it quits, hangs up, or a backend fails.
func (s *session) run() {
	defer func() {
		close(s.done)
		for _, b := range s.b {
			b.c.Close()
		}
	}()
	go s.read()
	for {
		if !s.runBuffered() || !s.flush() {
			return
		}
		if s.ended {
			return
		}
		p, ok := <-s.in
		if !ok {
			return
		}
		s.buf = append(s.buf, p...)
	}
}

func (s *session) flush() bool {
	if len(s.out) == 0 {
		return true
	}
	_, err := s.c.Write(s.out)
	s.out = s.out[:0]
	return err == nil
}

// runBuffered runs every command buffered whole; false ends the session.
func (s *session) runBuffered() bool {
	off := 0
	defer func() { s.buf = s.buf[:copy(s.buf, s.buf[off:])] }()
	for {
		var f codec.Frame
		s.dec.Next(s.buf[off:], &f)
		off += f.N
		switch f.Event {
		case codec.More:
			return true
		case codec.Line:
			if !s.dec.Idle() && !s.dec.Skipping() { // a put whose body follows
				s.put = append(s.put[:0], s.buf[off-f.N:off]...)
				continue
			}
			if !s.command(f.Status, &f.Cmd, s.buf[off-f.N:off]) {
				return false
			}
		case codec.BodyPart:
			s.put = append(s.put, f.Body...)
		case codec.Body:
			s.put = append(s.put, f.Body...)
			if !s.forward(GroupOfTube([]byte(s.use), s.r.cfg.Groups), true, 0, s.put) {
				return false
			}
		case codec.ExpectedCRLF:
			s.out = append(s.out, codec.RepExpectedCRLF...)
		case codec.JobTooBig:
			s.out = append(s.out, codec.RepJobTooBig...)
		case codec.Dropped:
			s.out = append(s.out, codec.RepOutOfMemory...)
		case codec.LineTooLong:
			s.out = append(s.out, codec.RepBadFormat...)
		}
		if len(s.out) >= flushAt && !s.flush() {
			return false
		}
	}
}

// command runs one command line (not a put with a body); line is it as
// the client sent it, CRLF included.
func (s *session) command(st codec.Status, cmd *codec.Command, line []byte) bool {
	switch st {
	case codec.Unknown:
		s.out = append(s.out, codec.RepUnknownCommand...)
		return true
	case codec.BadFormat, codec.PauseTubeBadName:
		s.out = append(s.out, codec.RepBadFormat...)
		return true
	}
	n := s.r.cfg.Groups
	switch cmd.Op {
	case codec.OpPut:
		if !s.dec.Skipping() { // trailing garbage; else JOB_TOO_BIG comes
			s.out = append(s.out, codec.RepBadFormat...)
		}
	case codec.OpUse:
		// At once, as on one server: the tube exists from here on.
		s.use = string(cmd.Tube)
		b, err := s.backend(GroupOfTube(cmd.Tube, n))
		if err != nil || b.ensureUse(s.use) != nil {
			return false
		}
		s.out = codec.AppendUsing(s.out, cmd.Tube)
	case codec.OpWatch:
		t := string(cmd.Tube)
		b, err := s.backend(GroupOfTube(cmd.Tube, n))
		if err != nil || b.addWatch(t) != nil {
			return false
		}
		if !slices.Contains(s.watch, t) {
			s.watch = append(s.watch, t)
		}
		s.out = codec.AppendWatching(s.out, uint64(len(s.watch)))
	case codec.OpIgnore:
		t := string(cmd.Tube)
		if i := slices.Index(s.watch, t); i >= 0 {
			if len(s.watch) == 1 {
				s.out = append(s.out, codec.RepNotIgnored...)
				return true
			}
			s.watch = slices.Delete(s.watch, i, i+1)
		}
		s.out = codec.AppendWatching(s.out, uint64(len(s.watch)))
	case codec.OpListTubeUsed:
		s.out = codec.AppendUsing(s.out, []byte(s.use))
	case codec.OpListTubesWatched:
		names := make([][]byte, len(s.watch))
		for i, t := range s.watch {
			names[i] = []byte(t)
		}
		s.out = codec.AppendTubeList(s.out, names)
	case codec.OpQuit:
		return false
	case codec.OpReserve, codec.OpReserveWithTimeout:
		return s.reserve(cmd, line)
	case codec.OpPeekReady, codec.OpPeekDelayed, codec.OpPeekBuried, codec.OpKick:
		return s.forward(GroupOfTube([]byte(s.use), n), true, 0, line)
	case codec.OpStatsTube, codec.OpPauseTube:
		return s.forward(GroupOfTube(cmd.Tube, n), false, 0, line)
	case codec.OpReserveJob, codec.OpDelete, codec.OpRelease, codec.OpBury, codec.OpTouch,
		codec.OpKickJob, codec.OpPeek, codec.OpStatsJob:
		return s.forward(GroupOfID(cmd.ID, n), false, cmd.ID, line)
	case codec.OpListTubes:
		return s.listTubes()
	case codec.OpStats:
		return s.stats()
	}
	return true
}
