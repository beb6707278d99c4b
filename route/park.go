package route

import (
	"net"
	"sync"
	"syscall"
	"time"
)

// parkAfter is how long a plaintext client may send nothing, with nothing
// of its own on the way, before its session is parked: a client that sends
// its next command sooner is read by its session's goroutine, as before.
const parkAfter = time.Second

// parking holds the sessions of idle clients without a goroutine or a
// read buffer each: an idle client then costs what its session knows
// (the tube it uses, the tubes it watches, its backends), about what one
// server's idle connection costs. One goroutine waits on an epoll set of
// the parked clients' sockets. Each is added when its session parks,
// level-triggered and once (EPOLLONESHOT), so input that came before it was
// added wakes it at once, and removed when it wakes: its session then runs
// on a goroutine of its own again, until its client is idle once more.
// TLS clients are never parked: crypto/tls may hold input that their
// socket no longer shows.
type parking struct {
	r    *Router
	epfd int
	mu   sync.Mutex
	// parked are the parked sessions by their client's descriptor; nil
	// once the router stopped.
	parked map[int32]*session
}

// newParking starts the parking of r's sessions, or reports why it
// cannot (then no session parks).
func newParking(r *Router) (*parking, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	p := &parking{r: r, epfd: epfd, parked: map[int32]*session{}}
	go p.run()
	return p, nil
}

// park parks s, whose client's socket is fd; false if it cannot (the
// router stopped), and s goes on reading its client itself.
func (p *parking) park(s *session, fd int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.parked == nil {
		return false
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: int32(fd)}
	if syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, fd, &ev) != nil {
		return false
	}
	p.parked[int32(fd)] = s
	return true
}

// run wakes the sessions whose clients sent something (or hung up), until
// the router stops; it looks at least every parkPoll whether it has.
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
		if p.parked == nil {
			p.mu.Unlock()
			return
		}
		for _, ev := range evs[:max(n, 0)] {
			s := p.parked[ev.Fd]
			if s == nil {
				continue
			}
			delete(p.parked, ev.Fd)
			_ = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, int(ev.Fd), nil)
			p.r.wg.Add(1)
			go p.r.serveSession(s)
		}
		p.mu.Unlock()
	}
}

// parkPoll bounds how long the parking takes to see that the router
// stopped.
const parkPoll = 500 * time.Millisecond

// count is how many sessions are parked.
func (p *parking) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.parked)
}

// end stops parking, and ends every parked session: the router stops.
func (p *parking) end() {
	p.mu.Lock()
	parked := p.parked
	p.parked = nil
	p.mu.Unlock()
	for _, s := range parked {
		s.end()
	}
}

// descriptor is the socket under a plaintext client's connection, if it
// may be parked.
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
