package loop

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Serve accepts connections from ln until Stop and hands each to an event
// loop. It returns when ln is closed.
//
// It accepts with accept4 in batches on its own copy of the listener's
// descriptor, parked in Go's poller between batches, and hands each new
// descriptor to a loop with the patched gnet's EnrollFD, which neither
// dups it nor waits for the loop to register it: a reconnect storm is
// accepted as fast as the kernel hands connections over, several
// registrations in flight. No net.Conn is built (nothing to collect, no
// registration in Go's poller), the listener's address is shared by all
// its connections, and the peer's address is looked up only when a log
// line needs it (addr in handler.go).
//
// Running out of descriptors must neither spin nor leave clients hanging
// in the backlog (upstream #351, #361, #628, #651): on EMFILE/ENFILE we
// give up a spare descriptor, accept the waiting connection and close it
// at once, so the client gets a clean close instead of a hang, then back
// off before trying again. The condition is logged once per episode.
//
// With Config.ReserveFDs (-b), a connection is also shed while the
// process is within that many descriptors of its limit (reserve.go): the
// binlog must never fail to open a segment because clients took every
// descriptor.
func (s *Server) Serve(ln net.Listener) error {
	return s.serve(ln, nil, nil)
}

// ServeInternal is Serve for the listener of a node's routers, which
// forward their clients' commands to this server when it leads the group
// of the commands' tubes. Its connections are internal: they may use
// beanpole's own commands (codec.Op.Internal), and they are read while a
// reserve waits, so that the router can cancel the wait (pass). In all
// else they are as Serve's: the same engine, fence, limits and stats.
func (s *Server) ServeInternal(ln net.Listener) error {
	return s.serve(ln, nil, internalConn{})
}

// internalConn is the gnet context an internal connection is enrolled
// with (ServeInternal); OnOpen marks its client.
type internalConn struct{}

// serve is Serve, handing each accepted descriptor to hand instead of
// gnet when hand is not nil (ServeTLS), or else enrolling it in gnet with
// ctx as its context.
func (s *Server) serve(ln net.Listener, hand func(fd int, local net.Addr), ctx any) error {
	lf, err := listenerFile(ln)
	if err != nil {
		return err
	}
	defer lf.Close()
	rc, err := lf.SyscallConn()
	if err != nil {
		return err
	}

	s.mu.Lock()
	if s.stopping.Load() {
		s.mu.Unlock()
		return nil
	}
	s.listeners = append(s.listeners, ln)
	s.acceptFiles = append(s.acceptFiles, lf)
	s.acceptWG.Add(1)
	s.mu.Unlock()
	defer s.acceptWG.Done()

	a := acceptor{s: s, network: "tcp", local: ln.Addr(), queued: true, hand: hand, ctx: ctx}
	if _, ok := ln.(*net.UnixListener); ok {
		a.network, a.queued = "unix", false
	}
	a.spare = openSpare()
	defer func() {
		if a.spare >= 0 {
			unix.Close(a.spare)
		}
	}()
	err = rc.Read(func(lfd uintptr) bool { return !a.acceptAll(int(lfd)) })
	if err == nil || s.stopping.Load() || errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}

// listenerFile is the acceptor's own descriptor for ln's socket: a
// non-blocking duplicate wrapped in an os.File, so that Go's poller parks
// the acceptor between batches (a net.Listener's raw descriptor offers
// Control but no Read to wait on) and Stop wakes it by closing the file.
// A TCP socket gets SO_KEEPALIVE, as upstream sets on its listening
// socket, and TCP_NODELAY, which Go sets on every connection it accepts:
// Linux passes both on to the sockets accept4 returns (with the kernel's
// keepalive timers), so no connection needs a setsockopt of its own.
func listenerFile(ln net.Listener) (*os.File, error) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("listener %T has no descriptor to accept on", ln)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	dup := -1
	cerr := rc.Control(func(fd uintptr) {
		if dup, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0); err != nil {
			return
		}
		if _, isUnix := ln.(*net.UnixListener); !isUnix {
			err = setTCPOptions(dup)
		}
	})
	if err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.SetNonblock(dup, true) // os.NewFile polls only a non-blocking descriptor
	}
	if err != nil {
		if dup >= 0 {
			unix.Close(dup)
		}
		return nil, err
	}
	return os.NewFile(uintptr(dup), ln.Addr().String()), nil
}

