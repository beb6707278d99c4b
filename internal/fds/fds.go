// Package fds keeps the last descriptors under the process's open-file
// limit for what must never go without them (the binlog, raft's links):
// a connection that would take one of them is closed instead.
//
// Linux, like POSIX, hands out the lowest free number, so a connection on
// a descriptor below limit − reserve leaves every number from there up
// free, whatever holes closed connections left. The limit is read at each
// call, so a limit changed while the process runs (prlimit) applies at
// the next connection.
package fds

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// Short reports whether holding descriptor fd, and need-1 more after it,
// would leave fewer than reserve descriptors free under the open-file
// limit; never with a reserve of 0 or less.
func Short(fd, need, reserve int) bool {
	var lim unix.Rlimit
	if reserve <= 0 || unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) != nil {
		return false
	}
	return ShortUnder(fd, need, reserve, lim.Cur)
}

// ShortUnder is Short under the given open-file limit.
func ShortUnder(fd, need, reserve int, limit uint64) bool {
	return uint64(fd)+uint64(max(need, 1)-1)+uint64(reserve) >= limit
}

// ConnShort is Short for the socket under c; false if c has none.
func ConnShort(c net.Conn, need, reserve int) bool {
	sc, ok := c.(syscall.Conn)
	if !ok || reserve <= 0 {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	short := false
	_ = rc.Control(func(fd uintptr) { short = Short(int(fd), need, reserve) })
	return short
}
