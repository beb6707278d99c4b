// Copyright (c) 2026 The beanpole authors. Licensed under the Apache License, Version 2.0.

//go:build darwin || dragonfly || freebsd || netbsd || openbsd

package netpoll

import errorx "github.com/panjf2000/gnet/v2/pkg/errors"

// ModEvents mirrors the epoll ModEvents, but kqueue pollers only support the two
// combinations upstream gnet uses: read, and read plus write (hangup is ignored).
func (p *Poller) ModEvents(pa *PollAttachment, read, write, _, edgeTriggered bool) error {
	switch {
	case !read:
		return errorx.ErrUnsupportedOp
	case write:
		return p.ModReadWrite(pa, edgeTriggered)
	default:
		return p.ModRead(pa, edgeTriggered)
	}
}

// Disarm is not supported by kqueue pollers.
func (*Poller) Disarm(*PollAttachment) error { return errorx.ErrUnsupportedOp }
