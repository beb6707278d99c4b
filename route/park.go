package route

import (
	"net"
	"sync"
	"syscall"
	"time"
)

// parkAfter is how long a client may send nothing, with nothing
// of its own on the way, before its session is parked: a client that sends
// its next command sooner is read by its session's goroutine, as before.
const parkAfter = time.Second

// parking holds the sessions of idle clients, and of clients whose
// reserve waits (suspend), without a goroutine or a read buffer each: such
// a client costs what its session knows (the tube it uses, the tubes it
// watches, its backends, its reserve). One goroutine waits on an epoll set
// of their sockets, and of the backends' that the reserves wait at. Each is
// added level-triggered and once (EPOLLONESHOT), so input that came before
// it was added wakes it at once; a session's sockets are all taken out
// when one of them wakes it, and it runs on a goroutine of its own again.
//
// A TLS client is parked only when a read of it has timed out having
// given nothing: crypto/tls then holds no record whole (it reads a
// record it holds before it asks the socket), at most part of one, whose
// rest will come on the socket.
type parking struct {
	r    *Router
	epfd int
	mu   sync.Mutex
	// in are the sockets in the epoll set, each with the session it
	// wakes; nil once the router stopped.
	in map[int32]watched
	// parked is how many sessions in holds.
	parked int
}

// watched is a socket in the epoll set: the ith of its session's (fds),
// its client's first.
type watched struct {
	s *session
	i int
}

// newParking starts the parking of r's sessions, or reports why it
// cannot (then no session parks).
func newParking(r *Router) (*parking, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	p := &parking{r: r, epfd: epfd, in: map[int32]watched{}}
	go p.run()
	return p, nil
}

// add puts fd in the epoll set, to wake w; p.mu is held.
func (p *parking) add(fd int, w watched) bool {
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: int32(fd)}
	if syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, fd, &ev) != nil {
		return false
	}
	p.in[int32(fd)] = w
	return true
}

// remove takes fd out of the epoll set if it is in; p.mu is held.
func (p *parking) remove(fd int32) {
	if _, ok := p.in[fd]; ok {
		delete(p.in, fd)
		_ = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil)
	}
}

// park has s run on a goroutine of its own again (session.run) when one
// of fds has input or hangs up, with s.rsv.woke saying which (-1: the
// first, its client's socket); false if it cannot (the router stopped),
// and s goes on on its goroutine.
func (p *parking) park(s *session, fds []int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.in == nil {
		return false
	}
	for i, fd := range fds {
		if !p.add(fd, watched{s: s, i: i}) {
			for _, f := range fds[:i] {
				p.remove(int32(f))
			}
			return false
		}
	}
	p.parked++
	return true
}

// run wakes the sessions whose clients or backends sent something (or
// hung up), until the router stops; it looks at least every parkPoll
// whether it has.
func (p *parking) run() {
	defer syscall.Close(p.epfd)
	evs := make([]syscall.EpollEvent, 128)
	for {
		n, err := syscall.EpollWait(p.epfd, evs, int(parkPoll/time.Millisecond))
		if err != nil && err != syscall.EINTR {
			p.r.cfg.Log.Error().Err(err).Msg("route: waiting for parked clients")
			p.end()
			return
		}
		p.mu.Lock()
		if p.in == nil {
			p.mu.Unlock()
			return
		}
		for _, ev := range evs[:max(n, 0)] {
			w, ok := p.in[ev.Fd]
			if !ok {
				continue
			}
			for _, fd := range w.s.fds {
				p.remove(int32(fd))
			}
			w.s.rsv.woke = w.i - 1
			p.parked--
			p.r.wg.Add(1)
			go p.r.serveSession(w.s)
		}
		p.mu.Unlock()
	}
}

// parkPoll bounds how long the parking takes to see that the router
// stopped.
const parkPoll = 500 * time.Millisecond

// count is how many sessions are parked (idle, or their reserve
// suspended).
func (p *parking) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.parked
}

// end stops parking, and ends the parked sessions: the router stops.
func (p *parking) end() {
	p.mu.Lock()
	in := p.in
	p.in = nil
	p.mu.Unlock()
	parked := map[*session]bool{}
	for _, w := range in {
		parked[w.s] = true
	}
	for s := range parked {
		s.end()
	}
}

// descriptor is c's socket (socket: the one under its TLS), if it may be
// parked.
func descriptor(c net.Conn) (int, bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	fd := -1
	if rc.Control(func(f uintptr) { fd = int(f) }) != nil || fd < 0 {
		return 0, false
	}
	return fd, true
}