// setTCPOptions sets upstream's SO_KEEPALIVE and TCP_NODELAY on fd.
func setTCPOptions(fd int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1); err != nil {
		return err
	}
	return unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
}

// acceptAll accepts and enrolls every connection waiting on lfd. It
// reports true when none is left (wait for the next), false to stop.
func (a *acceptor) acceptAll(lfd int) bool {
	for !a.s.stopping.Load() {
		if a.spare < 0 {
			a.spare = openSpare()
		}
		fd, err := accept(lfd)
		switch err {
		case nil:
		case unix.EAGAIN:
			a.queued = false
			return true
		case unix.EINTR, unix.ECONNABORTED:
			continue
		default:
			a.failed(lfd, err)
			continue
		}
		if a.s.cfg.ReserveFDs > 0 && a.reserveShort(fd) {
			continue
		}
		if a.queued {
			// It may have been established before listenerFile set the
			// options that accepted sockets inherit (a socket passed by
			// systemd holds connections from before we started).
			_ = setTCPOptions(fd)
		}
		if a.hand != nil {
			a.hand(fd, a.local)
		} else {
			// Counted now, not when its loop opens it: stats on a
			// connection opened after this one must count this one.
			a.s.eng.Accepted(0)
			if err := a.s.cli.EnrollFD(fd, a.network, a.local, nil, a.ctx); err != nil {
				a.s.eng.Unaccepted(0)
				a.failed(-1, err) // fd is closed: that client is answered already
				continue
			}
		}
		if a.backoff != 0 || a.shedding {
			a.s.log.Warn().Msg("accepting connections again")
			a.backoff, a.shedding = 0, false
		}
	}
	return false
}

// accept is accept4(2) without asking for the peer's address: nothing is
// allocated per connection.
func accept(lfd int) (int, error) {
	fd, _, errno := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(lfd), 0, 0, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

type acceptor struct {
	s       *Server
	network string   // "tcp" or "unix", for gnet
	local   net.Addr // the listener's, shared by its connections
	// queued: the backlog has not been drained since the listener got its
	// options (TCP only): those connections may lack them.
	queued   bool
	spare    int // a descriptor kept to give up at EMFILE (shed); -1: none
	backoff  time.Duration
	shedding bool // shedding to keep descriptors in reserve (reserve.go)
	// hand, when set, takes each accepted descriptor instead of gnet
	// (ServeTLS).
	hand func(fd int, local net.Addr)
	// ctx is the context a connection is enrolled with (ServeInternal's).
	ctx any
}

// failed handles an accept or enroll error: out of descriptors, it sheds
// a waiting client on lfd (when lfd >= 0); any error is logged once per
// episode and backs off.
func (a *acceptor) failed(lfd int, err error) {
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		if a.backoff == 0 {
			a.s.log.Warn().Err(err).Msg("out of file descriptors: closing new connections until some are free")
		}
		if lfd >= 0 {
			a.shed(lfd)
		}
	} else if a.backoff == 0 {
		a.s.log.Error().Err(err).Msg("accept failed")
	}
	a.backoff = min(max(2*a.backoff, 5*time.Millisecond), 200*time.Millisecond)
	time.Sleep(a.backoff)
}

// shed closes one client that is already waiting in the backlog, using the
// spare descriptor for it (the listener is non-blocking: with nobody
// waiting, accept4 just says so). The client's socket is shut down, which
// the client sees as the close, and kept as the next spare: reopening
// /dev/null could fail at the limit (another thread may take the freed
// number first) and leave nothing to shed the next client with.
func (a *acceptor) shed(lfd int) {
	if a.spare < 0 {
		return
	}
	unix.Close(a.spare)
	a.spare = -1
	fd, err := accept(lfd)
	if err != nil {
		a.spare = openSpare()
		return
	}
	_ = unix.Shutdown(fd, unix.SHUT_RDWR)
	a.spare = fd
	a.s.refused.Add(1)
}

// openSpare opens the descriptor shed gives up, or returns -1.
func openSpare() int {
	fd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}
