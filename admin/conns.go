package admin

import (
	"net"
	"sync/atomic"
	"syscall"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// Connections.
//
// The HTTP side must never take what the protocol needs. Its connections
// are limited in number (Options.MaxConns), and one is also closed as
// soon as accepted while the process is within half of Options.ReserveFDs
// descriptors of its open-file limit: the protocol side sheds its own
// connections at the whole reserve, so an operator can still scrape a
// server whose clients took every descriptor they may, and the binlog
// keeps the other half whoever connects.
//
// A connection closed this way is counted in
// beanpole_http_connections_refused_total. Like the protocol side, the
// limit is read at every connection, so a limit changed while the server
// runs (prlimit) takes effect at once.

// limitListener is the HTTP listener with those limits.
type limitListener struct {
	net.Listener
	max     int64
	reserve int // descriptors under the limit HTTP connections leave free
	open    atomic.Int64
	refused atomic.Uint64
	// shedding: the last connection was refused; logged once per episode.
	shedding atomic.Bool
	log      zerolog.Logger
}

// Accept returns the next connection within the limits, closing at once
// any beyond them.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		n := l.open.Add(1)
		full := n > l.max
		if full || l.shortOfFDs(c) {
			l.open.Add(-1)
			_ = c.Close()
			l.refused.Add(1)
			if !l.shedding.Swap(true) {
				ev := l.log.Warn()
				if full {
					ev.Int64("http-max-conns", l.max).Msg("http: too many connections: closing new ones until some end")
				} else {
					ev.Int("reserve", l.reserve).Msg("http: near the open-file limit: closing new connections to keep descriptors for the protocol and the binlog")
				}
			}
			continue
		}
		if l.shedding.Swap(false) {
			l.log.Warn().Msg("http: accepting connections again")
		}
		return &limitedConn{Conn: c, l: l}, nil
	}
}

// shortOfFDs: c's descriptor is within the reserve of the open-file limit.
// Linux hands out the lowest free number, so a descriptor below
// limit − reserve leaves every number from there up free.
func (l *limitListener) shortOfFDs(c net.Conn) bool {
	if l.reserve <= 0 {
		return false
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) != nil {
		return false
	}
	short := false
	_ = rc.Control(func(fd uintptr) { short = uint64(fd)+uint64(l.reserve) >= lim.Cur })
	return short
}

// limitedConn gives its place back when closed (once, however often
// net/http closes it).
type limitedConn struct {
	net.Conn
	l      *limitListener
	closed atomic.Bool
}

func (c *limitedConn) Close() error {
	if !c.closed.Swap(true) {
		c.l.open.Add(-1)
	}
	return c.Conn.Close()
}
