package loop

import (
	"golang.org/x/sys/unix"

	"github.com/beanpole/beanpole/internal/fds"
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
// The connection keeps the descriptor accept4 gave it (Serve hands it to
// gnet as it is), and Linux, like POSIX, hands out the lowest free number.
// So a connection whose descriptor is below limit − ReserveFDs leaves
// every number from there up free, whatever holes closed connections
// left: the reserved top stays for the binlog.
//
// Cost: one getrlimit per accepted connection, only with -b. The limit is
// read each time, so a limit lowered while the server runs (prlimit) takes
// effect at the next connection.

// reserveShort reports whether a connection on fd would leave fewer than
// ReserveFDs descriptors free; if so it has closed fd.
func (a *acceptor) reserveShort(fd int) bool {
	if !fds.Short(fd, 1, a.s.cfg.ReserveFDs) {
		return false
	}
	unix.Close(fd)
	a.s.refused.Add(1)
	if !a.shedding {
		a.shedding = true
		a.s.log.Warn().Int("reserve", a.s.cfg.ReserveFDs).
			Msg("near the open-file limit: closing new connections to keep descriptors for the binlog or raft")
	}
	return true
}
