package loop

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// Descriptors in reserve.
//
// With a binlog, the server keeps the last Config.ReserveFDs descriptors
// under its open-file limit for the binlog (a new segment, a spare, the
// directory opened to fsync it): a connection that would take one of them
// is closed at once instead, as at EMFILE. Clients then get a clean close
// while the binlog can still write, rather than puts answered
// OUT_OF_MEMORY because a segment could not be opened.
//
// Which descriptor a connection will hold: gnet's EnrollContext dups the
// accepted socket and closes the original, so the connection keeps the
// lowest descriptor that is free while the original is still open (Linux,
// like POSIX, hands out the lowest free number). The probe takes exactly
// that one (fcntl F_DUPFD from 0) and gives it back. Each connection kept
// therefore holds a descriptor below limit − ReserveFDs, whatever holes
// closed connections left: the reserved top stays free for the binlog,
// but for the instant of an enrollment.
//
// Cost: three system calls per accepted connection (getrlimit, fcntl,
// close), only with -b. The limit is read each time, so a limit lowered
// while the server runs (prlimit) takes effect at the next connection.

// reserveShort reports whether nc would leave fewer than ReserveFDs
// descriptors free; if so it has closed nc.
func (a *acceptor) reserveShort(nc net.Conn) bool {
	fd, ok := probeNextFD(nc)
	if ok {
		if fd < 0 {
			return false
		}
		var lim unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) != nil || !shortOfFDs(fd, lim.Cur, a.s.cfg.ReserveFDs) {
			return false
		}
	}
	nc.Close()
	if !a.shedding {
		a.shedding = true
		a.s.log.Warn().Int("reserve", a.s.cfg.ReserveFDs).
			Msg("near the open-file limit: closing new connections to keep descriptors for the binlog")
	}
	return true
}

// shortOfFDs: a connection holding descriptor fd would leave fewer than
// reserve descriptors free under the limit.
func shortOfFDs(fd int, limit uint64, reserve int) bool {
	return uint64(fd)+uint64(reserve) >= limit
}

// probeNextFD returns the descriptor the connection will hold once
// enrolled: the lowest free one, with nc's still open. ok is false when
// even that one is not available (EMFILE); a connection that is not a
// socket we can look into reports -1 and ok, and is never shed here.
func probeNextFD(nc net.Conn) (fd int, ok bool) {
	sc, isSC := nc.(syscall.Conn)
	if !isSC {
		return -1, true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, true
	}
	fd, ok = -1, true
	_ = rc.Control(func(s uintptr) {
		d, err := unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			ok = false
			return
		}
		fd = d
		unix.Close(d)
	})
	return fd, ok
}
