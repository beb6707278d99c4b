// Copyright (c) 2026 The beanpole authors. Licensed under the Apache License, Version 2.0.
//
// Tests for EnrollFD (beanpole's third_party/PATCHES.md). Run with:
//   go test -race -run Patch .

//go:build linux

package gnet

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// acceptRaw takes one connection off ln with accept4, as beanpole's
// acceptor does: a non-blocking descriptor gnet has never seen.
func acceptRaw(t *testing.T, ln net.Listener) int {
	t.Helper()
	rc, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	deadline := time.Now().Add(10 * time.Second)
	for fd < 0 && time.Now().Before(deadline) {
		_ = rc.Control(func(lfd uintptr) {
			fd, _, err = unix.Accept4(int(lfd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		})
		if fd < 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if fd < 0 {
		t.Fatalf("accept4: %v", err)
	}
	return fd
}

// EnrollFD hands over descriptors without waiting: many in flight at once
// each get OnOpen with their context, then traffic, with the addresses
// given (nil remote stays nil), and close cleanly.
func TestPatchEnrollFD(t *testing.T) {
	for _, mode := range rcModes {
		t.Run(mode.name, func(t *testing.T) {
			const n = 32
			h := newRCHandler()
			h.closeErr = make(chan error, n) // OnClose must not block the loop
			opened := make(chan any, 64)
			h.open = func(c Conn) ([]byte, Action) {
				if c.RemoteAddr() != nil {
					t.Errorf("RemoteAddr %v, want nil as enrolled", c.RemoteAddr())
				}
				opened <- c.Context()
				return nil, None
			}
			h.traffic = func(c Conn) Action {
				b, _ := c.Next(-1)
				_, _ = c.Write(bytes.ToUpper(b))
				return None
			}
			e := startRC(t, h, append([]Option{WithNumEventLoop(2)}, mode.opts...)...)
			ccs := make([]net.Conn, n)
			for i := range ccs {
				cc, err := net.Dial("tcp", e.ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				ccs[i] = cc
				if err := e.cli.EnrollFD(acceptRaw(t, e.ln), "tcp", e.ln.Addr(), nil, i); err != nil {
					t.Fatal(err)
				}
			}
			seen := map[any]bool{}
			for range ccs {
				select {
				case ctx := <-opened:
					seen[ctx] = true
				case <-time.After(10 * time.Second):
					t.Fatal("OnOpen did not run for every enrolled descriptor")
				}
			}
			if len(seen) != n {
				t.Fatalf("%d distinct contexts seen in OnOpen, want %d", len(seen), n)
			}
			for _, cc := range ccs {
				if _, err := cc.Write([]byte("ping")); err != nil {
					t.Fatal(err)
				}
				buf := make([]byte, 4)
				_ = cc.SetReadDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.ReadFull(cc, buf); err != nil || string(buf) != "PING" {
					t.Fatalf("echo: %q %v", buf, err)
				}
				_ = cc.Close()
			}
			for range ccs {
				select {
				case <-h.closeErr:
				case <-time.After(10 * time.Second):
					t.Fatal("OnClose did not run for every connection")
				}
			}
		})
	}
}

// A network EnrollFD does not handle is refused and the descriptor closed.
func TestPatchEnrollFDRefusesUDP(t *testing.T) {
	e := startRC(t, newRCHandler())
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.cli.EnrollFD(fd, "udp", nil, nil, nil); err == nil {
		t.Fatal("EnrollFD accepted a udp descriptor")
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
		t.Fatalf("the refused descriptor is still open: %v", err)
	}
}

// enrollFailHandler records OnEnrollFailed.
type enrollFailHandler struct {
	*rcHandler
	failed chan any
}

func (h enrollFailHandler) OnEnrollFailed(ctx any, err error) {
	if !errors.Is(err, unix.EPERM) {
		h.failed <- err
		return
	}
	h.failed <- ctx
}

// A descriptor the loop cannot register (epoll_ctl fails: a regular file
// here) is closed and the handler told, with its context; OnOpen and
// OnClose do not run.
func TestPatchEnrollFDFailureIsReported(t *testing.T) {
	h := enrollFailHandler{newRCHandler(), make(chan any, 1)}
	h.open = func(Conn) ([]byte, Action) { t.Error("OnOpen ran"); return nil, None }
	e := startRC(t, h)
	fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.cli.EnrollFD(fd, "unix", nil, nil, "ctx"); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-h.failed:
		if got != "ctx" {
			t.Fatalf("OnEnrollFailed got %v, want the context and EPERM", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnEnrollFailed did not run")
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
		t.Fatalf("the descriptor is still open: %v", err)
	}
	if n := e.cli.eng.eventLoops.index(0).enrolling.Load(); n != 0 {
		t.Fatalf("%d enrolments still counted in flight", n)
	}
}

// blockTask holds an event loop until released.
type blockTask struct{ started, release chan struct{} }

func (b blockTask) Run(context.Context) error {
	b.started <- struct{}{}
	<-b.release
	return nil
}

// With LeastConnections, descriptors enrolled while no loop can register
// them (each is busy) are spread evenly: the choice counts the enrolments
// in flight, not only the registered connections.
func TestPatchEnrollFDSpreadsBurst(t *testing.T) {
	h := newRCHandler()
	h.closeErr = make(chan error, 64)
	e := startRC(t, h, WithNumEventLoop(2), WithLoadBalancing(LeastConnections))
	b := blockTask{make(chan struct{}), make(chan struct{})}
	for i := 0; i < 2; i++ {
		if err := e.cli.eng.eventLoops.index(i).Execute(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	<-b.started
	<-b.started
	const n = 32
	for j := 0; j < n; j++ {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			close(b.release)
			t.Fatal(err)
		}
		defer unix.Close(fds[1])
		if err := e.cli.EnrollFD(fds[0], "unix", nil, nil, nil); err != nil {
			close(b.release)
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ {
		if got := e.cli.eng.eventLoops.index(i).enrolling.Load(); got != n/2 {
			t.Errorf("loop %d has %d enrolments queued, want %d", i, got, n/2)
		}
	}
	close(b.release)
	deadline := time.Now().Add(10 * time.Second)
	for e.cli.eng.eventLoops.index(0).countConn()+e.cli.eng.eventLoops.index(1).countConn() < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	for i := 0; i < 2; i++ {
		el := e.cli.eng.eventLoops.index(i)
		if c, q := el.countConn(), el.enrolling.Load(); c != n/2 || q != 0 {
			t.Errorf("loop %d: %d connections, %d in flight; want %d and 0", i, c, q, n/2)
		}
	}
}
