// Copyright (c) 2026 The beanpole authors. Licensed under the Apache License, Version 2.0.
//
// Tests for the read-control patch (beanpole's third_party/PATCHES.md) when the
// peer closes a unix socket: the server's end then has both directions shut
// (EPOLLHUP; a write fails with EPIPE), and under WithHalfClose that is a
// half-close: the input sent before it is still delivered, output is dropped.
// Run with:
//   go test -race -run Patch .

//go:build linux

package gnet

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// dialUnix returns the client end of a new unix-socket connection and the
// server end, enrolled in gnet.
func (e *rcEnv) dialUnix(t *testing.T) (*net.UnixConn, Conn) {
	t.Helper()
	dir, err := os.MkdirTemp("", "rc") // a socket path must stay short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cc, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	gc, err := e.cli.Enroll(sc)
	if err != nil {
		t.Fatal(err)
	}
	return cc.(*net.UnixConn), gc
}

// epollEvents is the event mask the epoll instance of this process that
// watches fd holds for it, read from /proc/self/fdinfo.
func epollEvents(t *testing.T, fd int) (uint32, bool) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range ents {
		if l, _ := os.Readlink("/proc/self/fd/" + ent.Name()); l != "anon_inode:[eventpoll]" {
			continue
		}
		f, err := os.Open("/proc/self/fdinfo/" + ent.Name())
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// tfd:        9 events:       19 data: ...
			w := strings.Fields(sc.Text())
			if len(w) < 4 || w[0] != "tfd:" || w[1] != strconv.Itoa(fd) || w[2] != "events:" {
				continue
			}
			ev, err := strconv.ParseUint(w[3], 16, 32)
			_ = f.Close()
			if err != nil {
				t.Fatalf("fdinfo line %q: %v", sc.Text(), err)
			}
			return uint32(ev), true
		}
		_ = f.Close()
	}
	return 0, false
}

// The peer closes a unix socket while reads are paused: the hangup (EPOLLHUP
// without EPOLLERR) is reported like one after a half-close (PeerHangup, not
// PeerClosed), the connection stays open, output is dropped and the
// descriptor is disarmed (epoll would report EPOLLHUP on every wait); after
// ResumeRead the input still in the socket arrives, then EOF.
func TestPatchHangupUnixWhilePausedKeepsInput(t *testing.T) {
	for _, m := range rcModes {
		t.Run(m.name, func(t *testing.T) {
			h := newRCHandler()
			var (
				step int // loop-only
				got  []byte
				wn   int
				werr error
				mu   sync.Mutex
			)
			parked, hungUp := make(chan struct{}), make(chan struct{})
			h.traffic = func(c Conn) Action {
				buf, _ := c.Next(-1)
				mu.Lock()
				got = append(got, buf...)
				mu.Unlock()
				switch step {
				case 0: // "a": park
					if err := c.PauseRead(); err != nil {
						t.Error(err)
					}
					step++
					close(parked)
				case 1: // the hangup, while paused
					if !c.PeerHangup() || c.PeerClosed() || len(buf) != 0 {
						t.Errorf("step 1: hangup %v, closed %v, buffered %q", c.PeerHangup(), c.PeerClosed(), buf)
					}
					wn, werr = c.Write([]byte("dropped"))
					step++
					close(hungUp)
				default: // "b", then EOF
					if c.PeerClosed() {
						return Close
					}
				}
				return None
			}
			e := startRC(t, h, append([]Option{WithHalfClose(true)}, m.opts...)...)
			cc, gc := e.dialUnix(t)
			_, _ = cc.Write([]byte("a"))
			<-parked
			_, _ = cc.Write([]byte("b"))
			_ = cc.Close()
			select {
			case <-hungUp:
			case err := <-h.closeErr:
				t.Fatalf("closed on the hangup (err %v), want PeerHangup and the connection kept", err)
			case <-time.After(10 * time.Second):
				t.Fatal("the hangup was not reported")
			}
			var fd int
			onLoop(t, gc, func() {
				fd = gc.Fd()
				if wn != len("dropped") || werr != nil || gc.OutboundBuffered() != 0 {
					t.Errorf("Write after the hangup: %d, %v, %d bytes pending; want it dropped", wn, werr, gc.OutboundBuffered())
				}
			})
			// Disarmed: epoll reports its EPOLLHUP once more, then the mask
			// holds nothing that can fire.
			deadline := time.Now().Add(10 * time.Second)
			for {
				ev, ok := epollEvents(t, fd)
				if !ok {
					t.Fatalf("fd %d is in no epoll instance", fd)
				}
				if ev&^uint32(unix.EPOLLONESHOT|unix.EPOLLET) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("fd %d still armed for %#x after the hangup", fd, ev)
				}
				time.Sleep(10 * time.Millisecond)
			}
			onLoop(t, gc, func() {
				if err := gc.ResumeRead(); err != nil {
					t.Error(err)
				}
			})
			if err := h.waitClose(t); err != nil {
				t.Fatalf("OnClose err = %v, want nil", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if string(got) != "ab" {
				t.Fatalf("handler got %q, want %q", got, "ab")
			}
		})
	}
}

// A write fails with EPIPE because the peer closed the unix socket before gnet
// saw the hangup: under WithHalfClose the output is dropped, the connection
// stays open, and the input the peer sent before closing still arrives, then
// EOF.
func TestPatchWriteAfterUnixPeerClosedKeepsInput(t *testing.T) {
	for _, m := range rcModes {
		t.Run(m.name, func(t *testing.T) {
			h := newRCHandler()
			var (
				got     []byte
				mu      sync.Mutex
				written = make(chan string, 1)
			)
			started, peerClosed := make(chan struct{}), make(chan struct{})
			h.traffic = func(c Conn) Action {
				buf, _ := c.Next(-1)
				mu.Lock()
				first := len(got) == 0
				got = append(got, buf...)
				mu.Unlock()
				if first { // "a": answer it once the peer has closed
					close(started)
					<-peerClosed
					n, err := c.Write([]byte("reply"))
					written <- fmt.Sprintf("%d %v %d", n, err, c.OutboundBuffered())
					return None
				}
				if c.PeerClosed() {
					return Close
				}
				return None
			}
			e := startRC(t, h, append([]Option{WithHalfClose(true)}, m.opts...)...)
			cc, _ := e.dialUnix(t)
			_, _ = cc.Write([]byte("a"))
			<-started
			_, _ = cc.Write([]byte("b"))
			_ = cc.Close()
			close(peerClosed)
			if w := <-written; w != "5 <nil> 0" {
				t.Errorf("Write after the peer closed: n, err, pending = %s; want 5 <nil> 0 (dropped)", w)
			}
			if err := h.waitClose(t); err != nil {
				t.Fatalf("OnClose err = %v, want nil", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if string(got) != "ab" {
				t.Fatalf("handler got %q, want %q", got, "ab")
			}
		})
	}
}
