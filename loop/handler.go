package loop

import (
	"net/netip"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
)

// handler adapts gnet's callbacks to the server.
type handler struct {
	gnet.BuiltinEventEngine
	s *Server
}

func (h *handler) OnOpen(gc gnet.Conn) ([]byte, gnet.Action) {
	s := h.s
	c := &conn{gc: gc, ls: s.loopFor(gc.EventLoop())}
	ts, isTLS := gc.Context().(*tlsSession)
	if isTLS {
		c.gc = newTLSConn(gc, ts, c.ls)
		// The handshake may have read the first records already.
		_ = gc.Wake(nil)
	}
	c.ls.conns.Add(1)
	if isTLS {
		// Counted once its handshake is done: a failed one is no connection.
		s.eng.InitClient(&c.cl, c.ls.shard, c)
		if ts.internal {
			c.cl.SetInternal()
		}
	} else {
		s.eng.InitAccepted(&c.cl, c.ls.shard, c) // counted by the acceptor
		if _, ok := gc.Context().(internalConn); ok {
			c.cl.SetInternal()
		}
	}
	gc.SetContext(c)
	if s.cfg.Verbosity > 0 {
		s.log.Info().Int("fd", gc.Fd()).Str("remote", addr(gc)).Msg("accept")
	}
	return nil, gnet.None
}

func (h *handler) OnClose(gc gnet.Conn, err error) gnet.Action {
	c, _ := gc.Context().(*conn)
	if c == nil || c.closed {
		return gnet.None
	}
	s := h.s
	c.closed = true
	c.ls.conns.Add(-1)
	s.holdInput(c, 0)
	if c.closing {
		s.throttled.remove(c)
	}
	c.cl.Close()
	if c.connExtra != nil {
		c.releaseBody()
		s.chargeOutput(c) // gnet drops what was not sent
	}
	c.connExtra = nil
	if t, ok := c.gc.(*tlsConn); ok {
		t.closed()
	}
	if s.cfg.Verbosity > 0 {
		s.log.Info().Int("fd", gc.Fd()).AnErr("err", err).Msg("close")
	}
	return gnet.None
}

var _ gnet.EnrollFailedHandler = (*handler)(nil)

// OnEnrollFailed is gnet telling us that a loop could not register a
// connection Serve handed it (epoll_ctl failed: fs.epoll.max_user_watches,
// or out of kernel memory). gnet has closed it, so the client sees a close,
// as when we shed one for lack of descriptors, and it is counted the same
// way. The log line is rate-limited: a failure like that comes in floods.
func (h *handler) OnEnrollFailed(ctx any, err error) {
	s := h.s
	if _, isTLS := ctx.(*tlsSession); !isTLS {
		s.eng.Unaccepted(0) // the acceptor counted it
	}
	s.refused.Add(1)
	now := time.Now().UnixNano()
	last := s.enrollWarned.Load()
	if now-last >= int64(time.Second) && s.enrollWarned.CompareAndSwap(last, now) {
		s.log.Warn().Err(err).Uint64("refused", s.refused.Load()).Msg("closing new connections: the event loop cannot register them")
	}
}

func (h *handler) OnTraffic(gc gnet.Conn) gnet.Action {
	c, _ := gc.Context().(*conn)
	if c == nil || c.closed {
		return gnet.None
	}
	t, ok := c.gc.(*tlsConn)
	if !ok {
		return h.s.process(c)
	}
	t.fill()
	action := h.s.process(c)
	if action == gnet.Close && !c.closed {
		t.closeNotify()
	}
	t.settle()
	return action
}

func addr(gc gnet.Conn) string {
	if a := gc.RemoteAddr(); a != nil {
		return a.String()
	}
	// Serve does not keep the peer's address (accept.go): ask the kernel.
	sa, err := unix.Getpeername(gc.Fd())
	if err != nil {
		return ""
	}
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port)).String()
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(sa.Port)).String()
	case *unix.SockaddrUnix:
		return "unix:" + sa.Name
	}
	return ""
}
