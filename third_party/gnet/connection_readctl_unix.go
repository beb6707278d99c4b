// Copyright (c) 2026 The beanpole authors. Licensed under the Apache License, Version 2.0.
//
// Read control for stream connections, added to gnet v2.10.0 by beanpole (see
// third_party/PATCHES.md there): EOF as an event (WithHalfClose),
// PauseRead/ResumeRead and the size of each read (SetReadSize). A connection's poller interest is a function of its read
// state and of whether outbound data is pending; rearm is the one place applying it.

//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package gnet

import (
	"io"
	"math"
	"net"
	"os"

	"golang.org/x/sys/unix"

	errorx "github.com/panjf2000/gnet/v2/pkg/errors"
	"github.com/panjf2000/gnet/v2/pkg/queue"
)

// readOff reports whether gnet must not read from c.
func (c *conn) readOff() bool { return c.readPaused || c.peerEOF }

// rearm sets c's poller interest: readable unless reads are off; writable when
// outbound data is pending (always in ET mode, as registered); the peer's hangup
// while paused under WithHalfClose until it has been seen. With reads on, it
// issues exactly the ModRead/ModReadWrite that upstream gnet issued in its place.
// A connection whose reads are off and whose peer has shut both directions waits
// for nothing from the socket, which reports EPOLLHUP on every poll: it is
// disarmed instead.
func (c *conn) rearm() error {
	if c.readOff() && c.peerHup && c.writeShut {
		return c.loop.poller.Disarm(&c.pollAttachment)
	}
	isET := c.loop.engine.opts.EdgeTriggeredIO
	hangup := c.readPaused && !c.peerHup && c.loop.engine.opts.HalfClose
	return c.loop.poller.ModEvents(&c.pollAttachment,
		!c.readOff(), isET || !c.outboundBuffer.IsEmpty(), hangup, isET)
}

// halfClose handles EOF on read under WithHalfClose: stop reading, keep the
// connection open for writing, and give the handler one OnTraffic to finish.
func (el *eventloop) halfClose(c *conn) error {
	c.peerEOF, c.peerHup = true, true
	if err := c.rearm(); err != nil { // e.g. kqueue: fall back to closing, as upstream does
		return el.close(c, os.NewSyscallError("read", io.EOF))
	}
	return el.handleAction(c, el.eventHandler.OnTraffic(c))
}

// hangup handles, on a connection whose reads are off under WithHalfClose,
// EPOLLHUP without EPOLLERR (the peer shut both directions: a unix socket's
// peer closed it) and EPOLLERR after the peer's FIN (a TCP peer that closed
// reset the connection when output reached it). As for a half-close, the
// handler finishes what it has read, and what is still in the socket once it
// resumes reading; its output is dropped.
func (el *eventloop) hangup(c *conn) error {
	c.peerHup = true
	if err := c.shutWrite(); err != nil {
		return el.close(c, err)
	}
	return el.wake(c)
}

// peerGoneOnWrite reports whether a write error means, under WithHalfClose, that
// the peer takes no more output while the connection may still hold its input.
func (c *conn) peerGoneOnWrite(err error) bool {
	return err == unix.EPIPE && c.loop.engine.opts.HalfClose
}

// shutWrite drops c's output, now and from here on: the peer cannot take it.
func (c *conn) shutWrite() error {
	c.writeShut = true
	c.outboundBuffer.Release()
	return c.rearm()
}

// writeEvent is el.write for a writable event or its ET follow-up task: when it
// empties the outbound buffer, an OnTraffic tells the handler that its output
// has drained, whether reads are on or off, so that a handler can account for
// held output without pausing reads to hear of it.
func (el *eventloop) writeEvent(c *conn) error {
	pending := !c.outboundBuffer.IsEmpty()
	if err := el.write(c); err != nil {
		return err
	}
	if pending && c.opened && c.outboundBuffer.IsEmpty() {
		return el.wake(c)
	}
	return nil
}

func (c *conn) PeerClosed() bool { return c.peerEOF }
func (c *conn) PeerHangup() bool { return c.peerHup }

func (c *conn) SetReadSize(n int) {
	switch {
	case n <= 0:
		c.readSize = 0
	case uint64(n) > math.MaxUint32:
		c.readSize = math.MaxUint32
	default:
		c.readSize = uint32(n)
	}
}

func (c *conn) PauseRead() error {
	switch {
	case c.isDatagram:
		return errorx.ErrUnsupportedOp
	case !c.opened:
		return net.ErrClosed
	case c.readPaused:
		return nil
	}
	c.readPaused = true
	if err := c.rearm(); err != nil {
		c.readPaused = false
		return err
	}
	return nil
}

func (c *conn) ResumeRead() error {
	switch {
	case c.isDatagram:
		return errorx.ErrUnsupportedOp
	case !c.opened:
		return net.ErrClosed
	case !c.readPaused:
		return nil
	}
	c.readPaused = false
	if err := c.rearm(); err != nil {
		c.readPaused = true
		return err
	}
	if c.InboundBuffered() > 0 { // no read event will come for data gnet already holds
		return c.loop.poller.Trigger(queue.LowPriority, c.resumeWake, nil)
	}
	return nil
}

func (c *conn) resumeWake(_ any) error {
	if !c.opened || c.readPaused || c.InboundBuffered() == 0 {
		return nil
	}
	return c.loop.wake(c)
}
