package loop

import (
	"net/netip"

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
	s.eng.InitClient(&c.cl, c.ls.shard, c)
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
	if s.cfg.Verbosity > 0 {
		s.log.Info().Int("fd", gc.Fd()).AnErr("err", err).Msg("close")
	}
	return gnet.None
}

func (h *handler) OnTraffic(gc gnet.Conn) gnet.Action {
	c, _ := gc.Context().(*conn)
	if c == nil || c.closed {
		return gnet.None
	}
	return h.s.process(c)
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
