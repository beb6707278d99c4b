// Copyright (c) 2026 The beanpole authors. Licensed under the Apache License, Version 2.0.
//
// Read control (see connection_readctl_unix.go): events of a connection whose
// reads are off. Its epoll mask then holds at most EPOLLOUT and, while paused
// under WithHalfClose, EPOLLRDHUP; EPOLLERR and EPOLLHUP are always reported
// (until rearm disarms a connection whose peer has closed both directions).

package gnet

import (
	"io"

	"golang.org/x/sys/unix"

	"github.com/panjf2000/gnet/v2/pkg/netpoll"
)

func (el *eventloop) processReadOff(c *conn, ev netpoll.IOEvent) error {
	if ev&netpoll.ErrEvents != 0 {
		switch {
		case c.peerHup && c.writeShut:
			return nil // seen already: disarming reports it once more
		case !el.engine.opts.HalfClose, ev&unix.EPOLLERR != 0 && !c.peerHup && !resetAfterFIN(c.fd):
			return el.close(c, io.EOF) // a reset (or an error) before the peer's FIN: it is dead
		}
		// Both directions shut (EPOLLHUP), or a reset after the peer's FIN, the
		// answer of a peer that closed to output that reached it: what it sent
		// before is all there, only the output has ended.
		return el.hangup(c)
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

// resetAfterFIN reports whether fd's pending error is a TCP reset that came
// after the peer's FIN, which gnet may not have seen yet (EPOLLRDHUP comes in
// the same event): Linux then sets EPIPE, not ECONNRESET. Reading the error
// clears it.
func resetAfterFIN(fd int) bool {
	errno, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	return err == nil && unix.Errno(errno) == unix.EPIPE
}
