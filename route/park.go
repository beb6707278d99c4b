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
// read buffer each: an idle client then costs what its session knows (the
// tube it uses, the tubes it watches, its backends). It also wakes the
// sessions whose reserves wait (waitReady), which hold no goroutine but
// their own and no buffer meanwhile. One goroutine waits on an epoll set of
// those clients' sockets and of the backends' the reserves wait at. Each
// is added level-triggered and once (EPOLLONESHOT), so input that came
// before it was added wakes it at once, and removed when it wakes: a
// parked session then runs on a goroutine of its own again, until its
// client is idle once more. TLS clients are neither parked nor wait this
// way: crypto/tls may hold input that their socket no longer shows.
type parking struct {
	r    *Router
	epfd int
	mu   sync.Mutex
	// in are the sockets in the epoll set, each with what it wakes; nil
	// once the router stopped.
	in map[int32]watched
	// parked is how many sessions in has parked or suspended.
	parked int
}

// watched is what a socket in the epoll set wakes: a parked session
// (wake nil), or a session whose reserve waits (waitReady), told on wake
// which of its sockets has input: i, -1 for its client's.
type watched struct {
	s    *session
	wake chan int
	i    int
	// susp: the session's reserve is suspended (suspend): woken, it runs
	// on a goroutine of its own again, its other sockets taken out.
	susp bool
}

// stopping is what a waiting session is told when the router stops.
const stopping = -2

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

// park parks s, whose client's socket is fd; false if it cannot (the
// router stopped), and s goes on reading its client itself.
func (p *parking) park(s *session, fd int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.in == nil || !p.add(fd, watched{s: s}) {
		return false
	}
	p.parked++
	return true
}

// watch has wake told when one of fds has input (or hangs up): its index
// in fds. False if it cannot (the router stopped).
func (p *parking) watch(s *session, fds []int, wake chan int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addAll(fds, watched{s: s, wake: wake})
}

// suspend has s run on a goroutine of its own again (resume) when one of
// fds (its client's socket first) has input, with s.rsv.woke saying which;
// false if it cannot (the router stopped).
func (p *parking) suspend(s *session, fds []int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.addAll(fds, watched{s: s, susp: true}) {
		return false
	}
	p.parked++
	return true
}

// addAll puts every one of fds in the epoll set, the ith to wake w with i,
// or none; p.mu is held.
func (p *parking) addAll(fds []int, w watched) bool {
	if p.in == nil {
		return false
	}
	for i, fd := range fds {
		w.i = i
		if !p.add(fd, w) {
			for _, f := range fds[:i] {
				p.remove(int32(f))
			}
			return false
		}
	}
	return true
}

// unwatch takes those of fds still in the epoll set out of it.
func (p *parking) unwatch(fds []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.in != nil {
		for _, fd := range fds {
			p.remove(int32(fd))
		}
	}
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
			p.remove(ev.Fd)
			if w.wake != nil {
				w.wake <- w.i // room for each socket, and stopping
				continue
			}
			if w.susp {
				for _, fd := range w.s.fds {
					p.remove(int32(fd))
				}
				w.s.rsv.woke = w.i - 1
			}
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

// count is how many sessions are parked or suspended.
func (p *parking) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.parked
}

// end stops parking: the waits are told so, and the parked sessions end.
func (p *parking) end() {
	p.mu.Lock()
	in := p.in
	p.in = nil
	told := map[chan int]bool{}
	parked := map[*session]bool{}
	for _, w := range in {
		switch {
		case w.wake == nil:
			parked[w.s] = true
		case !told[w.wake]:
			told[w.wake] = true
			w.wake <- stopping
		}
	}
	p.mu.Unlock()
	for s := range parked {
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
