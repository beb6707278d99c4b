// Copyright (c) 2026 The beanpole authors. Licensed under the Apache License, Version 2.0.
//
// Read control (see connection_readctl_unix.go): events of a connection whose
// reads are off. Its epoll mask then holds at most EPOLLOUT and, while paused
// under WithHalfClose, EPOLLRDHUP; EPOLLERR and EPOLLHUP are always reported
// (until rearm disarms a connection that has seen EPOLLHUP).

package gnet

import (
	"io"

	"golang.org/x/sys/unix"

	"github.com/panjf2000/gnet/v2/pkg/netpoll"
)

func (el *eventloop) processReadOff(c *conn, ev netpoll.IOEvent) error {
	if ev&unix.EPOLLERR != 0 { // reset: it is dead
		return el.close(c, io.EOF)
	}
	if ev&unix.EPOLLHUP != 0 { // both directions shut
		if c.peerHup && c.writeShut {
			return nil // seen already: disarming reports it once more
		}
		if el.engine.opts.HalfClose {
			return el.hangup(c)
		}
		return el.close(c, io.EOF)
	}
	if ev&netpoll.WriteEvents != 0 {
		if err := el.writeEvent(c); err != nil || !c.opened {
			return err
		}
	}
	if ev&unix.EPOLLRDHUP != 0 && !c.peerHup { // the peer shut down while paused
		c.peerHup = true
		if err := c.rearm(); err != nil {
			return el.close(c, err)
		}
		return el.wake(c)
	}
	return nil // a stale EPOLLIN from before reads went off
}
