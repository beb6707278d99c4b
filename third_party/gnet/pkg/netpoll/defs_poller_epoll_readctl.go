// Copyright (c) 2026 The beanpole authors. Licensed under the Apache License, Version 2.0.

//go:build linux

package netpoll

import "golang.org/x/sys/unix"

// modEvents is the epoll event mask for ModEvents: with read and write it equals
// what ModReadWrite uses, with read alone what ModRead uses.
func modEvents(read, write, hangup, edgeTriggered bool) (ev uint32) {
	if read {
		ev |= ReadEvents
	}
	if write {
		ev |= WriteEvents
	}
	if hangup || read && edgeTriggered {
		ev |= unix.EPOLLRDHUP
	}
	if edgeTriggered {
		ev |= unix.EPOLLET
	}
	return
}
