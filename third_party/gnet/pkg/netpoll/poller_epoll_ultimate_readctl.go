// Copyright (c) 2026 The beanpole authors. Licensed under the Apache License, Version 2.0.

//go:build linux && poll_opt

package netpoll

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ModEvents: see poller_epoll_default_readctl.go.
func (p *Poller) ModEvents(pa *PollAttachment, read, write, hangup, edgeTriggered bool) error {
	var ev epollevent
	ev.events = modEvents(read, write, hangup, edgeTriggered)
	convertPollAttachment(unsafe.Pointer(&ev.data), pa)
	return os.NewSyscallError("epoll_ctl mod", epollCtl(p.fd, unix.EPOLL_CTL_MOD, pa.FD, &ev))
}

// Disarm: see poller_epoll_default_readctl.go.
func (p *Poller) Disarm(pa *PollAttachment) error {
	var ev epollevent
	ev.events = unix.EPOLLONESHOT
	convertPollAttachment(unsafe.Pointer(&ev.data), pa)
	return os.NewSyscallError("epoll_ctl mod", epollCtl(p.fd, unix.EPOLL_CTL_MOD, pa.FD, &ev))
}
