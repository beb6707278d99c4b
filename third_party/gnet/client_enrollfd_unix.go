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
// at registration (in the loop; OnOpen and OnClose never run then, and an
// EventHandler that implements EnrollFailedHandler is told).
//
// With LeastConnections, the loop is chosen counting the connections
// already queued to each loop, so a burst of enrolments is spread evenly.
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
	el.enrolling.Add(1)
	c := newStreamConn(network, fd, el, nil, local, remote)
	c.SetContext(ctx)
	if err := el.poller.Trigger(queue.HighPriority, registerEnrolled, c); err != nil {
		el.enrolling.Add(-1)
		_ = unix.Close(fd)
		c.release()
		return err
	}
	return nil
}

// EnrollFailedHandler is implemented by an EventHandler that wants to know
// when a descriptor handed to Client.EnrollFD could not be registered with
// the poller (epoll_ctl failed, e.g. at fs.epoll.max_user_watches). gnet has
// closed the descriptor; OnOpen and OnClose do not run for it.
// OnEnrollFailed runs on the event loop the descriptor was queued to, with
// the context given to EnrollFD.
type EnrollFailedHandler interface {
	OnEnrollFailed(ctx any, err error)
}

// registerEnrolled is the loop's task for a connection from EnrollFD: the
// registration of register0, telling the handler of a failure.
func registerEnrolled(a any) error {
	c := a.(*conn)
	el := c.loop
	addEvents := el.poller.AddRead
	if el.engine.opts.EdgeTriggeredIO {
		addEvents = el.poller.AddReadWrite
	}
	if err := addEvents(&c.pollAttachment, el.engine.opts.EdgeTriggeredIO); err != nil {
		el.enrolling.Add(-1)
		ctx := c.ctx
		_ = unix.Close(c.fd)
		c.release()
		if h, ok := el.eventHandler.(EnrollFailedHandler); ok {
			h.OnEnrollFailed(ctx, err)
		}
		return err
	}
	el.connections.addConn(c, el.idx)
	el.enrolling.Add(-1)
	return el.open(c)
}
