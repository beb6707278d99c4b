// Copyright (c) 2026 The beanpole authors. Licensed under the Apache License, Version 2.0.
//
// Read control (see connection_readctl_unix.go) is not implemented on Windows.

package gnet

import errorx "github.com/panjf2000/gnet/v2/pkg/errors"

func (*conn) PeerClosed() bool  { return false }
func (*conn) PeerHangup() bool  { return false }
func (*conn) PauseRead() error  { return errorx.ErrUnsupportedOp }
func (*conn) ResumeRead() error { return errorx.ErrUnsupportedOp }
func (*conn) SetReadSize(int)   {}
