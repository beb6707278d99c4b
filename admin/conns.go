package admin

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"

	"github.com/beanpole/beanpole/internal/fds"
	"github.com/beanpole/beanpole/internal/share"
	"github.com/rs/zerolog"
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
// No one host can take the limit from the others (package share): at the
// limit, an idle keep-alive connection is closed first to make room for a
// new one, then, for an address holding less than a quarter of the
// limit, the oldest connection of the address holding the most, if that
// is more than a quarter. Past the limit, probeConns more connections,
// shared the same way, are kept for the probes: such a connection is
// answered on /healthz and /readyz only, then closed, so that a liveness
// probe never fails for want of a connection.
//
// A connection closed as soon as accepted is counted in
// beanpole_http_connections_refused_total, one closed to make room in
// beanpole_http_connections_evicted_total. Like the protocol side, the
// open-file limit is read at every connection, so a limit changed while
// the server runs (prlimit) takes effect at once.

// probeConns is how many connections past the limit are kept for
// /healthz and /readyz.
const probeConns = 8

// limitListener is the HTTP listener with those limits.
type limitListener struct {
	net.Listener
	max     int
	reserve int // descriptors under the limit HTTP connections leave free
	// places are the connections within max, probes those past it.
	places, probes share.Table
	open           atomic.Int64
	refused        atomic.Uint64
	evicted        atomic.Uint64
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
		short := fds.ConnShort(c, 1, l.reserve)
		lc := &limitedConn{Conn: c, l: l}
		if !short {
			lc.admit(share.ClientOfAddr(c.RemoteAddr()))
		}
		if lc.place == nil {
			_ = c.Close()
			l.refused.Add(1)
			if !l.shedding.Swap(true) {
				ev := l.log.Warn()
				if !short {
					ev.Int("http-max-conns", l.max).Msg("http: too many connections: closing new ones until some end")
				} else {
					ev.Int("reserve", l.reserve).Msg("http: near the open-file limit: closing new connections to keep descriptors for the protocol and the binlog")
				}
			}
			continue
		}
		if l.shedding.Swap(false) {
			l.log.Warn().Msg("http: accepting connections again")
		}
		l.open.Add(1)
		return lc, nil
	}
}

// admit gives c a place among the connections, or past the limit one of
// those kept for the probes, or none.
func (c *limitedConn) admit(key netip.Prefix) {
	l := c.l
	p, out := l.places.Take(key, l.max, c.evict)
	if out == share.Refused {
		if p, out = l.probes.Take(key, probeConns, c.evict); out != share.Refused {
			c.probe = true
		}
	}
	c.place = p
	if out == share.TookIdle || out == share.TookOver {
		l.evicted.Add(1)
	}
}

// limitedConn gives its place back when closed (once, however often
// net/http closes it).
type limitedConn struct {
	net.Conn
	l      *limitListener
	place  *share.Place
	probe  bool // past the limit: /healthz and /readyz only, then closed
	closed atomic.Bool
}

func (c *limitedConn) Close() error {
	if !c.closed.Swap(true) {
		c.l.open.Add(-1)
		c.table().Release(c.place)
	}
	return c.Conn.Close()
}

func (c *limitedConn) table() *share.Table {
	if c.probe {
		return &c.l.probes
	}
	return &c.l.places
}

// evict closes the connection to make room for another; net/http sees
// the close as the client's and lets go of it.
func (c *limitedConn) evict() { _ = c.Conn.Close() }

// connState follows each connection between requests (http.Server's
// ConnState): an idle one is the first closed to make room.
func (l *limitListener) connState(nc net.Conn, st http.ConnState) {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	c, ok := nc.(*limitedConn)
	if !ok {
		return
	}
	switch st {
	case http.StateIdle:
		c.table().SetIdle(c.place, true)
	case http.StateActive:
		c.table().SetIdle(c.place, false)
	}
}

// probeOnly answers a connection past the limit on /healthz and /readyz
// only, then closes it; any other request gets 503.
func probeOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(connKey{}).(*limitedConn)
		if c == nil || !c.probe {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Connection", "close")
		if r.URL.Path != "/healthz" && r.URL.Path != "/readyz" {
			http.Error(w, "too many HTTP connections: this one is kept for /healthz and /readyz", http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// connKey is the context key of a request's *limitedConn.
type connKey struct{}

// connContext puts the request's connection in its context (http.Server's
// ConnContext), for probeOnly.
func connContext(ctx context.Context, nc net.Conn) context.Context {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	if c, ok := nc.(*limitedConn); ok {
		return context.WithValue(ctx, connKey{}, c)
	}
	return ctx
}
