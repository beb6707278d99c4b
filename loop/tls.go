package loop

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// TLS (--tls-listen).
//
// gnet speaks no TLS, so a TLS connection is served through a bridge:
// crypto/tls does the handshake and the records on the accepted socket,
// and the plaintext goes through a socketpair whose one end is enrolled in
// gnet exactly as an accepted plaintext connection is. The event loops,
// the parser and the engine see an ordinary connection: there is one
// implementation of the protocol. Each TLS connection costs two
// goroutines (one per direction), the socketpair's two descriptors and
// crypto/tls's buffers.
//
// A half-close passes through both ways: the client's close_notify or FIN
// becomes a shutdown of the socketpair's write side, which the loop sees
// as the end of input (every command before it is answered); the loop's
// close becomes close_notify and a FIN to the client.
//
// A handshake must finish within TLSHandshakeTimeout: a client
// that connects and sends nothing is cut then; one that sends plaintext or
// garbage fails the handshake at its first bytes and is closed at once.
// Failed handshakes are counted (TLSHandshakeFailures) and logged at most
// once a second.
//
// Handshakes in progress are bounded (maxHandshakes): each holds a
// descriptor and a goroutine for up to TLSHandshakeTimeout, so clients
// that connect and stall could otherwise take every descriptor, and the
// plaintext listener, established TLS connections and the HTTP side with
// them. A TLS connection accepted beyond the bound is closed at once,
// counted (TLSHandshakesShed) and logged at most once a second.

// TLSHandshakeTimeout is how long a TLS handshake may take.
const TLSHandshakeTimeout = 10 * time.Second

// bridgeInBuf is the plaintext read from the client per write to the
// loop. Every connection holds one while it waits for the client: 2 KiB
// rather than 8 takes a quarter off an idle TLS connection's memory
// (about 23 KiB instead of 32), and a 60 KB put is no slower for it.
const bridgeInBuf = 2 << 10

// outBufs are the buffers the loop's replies are copied through towards
// the client, one TLS record's worth each; a bridge takes one only while
// it has replies to copy, so idle connections hold none.
var outBufs = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// ServeTLS is Serve for a TLS listener: the same accept path (descriptor
// limit, reserve, refusals), each connection bridged to a loop once its
// handshake with conf has succeeded.
func (s *Server) ServeTLS(ln net.Listener, conf *tls.Config) error {
	return s.serve(ln, func(fd int, local net.Addr) {
		if limit := maxHandshakes(); s.handshakes.Add(1) > limit {
			s.handshakes.Add(-1)
			unix.Close(fd)
			s.tlsShed.Add(1)
			s.warnEvery(&s.shedWarned, func() {
				s.log.Warn().Int64("handshakes", limit).Uint64("shed", s.tlsShed.Load()).
					Msg("too many TLS handshakes in progress: closing new TLS connections at once")
			})
			return
		}
		go s.bridge(fd, local, conf)
	})
}

// maxTLSHandshakes bounds the TLS handshakes in progress however high the
// open-file limit: a thousand handshakes a second from a legitimate
// crowd finish long before a thousand more arrive.
const maxTLSHandshakes = 1024

// maxHandshakes is how many TLS handshakes may be in progress at once: a
// quarter of the open-file limit, read at each connection like the
// reserve (so a limit changed while serving applies at once), at most
// maxTLSHandshakes.
func maxHandshakes() int64 {
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) != nil {
		return maxTLSHandshakes
	}
	return int64(max(1, min(maxTLSHandshakes, lim.Cur/4)))
}

// TLSHandshakeFailures is how many TLS handshakes failed or timed out.
func (s *Server) TLSHandshakeFailures() uint64 { return s.tlsFailures.Load() }

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

// shutdownWrite half-closes f's socket.
func shutdownWrite(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_WR) })
	}
}

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

// bridge does the handshake on fd and, if it succeeds, serves the
// connection through a socketpair enrolled in gnet.
func (s *Server) bridge(fd int, local net.Addr, conf *tls.Config) {
	remote := peerAddr(fd)
	raw := &fileConn{File: os.NewFile(uintptr(fd), ""), local: local, remote: remote}
	_ = raw.SetDeadline(time.Now().Add(TLSHandshakeTimeout))
	tc := tls.Server(raw, conf)
	err := tc.Handshake()
	s.handshakes.Add(-1)
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
	_ = raw.SetDeadline(time.Time{})

	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err == nil && s.cfg.ReserveFDs > 0 && s.shortOfFDs(max(pair[0], pair[1])) {
		unix.Close(pair[0])
		unix.Close(pair[1])
		err = errors.New("near the open-file limit: descriptors are kept for the binlog")
	}
	if err == nil {
		// gnet closes pair[0] itself if it cannot take it.
		err = s.cli.EnrollFD(pair[0], "unix", local, remote, nil)
		if err != nil {
			unix.Close(pair[1])
		}
	}
	if err != nil {
		s.refused.Add(1)
		s.warnEvery(&s.enrollWarned, func() {
			s.log.Warn().Err(err).Uint64("refused", s.refused.Load()).Msg("closing a TLS connection: no loop connection for it")
		})
		_ = tc.Close()
		return
	}
	loopEnd := os.NewFile(uintptr(pair[1]), "")
	// Both copies run on goroutines of their own: the handshake's stack,
	// grown by the key exchange, goes with this one.
	go s.toClient(loopEnd, tc, raw)
	go s.fromClient(tc, loopEnd)
}

// fromClient copies the client's plaintext to the loop, then passes the
// end of it on as a half-close.
func (s *Server) fromClient(tc *tls.Conn, loopEnd *os.File) {
	buf := make([]byte, bridgeInBuf)
	for {
		n, err := tc.Read(buf)
		if n > 0 {
			if _, werr := loopEnd.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			// close_notify, a bare FIN or a broken connection alike:
			// the loop answers what came before, then closes.
			shutdownWrite(loopEnd)
			return
		}
	}
}

// toClient copies the loop's replies to the client. When the loop closes
// its end it sends close_notify and a FIN, then closes both ends; a
// buffer is taken only while there is something to copy.
func (s *Server) toClient(loopEnd *os.File, tc *tls.Conn, raw *fileConn) {
	defer func() {
		_ = tc.CloseWrite()
		shutdownWrite(raw.File)
		_ = tc.Close()
		_ = loopEnd.Close()
	}()
	rc, err := loopEnd.SyscallConn()
	if err != nil {
		return
	}
	var peek [1]byte
	for {
		// Wait until the loop has written something (or closed).
		closed := false
		werr := rc.Read(func(fd uintptr) bool {
			n, _, err := unix.Recvfrom(int(fd), peek[:], unix.MSG_PEEK)
			if err == unix.EAGAIN {
				return false
			}
			closed = n == 0 || err != nil
			return true
		})
		if werr != nil || closed {
			return
		}
		bp := outBufs.Get().(*[]byte)
		n, err := loopEnd.Read(*bp)
		if n > 0 {
			_, err = tc.Write((*bp)[:n])
		}
		outBufs.Put(bp)
		if err != nil && err != io.EOF || n == 0 {
			return
		}
	}
}

// shortOfFDs: holding descriptor fd leaves fewer than ReserveFDs free.
func (s *Server) shortOfFDs(fd int) bool {
	var lim unix.Rlimit
	return unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil && shortOfFDs(fd, lim.Cur, s.cfg.ReserveFDs)
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
