//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package gnet

import (
	"net"

	"golang.org/x/sys/unix"

	errorx "github.com/panjf2000/gnet/v2/pkg/errors"
	"github.com/panjf2000/gnet/v2/pkg/queue"
	"github.com/panjf2000/gnet/v2/pkg/socket"
)

// EnrollFD hands a connected, non-blocking stream socket that the caller
// accepted itself (accept4 with SOCK_NONBLOCK) to an event loop, without
// the dup, the address parsing and the wait for registration that
// EnrollContext costs, so that an acceptor can hand over connections as
// fast as it accepts them. network is "tcp" or "unix"; local and remote
// are what Conn.LocalAddr and Conn.RemoteAddr report (either may be nil:
// a server that accepts many connections can share one local address and
// look the peer up only when it needs it). ctx is set as the Conn's
// context before OnOpen runs.
//
// From the call on, gnet owns fd: it is closed on every failure, here or
// at registration (in the loop; OnOpen and OnClose never run then).
func (cli *Client) EnrollFD(fd int, network string, local, remote net.Addr, ctx any) error {
	if network != "tcp" && network != "unix" {
		_ = unix.Close(fd)
		return errorx.ErrUnsupportedProtocol
	}
	if network == "tcp" && cli.opts.TCPNoDelay == TCPNoDelay {
		if err := socket.SetNoDelay(fd, 1); err != nil {
			_ = unix.Close(fd)
			return err
		}
	}
	el := cli.eng.eventLoops.next(nil)
	c := newStreamConn(network, fd, el, nil, local, remote)
	c.SetContext(ctx)
	if err := el.poller.Trigger(queue.HighPriority, el.register, c); err != nil {
		_ = unix.Close(fd)
		c.release()
		return err
	}
	return nil
}
