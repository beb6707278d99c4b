// Copyright (c) 2026 The beanpole authors. Licensed under the Apache License, Version 2.0.

//go:build linux && !poll_opt

package netpoll

import (
	"os"

	"golang.org/x/sys/unix"
)

// ModEvents modifies the given file descriptor to wait for readable events if read is
// set, writable events if write is set, and the peer's shutdown (EPOLLRDHUP) if hangup
// is set (or, in edge-triggered mode, with read). With none, only EPOLLERR and EPOLLHUP
// (which epoll always reports) can fire.
func (p *Poller) ModEvents(pa *PollAttachment, read, write, hangup, edgeTriggered bool) error {
	ev := modEvents(read, write, hangup, edgeTriggered)
	return os.NewSyscallError("epoll_ctl mod",
		unix.EpollCtl(p.fd, unix.EPOLL_CTL_MOD, pa.FD, &unix.EpollEvent{Fd: int32(pa.FD), Events: ev}))
}

// Disarm modifies the given file descriptor to wait for nothing: with
// EPOLLONESHOT alone in its mask, epoll reports its EPOLLERR or EPOLLHUP at most
// once more (at once, if it holds already), then nothing until ModEvents.
func (p *Poller) Disarm(pa *PollAttachment) error {
	return os.NewSyscallError("epoll_ctl mod",
		unix.EpollCtl(p.fd, unix.EPOLL_CTL_MOD, pa.FD, &unix.EpollEvent{Fd: int32(pa.FD), Events: unix.EPOLLONESHOT}))
}
