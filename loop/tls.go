package loop

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/beanpole/beanpole/internal/fds"
	"github.com/beanpole/beanpole/internal/share"
	"golang.org/x/sys/unix"
)

// TLS (--tls-listen).
//
// gnet speaks no TLS. A TLS connection's handshake runs on a goroutine of
// its own, with crypto/tls on the accepted socket; once it has succeeded
// the socket is handed to an event loop like an accepted plaintext one,
// with its tls.Conn, and from then on the loop does its records
// (tlsconn.go): the parser and the engine see an ordinary connection, and
// there is one implementation of the protocol.
//
// The client's close_notify or FIN is the end of its input: every command
// before it is answered, then the connection closes. The loop's close
// sends close_notify before the FIN.
//
// A handshake must finish within share.HandshakeTimeout: a client
// that connects and sends nothing is cut then; one that sends plaintext or
// garbage fails the handshake at its first bytes and is closed at once.
// Failed handshakes are counted (TLSHandshakeFailures) and logged at most
// once a second.
//
// Handshakes in progress are bounded (share.Handshakes): each holds a
// descriptor and a goroutine for up to share.HandshakeTimeout, so clients
// that connect and stall could otherwise take every descriptor, and the
// plaintext listener, established TLS connections and the HTTP side with
// them. The bound is shared among client addresses (package share): one
// address may use it all while nobody else connects, but at the bound a
// TLS connection from an address holding less than a quarter of it cuts
// short the oldest handshake of the address holding the most, if that is
// more than a quarter; otherwise the new connection is closed at once.
// Either way one connection is shed: counted (TLSHandshakesShed) and
// logged at most once a second.

// ServeTLS is Serve for a TLS listener: the same accept path (descriptor
// limit, reserve, refusals), each connection handed to a loop once its
// handshake with conf has succeeded.
func (s *Server) ServeTLS(ln net.Listener, conf *tls.Config) error {
	return s.serveTLS(ln, conf, false)
}

// ServeInternalTLS is ServeInternal for a TLS listener: the routers of a
// node of many groups over the links' mutual TLS.
func (s *Server) ServeInternalTLS(ln net.Listener, conf *tls.Config) error {
	return s.serveTLS(ln, conf, true)
}

func (s *Server) serveTLS(ln net.Listener, conf *tls.Config, internal bool) error {
	return s.serve(ln, func(fd int, local net.Addr) {
		remote := peerAddr(fd)
		raw := &fileConn{File: os.NewFile(uintptr(fd), ""), local: local, remote: remote}
		_ = raw.SetDeadline(time.Now().Add(share.HandshakeTimeout))
		// Cut short to make room for another client's: the handshake
		// fails at once, as at its timeout.
		cut := func() { _ = raw.SetDeadline(time.Now()) }
		limit := share.Handshakes()
		place, out := s.handshakes.Take(share.ClientOfAddr(remote), limit, cut)
		if out == share.Refused {
			_ = raw.Close()
			s.shed(limit)
			return
		}
		go s.handshake(raw, place, conf, internal)
	}, nil)
}

// shed counts and logs a TLS connection closed, or its handshake cut
// short, because limit handshakes were in progress.
func (s *Server) shed(limit int) {
	s.tlsShed.Add(1)
	s.warnEvery(&s.shedWarned, func() {
		s.log.Warn().Int("handshakes", limit).Uint64("shed", s.tlsShed.Load()).
			Msg("too many TLS handshakes in progress: closing new TLS connections at once, or the oldest handshakes of an address past its share")
	})
}

// TLSHandshakeFailures is how many TLS handshakes failed or timed out.
func (s *Server) TLSHandshakeFailures() uint64 { return s.tlsFailures.Load() }

// TLSConnections is how many TLS connections are open (their handshake
// done; they are among the open connections).
func (s *Server) TLSConnections() int64 { return s.tlsOpen.Load() }

// TLSHandshakesShed is how many TLS connections were closed unstarted
// because maxHandshakes handshakes were in progress.
func (s *Server) TLSHandshakesShed() uint64 { return s.tlsShed.Load() }

// fileConn is an accepted socket as the net.Conn crypto/tls wants: an
// os.File polled by Go's runtime, with no duplicate descriptor.
type fileConn struct {
	*os.File
	local, remote net.Addr
}

func (c *fileConn) LocalAddr() net.Addr  { return c.local }
func (c *fileConn) RemoteAddr() net.Addr { return c.remote }

// peerAddr is fd's peer as a TCP address, nil if unknown.
func peerAddr(fd int) net.Addr {
	switch sa, _ := unix.Getpeername(fd); sa := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(sa.Addr[:]).To16(), Port: sa.Port}
	case *unix.SockaddrInet6:
		return &net.TCPAddr{IP: net.IP(sa.Addr[:]), Port: sa.Port}
	}
	return nil
}

// handshake does the TLS handshake on raw, holding place among those in
// progress, and, if it succeeds, hands the socket and its tls.Conn to a
// loop.
func (s *Server) handshake(raw *fileConn, place *share.Place, conf *tls.Config, internal bool) {
	local, remote := raw.local, raw.remote
	pipe := &recordPipe{hs: raw}
	tc := tls.Server(pipe, conf)
	err := tc.Handshake()
	if held := s.handshakes.Release(place); err != nil && !held {
		// Cut short for another client's (ServeTLS).
		s.shed(share.Handshakes())
		_ = raw.Close()
		return
	}
	if err != nil {
		s.tlsFailures.Add(1)
		s.warnEvery(&s.tlsWarned, func() {
			ev := s.log.Warn().Err(err).Uint64("failures", s.tlsFailures.Load())
			if remote != nil {
				ev = ev.Str("addr", remote.String())
			}
			ev.Msg("TLS handshake failed")
		})
		_ = raw.Close()
		return
	}
	// Go's poller lets go of a descriptor only by closing it: the loop
	// takes a duplicate, and the socket stays open through the swap.
	loopFD, err := detach(raw)
	if err == nil && fds.Short(loopFD, 1, s.cfg.ReserveFDs) {
		unix.Close(loopFD)
		err = errors.New("near the open-file limit: descriptors are kept for the binlog")
	}
	if err == nil {
		// gnet closes loopFD itself if it cannot take it.
		err = s.cli.EnrollFD(loopFD, "tcp", local, remote, &tlsSession{tc: tc, pipe: pipe, internal: internal})
	}
	if err != nil {
		s.refused.Add(1)
		s.warnEvery(&s.enrollWarned, func() {
			s.log.Warn().Err(err).Uint64("refused", s.refused.Load()).Msg("closing a TLS connection: no loop connection for it")
		})
	}
}

// detach closes f and returns a non-blocking duplicate of its descriptor,
// or an error, having closed f either way.
func detach(f *fileConn) (int, error) {
	dup := -1
	rc, err := f.SyscallConn()
	if err == nil {
		cerr := rc.Control(func(fd uintptr) { dup, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) })
		err = errors.Join(err, cerr)
	}
	_ = f.Close()
	if err != nil {
		if dup >= 0 {
			unix.Close(dup)
		}
		return -1, err
	}
	return dup, nil
}

// warnEvery runs warn unless it ran less than a second ago (last holds
// when, in unix nanoseconds).
func (s *Server) warnEvery(last *atomic.Int64, warn func()) {
	now := time.Now().UnixNano()
	prev := last.Load()
	if now-prev >= int64(time.Second) && last.CompareAndSwap(prev, now) {
		warn()
	}
}
