// Copyright (c) 2026 The beanpole authors. Licensed under the Apache License, Version 2.0.
//
// Tests for the read-control patch (beanpole's third_party/PATCHES.md): WithHalfClose,
// PeerClosed, PeerHangup, PauseRead and ResumeRead, over real loopback TCP sockets. Run with:
//   go test -race -run Patch .

//go:build linux

package gnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rcHandler is an EventHandler whose callbacks each test fills in.
type rcHandler struct {
	BuiltinEventEngine
	open     func(c Conn) ([]byte, Action)
	traffic  func(c Conn) Action
	closes   atomic.Int32
	closeErr chan error
}

func newRCHandler() *rcHandler { return &rcHandler{closeErr: make(chan error, 16)} }

func (h *rcHandler) OnOpen(c Conn) ([]byte, Action) {
	if h.open != nil {
		return h.open(c)
	}
	return nil, None
}

func (h *rcHandler) OnTraffic(c Conn) Action {
	if h.traffic != nil {
		return h.traffic(c)
	}
	return None
}

func (h *rcHandler) OnClose(_ Conn, err error) Action {
	h.closes.Add(1)
	h.closeErr <- err
	return None
}

// waitClose waits for the one OnClose of a test and checks that no second one follows.
func (h *rcHandler) waitClose(t *testing.T) error {
	t.Helper()
	var err error
	select {
	case err = <-h.closeErr:
	case <-time.After(10 * time.Second):
		t.Fatal("OnClose did not fire")
	}
	time.Sleep(100 * time.Millisecond)
	if n := h.closes.Load(); n != 1 {
		t.Fatalf("OnClose fired %d times, want 1", n)
	}
	return err
}

type rcEnv struct {
	cli  *Client
	ln   net.Listener
	stop func()
}

// startRC starts a gnet Client (one event loop) to enroll accepted sockets into,
// the way beanpole's loop package does.
func startRC(t *testing.T, h EventHandler, opts ...Option) *rcEnv {
	t.Helper()
	cli, err := NewClient(h, append([]Option{WithNumEventLoop(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err = cli.Start(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	e := &rcEnv{cli: cli, ln: ln}
	e.stop = func() { once.Do(func() { _ = ln.Close(); _ = cli.Stop() }) }
	t.Cleanup(e.stop)
	return e
}

// dial returns the client end of a new connection and the server end, enrolled in gnet.
func (e *rcEnv) dial(t *testing.T) (*net.TCPConn, Conn) {
	t.Helper()
	cc, err := net.Dial("tcp", e.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	sc, err := e.ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	gc, err := e.cli.Enroll(sc)
	if err != nil {
		t.Fatal(err)
	}
	return cc.(*net.TCPConn), gc
}

// onLoop runs fn on c's event loop and waits for it.
func onLoop(t *testing.T, c Conn, fn func()) {
	t.Helper()
	done := make(chan struct{})
	err := c.EventLoop().Execute(context.Background(), RunnableFunc(func(context.Context) error {
		defer close(done)
		fn()
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("event-loop task did not run")
	}
}

func rcPayload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

// readAll reads from cc until EOF, within a deadline.
func readAll(t *testing.T, cc net.Conn) []byte {
	t.Helper()
	_ = cc.SetReadDeadline(time.Now().Add(20 * time.Second))
	b, err := io.ReadAll(cc)
	if err != nil {
		t.Fatalf("client read: %v (after %d bytes)", err, len(b))
	}
	return b
}

var rcModes = []struct {
	name string
	opts []Option
}{
	{"LT", nil},
	{"ET", []Option{WithEdgeTriggeredIO(true)}},
}

// Half-close: the handler sees PeerClosed with every byte sent before the EOF,
// answers at once and again later from another goroutine (a slow operation),
// closes only once its output has drained, and the client reads it all, then EOF.
func TestPatchHalfClose(t *testing.T) {
	for _, m := range rcModes {
		t.Run(m.name, func(t *testing.T) {
			const size = 8 << 20
			type state struct {
				got           []byte
				done, closing bool
			}
			h := newRCHandler()
			seen := make(chan []byte, 1)
			var peerCalls, drainCloses atomic.Int32
			h.open = func(c Conn) ([]byte, Action) { c.SetContext(&state{}); return nil, None }
			h.traffic = func(c Conn) Action {
				st := c.Context().(*state)
				buf, _ := c.Next(-1)
				st.got = append(st.got, buf...)
				if !c.PeerClosed() {
					return None
				}
				peerCalls.Add(1)
				if st.closing { // a later OnTraffic: output drained (reads are off)
					if c.OutboundBuffered() == 0 {
						drainCloses.Add(1)
						return Close
					}
					return None
				}
				if st.done {
					return None
				}
				st.done = true
				data := append([]byte(nil), st.got...)
				seen <- data
				_, _ = c.Write([]byte(fmt.Sprintf("ACK %d\r\n", len(data))))
				go func() {
					time.Sleep(100 * time.Millisecond)
					_ = c.AsyncWrite(data, func(c Conn, err error) error {
						if err != nil {
							return err
						}
						st.closing = true
						if c.OutboundBuffered() == 0 {
							return c.Close()
						}
						return nil // the OnTraffic that reports the drain closes
					})
				}()
				return None
			}
			e := startRC(t, h, append([]Option{WithHalfClose(true)}, m.opts...)...)
			cc, _ := e.dial(t)

			payload := rcPayload(size)
			if _, err := cc.Write(payload); err != nil {
				t.Fatal(err)
			}
			if err := cc.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			select {
			case got := <-seen:
				if !bytes.Equal(got, payload) {
					t.Fatalf("handler saw %d bytes at PeerClosed, want the %d sent", len(got), size)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("handler never saw PeerClosed")
			}
			time.Sleep(300 * time.Millisecond) // let the echo back up in gnet's outbound buffer
			want := append([]byte(fmt.Sprintf("ACK %d\r\n", size)), payload...)
			if got := readAll(t, cc); !bytes.Equal(got, want) {
				t.Fatalf("client got %d bytes, want %d", len(got), len(want))
			}
			if err := h.waitClose(t); err != nil {
				t.Fatalf("OnClose err = %v, want nil", err)
			}
			t.Logf("OnTraffic calls with PeerClosed: %d; closed from the drain OnTraffic: %d",
				peerCalls.Load(), drainCloses.Load())
		})
	}
}

// A peer that half-closes without sending anything still gets one OnTraffic.
func TestPatchHalfCloseEmpty(t *testing.T) {
	h := newRCHandler()
	var calls atomic.Int32
	h.traffic = func(c Conn) Action {
		calls.Add(1)
		if c.PeerClosed() && c.InboundBuffered() == 0 {
			return Close
		}
		return None
	}
	e := startRC(t, h, WithHalfClose(true))
	cc, _ := e.dial(t)
	_ = cc.CloseWrite()
	if got := readAll(t, cc); len(got) != 0 {
		t.Fatalf("client got %q", got)
	}
	if err := h.waitClose(t); err != nil {
		t.Fatalf("OnClose err = %v, want nil", err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("OnTraffic calls = %d, want 1", n)
	}
}

// Without WithHalfClose, EOF still closes at once, as upstream.
func TestPatchEOFWithoutOption(t *testing.T) {
	h := newRCHandler()
	var got bytes.Buffer
	var mu sync.Mutex
	h.traffic = func(c Conn) Action {
		if c.PeerClosed() {
			t.Error("PeerClosed without WithHalfClose")
		}
		buf, _ := c.Next(-1)
		mu.Lock()
		got.Write(buf)
		mu.Unlock()
		return None
	}
	e := startRC(t, h)
	cc, _ := e.dial(t)
	_, _ = cc.Write([]byte("abc"))
	_ = cc.CloseWrite()
	if err := h.waitClose(t); !errors.Is(err, io.EOF) {
		t.Fatalf("OnClose err = %v, want EOF", err)
	}
	if b := readAll(t, cc); len(b) != 0 {
		t.Fatalf("client got %q", b)
	}
	mu.Lock()
	defer mu.Unlock()
	if got.String() != "abc" {
		t.Fatalf("handler got %q", got.String())
	}
}

// A reset after the half-close (a peer that closed, answering output that
// reached it) ends only the output: the handler gets one more OnTraffic, its
// writes are dropped, and the connection stays open until it closes it. A
// reset before any FIN, while reads are paused, still closes at once.
func TestPatchHalfCloseThenReset(t *testing.T) {
	t.Run("after FIN", func(t *testing.T) {
		h := newRCHandler()
		var calls int // loop-only
		seen, reset := make(chan struct{}), make(chan string, 1)
		h.traffic = func(c Conn) Action {
			if !c.PeerClosed() {
				return None
			}
			calls++
			if calls == 1 {
				close(seen)
				return None // keep the connection: wait for something that never comes
			}
			n, err := c.Write([]byte("late"))
			reset <- fmt.Sprintf("%v %d %v %d", c.PeerHangup(), n, err, c.OutboundBuffered())
			return Close
		}
		e := startRC(t, h, WithHalfClose(true))
		cc, _ := e.dial(t)
		_, _ = cc.Write([]byte("x"))
		_ = cc.CloseWrite()
		select {
		case <-seen:
		case <-time.After(5 * time.Second):
			t.Fatal("no PeerClosed")
		}
		_ = cc.SetLinger(0)
		_ = cc.Close() // RST
		if err := h.waitClose(t); err != nil {
			t.Fatalf("closed on the reset (OnClose err %v), want an OnTraffic and the handler's Close", err)
		}
		select {
		case got := <-reset:
			if got != "true 4 <nil> 0" {
				t.Errorf("after the reset: PeerHangup, Write n, err, pending = %s; want true 4 <nil> 0", got)
			}
		default:
			t.Fatal("no OnTraffic after the reset")
		}
	})
	// The FIN and the reset reach a paused connection while its loop is busy:
	// one event reports both.
	t.Run("FIN and reset at once", func(t *testing.T) {
		h := newRCHandler()
		paused, reset := make(chan struct{}), make(chan string, 1)
		h.traffic = func(c Conn) Action {
			if !c.PeerHangup() {
				_, _ = c.Discard(-1)
				if err := c.PauseRead(); err != nil {
					t.Error(err)
				}
				close(paused)
				return None
			}
			n, err := c.Write([]byte("late"))
			reset <- fmt.Sprintf("%d %v %d", n, err, c.OutboundBuffered())
			return Close
		}
		e := startRC(t, h, WithHalfClose(true))
		cc, gc := e.dial(t)
		_, _ = cc.Write([]byte("x"))
		<-paused
		busy, release := make(chan struct{}), make(chan struct{})
		err := gc.EventLoop().Execute(context.Background(), RunnableFunc(func(context.Context) error {
			close(busy)
			<-release
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		<-busy
		_ = cc.CloseWrite()
		_ = cc.SetLinger(0)
		_ = cc.Close() // RST
		close(release)
		if err := h.waitClose(t); err != nil {
			t.Fatalf("closed on the reset (OnClose err %v), want an OnTraffic and the handler's Close", err)
		}
		select {
		case got := <-reset:
			if got != "4 <nil> 0" {
				t.Errorf("after the reset: Write n, err, pending = %s; want 4 <nil> 0", got)
			}
		default:
			t.Fatal("no OnTraffic after the reset")
		}
	})
	t.Run("before FIN", func(t *testing.T) {
		h := newRCHandler()
		paused := make(chan struct{})
		h.traffic = func(c Conn) Action {
			if err := c.PauseRead(); err != nil {
				t.Error(err)
			}
			close(paused)
			return None
		}
		e := startRC(t, h, WithHalfClose(true))
		cc, _ := e.dial(t)
		_, _ = cc.Write([]byte("x"))
		<-paused
		_ = cc.SetLinger(0)
		_ = cc.Close() // RST
		if err := h.waitClose(t); err == nil {
			t.Fatal("OnClose err = nil, want an error")
		}
	})
}

// A hangup while reads are paused is reported at once (PeerHangup), before the
// input still in the kernel; after ResumeRead that input and then EOF follow.
// This is what a server needs to end a blocking wait when its client goes away.
func TestPatchHangupWhilePaused(t *testing.T) {
	for _, m := range rcModes {
		t.Run(m.name, func(t *testing.T) {
			h := newRCHandler()
			var (
				step   int // loop-only
				parked = make(chan struct{})
			)
			h.traffic = func(c Conn) Action {
				buf, _ := c.Peek(-1)
				switch step {
				case 0: // "wait\r\n": park
					if string(buf) != "wait\r\n" {
						t.Errorf("step 0: got %q", buf)
					}
					_, _ = c.Discard(len(buf))
					if err := c.PauseRead(); err != nil {
						t.Error(err)
					}
					step++
					close(parked)
				case 1: // the hangup, while paused
					if !c.PeerHangup() || c.PeerClosed() || len(buf) != 0 {
						t.Errorf("step 1: hangup %v, closed %v, buffered %q", c.PeerHangup(), c.PeerClosed(), buf)
					}
					_, _ = c.Write([]byte("TIMED_OUT\r\n"))
					if err := c.ResumeRead(); err != nil {
						t.Error(err)
					}
					step++
				case 2: // the input sent before the hangup, then EOF
					if bytes.HasPrefix(buf, []byte("ping\r\n")) {
						_, _ = c.Discard(6)
						_, _ = c.Write([]byte("PONG\r\n"))
					}
					if c.PeerClosed() && c.InboundBuffered() == 0 {
						return Close
					}
				}
				return None
			}
			e := startRC(t, h, append([]Option{WithHalfClose(true)}, m.opts...)...)
			cc, _ := e.dial(t)
			_, _ = cc.Write([]byte("wait\r\n"))
			<-parked
			_, _ = cc.Write([]byte("ping\r\n"))
			_ = cc.CloseWrite()
			if got := readAll(t, cc); string(got) != "TIMED_OUT\r\nPONG\r\n" {
				t.Fatalf("client got %q", got)
			}
			if err := h.waitClose(t); err != nil {
				t.Fatalf("OnClose err = %v, want nil", err)
			}
		})
	}
}

// PauseRead: a client that keeps writing fills the socket buffers and blocks,
// gnet's inbound buffer stays at one read chunk, and after ResumeRead every
// byte arrives intact.
func TestPatchPauseReadBounded(t *testing.T) {
	for _, m := range rcModes {
		t.Run(m.name, func(t *testing.T) {
			const (
				size  = 64 << 20
				chunk = 64 << 10
			)
			payload := rcPayload(size)
			h := newRCHandler()
			var (
				paused   bool // loop-only
				received int  // loop-only
				calls    atomic.Int32
				bad      atomic.Bool
				done     = make(chan struct{})
			)
			h.traffic = func(c Conn) Action {
				calls.Add(1)
				if !paused && received == 0 {
					paused = true
					if err := c.PauseRead(); err != nil {
						t.Error(err)
					}
					return None // consume nothing
				}
				buf, _ := c.Next(-1)
				if !bytes.Equal(buf, payload[received:received+len(buf)]) {
					bad.Store(true)
				}
				if received += len(buf); received == size {
					close(done)
				}
				return None
			}
			e := startRC(t, h, append([]Option{WithReadBufferCap(chunk)}, m.opts...)...)
			cc, gc := e.dial(t)

			var written atomic.Int64
			werr := make(chan error, 1)
			go func() {
				for off := 0; off < size; off += chunk {
					n, err := cc.Write(payload[off : off+chunk])
					written.Add(int64(n))
					if err != nil {
						werr <- err
						return
					}
				}
				werr <- nil
			}()

			// Wait until the writer is stuck.
			last, still := int64(-1), 0
			for still < 5 {
				time.Sleep(100 * time.Millisecond)
				if w := written.Load(); w == last {
					still++
				} else {
					last, still = w, 0
				}
			}
			if last >= size {
				t.Fatalf("writer finished (%d bytes) though the server paused reading", last)
			}
			var inbound int
			onLoop(t, gc, func() { inbound = gc.InboundBuffered() })
			t.Logf("paused: client wrote %d bytes and blocked; gnet holds %d; OnTraffic calls %d",
				last, inbound, calls.Load())
			if inbound > chunk {
				t.Fatalf("InboundBuffered = %d while paused, want <= %d", inbound, chunk)
			}
			if n := calls.Load(); n != 1 {
				t.Fatalf("OnTraffic ran %d times while paused, want 1", n)
			}

			onLoop(t, gc, func() {
				if err := gc.ResumeRead(); err != nil {
					t.Error(err)
				}
			})
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("not all data arrived after ResumeRead")
			}
			if err := <-werr; err != nil {
				t.Fatal(err)
			}
			if bad.Load() {
				t.Fatal("data corrupted")
			}
		})
	}
}

// ResumeRead delivers both what gnet already held (no read event will come for
// it) and what arrived in the kernel while paused.
func TestPatchResumeDeliversBuffered(t *testing.T) {
	h := newRCHandler()
	var (
		mu     sync.Mutex
		got    []byte
		paused atomic.Bool
		calls  atomic.Int32
	)
	arrived := make(chan struct{}, 8)
	h.traffic = func(c Conn) Action {
		calls.Add(1)
		if !paused.Load() && calls.Load() == 1 {
			paused.Store(true)
			if err := c.PauseRead(); err != nil {
				t.Error(err)
			}
			return None
		}
		buf, _ := c.Next(-1)
		mu.Lock()
		got = append(got, buf...)
		mu.Unlock()
		arrived <- struct{}{}
		return None
	}
	e := startRC(t, h)
	cc, gc := e.dial(t)
	_, _ = cc.Write([]byte("held "))
	for !paused.Load() {
		time.Sleep(10 * time.Millisecond)
	}
	onLoop(t, gc, func() {}) // the pausing OnTraffic has returned

	// 1. Only gnet's buffer holds data: ResumeRead must schedule an OnTraffic.
	onLoop(t, gc, func() { _ = gc.ResumeRead() })
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("no OnTraffic for buffered data after ResumeRead")
	}

	// 2. Only the kernel holds data: the re-armed EPOLLIN must report it.
	onLoop(t, gc, func() { _ = gc.PauseRead() })
	before := calls.Load()
	_, _ = cc.Write([]byte("kernel"))
	time.Sleep(300 * time.Millisecond)
	if n := calls.Load(); n != before {
		t.Fatalf("OnTraffic ran while paused")
	}
	onLoop(t, gc, func() { _ = gc.ResumeRead() })
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("no OnTraffic for kernel data after ResumeRead")
	}
	mu.Lock()
	defer mu.Unlock()
	if string(got) != "held kernel" {
		t.Fatalf("got %q", got)
	}
}

// While reads are paused, pending output is still flushed (EPOLLOUT stays armed),
// and an OnTraffic reports that it has drained. Covers a pause in OnOpen with
// OnOpen output, and a pause after a Write left a backlog.
func TestPatchPausedStillFlushes(t *testing.T) {
	for _, m := range rcModes {
		for _, where := range []string{"OnOpen", "OnTraffic"} {
			t.Run(m.name+"/"+where, func(t *testing.T) {
				const size = 8 << 20
				payload := rcPayload(size)
				h := newRCHandler()
				var (
					drained atomic.Int32 // OnTraffic calls with reads off and nothing left to send
					readIn  atomic.Int32 // OnTraffic calls that found input while paused
					backlog = make(chan int, 1)
				)
				paused := where == "OnOpen"
				h.open = func(c Conn) ([]byte, Action) {
					if where != "OnOpen" {
						return nil, None
					}
					if err := c.PauseRead(); err != nil {
						t.Error(err)
					}
					return payload, None
				}
				h.traffic = func(c Conn) Action {
					if !paused { // OnTraffic variant: the client's "go"
						_, _ = c.Next(-1)
						_, _ = c.Write(payload)
						backlog <- c.OutboundBuffered()
						paused = true
						if err := c.PauseRead(); err != nil {
							t.Error(err)
						}
						return None
					}
					if c.InboundBuffered() > 0 {
						readIn.Add(1)
					}
					if c.OutboundBuffered() == 0 {
						drained.Add(1)
					}
					return None
				}
				e := startRC(t, h, m.opts...)
				cc, gc := e.dial(t)
				if where == "OnTraffic" {
					_, _ = cc.Write([]byte("go"))
					if b := <-backlog; b == 0 {
						t.Fatal("the Write left no backlog; the test proves nothing")
					}
				}
				time.Sleep(200 * time.Millisecond)
				_, _ = cc.Write([]byte("more")) // must not be read while paused
				buf := make([]byte, size)
				_ = cc.SetReadDeadline(time.Now().Add(20 * time.Second))
				if _, err := io.ReadFull(cc, buf); err != nil {
					t.Fatalf("client read while the server is paused: %v", err)
				}
				if !bytes.Equal(buf, payload) {
					t.Fatal("data corrupted")
				}
				time.Sleep(200 * time.Millisecond)
				var out, in int
				onLoop(t, gc, func() { out, in = gc.OutboundBuffered(), gc.InboundBuffered() })
				if out != 0 || in != 0 || readIn.Load() != 0 {
					t.Fatalf("outbound %d, inbound %d, OnTraffic with input %d; want 0, 0, 0", out, in, readIn.Load())
				}
				if drained.Load() == 0 {
					t.Fatal("no OnTraffic reported the drained output")
				}
				onLoop(t, gc, func() { _ = gc.ResumeRead() })
				deadline := time.Now().Add(5 * time.Second)
				for readIn.Load() == 0 && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if readIn.Load() == 0 {
					t.Fatal("input sent while paused never arrived")
				}
			})
		}
	}
}

// A connection whose reads stay on also hears, by an OnTraffic with nothing
// to read, that a writable event emptied its outbound buffer: a handler can
// account for held output without pausing reads (two epoll_ctl calls) to
// learn when it is sent.
func TestPatchDrainReportedWithReadsOn(t *testing.T) {
	for _, m := range rcModes {
		t.Run(m.name, func(t *testing.T) {
			const size = 8 << 20
			payload := rcPayload(size)
			h := newRCHandler()
			var (
				wrote   atomic.Bool
				drained atomic.Int32 // OnTraffic calls after the write, with nothing left to send
				backlog = make(chan int, 1)
			)
			h.traffic = func(c Conn) Action {
				if !wrote.Load() {
					_, _ = c.Next(-1)
					_, _ = c.Write(payload)
					wrote.Store(true)
					backlog <- c.OutboundBuffered()
					return None
				}
				if c.InboundBuffered() == 0 && c.OutboundBuffered() == 0 {
					drained.Add(1)
				}
				return None
			}
			e := startRC(t, h, m.opts...)
			cc, _ := e.dial(t)
			_, _ = cc.Write([]byte("go"))
			if b := <-backlog; b == 0 {
				t.Fatal("the Write left no backlog; the test proves nothing")
			}
			buf := make([]byte, size)
			_ = cc.SetReadDeadline(time.Now().Add(20 * time.Second))
			if _, err := io.ReadFull(cc, buf); err != nil {
				t.Fatalf("client read: %v", err)
			}
			if !bytes.Equal(buf, payload) {
				t.Fatal("data corrupted")
			}
			deadline := time.Now().Add(20 * time.Second)
			for drained.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if drained.Load() == 0 {
				t.Fatal("no OnTraffic reported the drained output")
			}
		})
	}
}

// Stopping the engine closes paused and half-closed connections, once each.
func TestPatchStopWithReadsOff(t *testing.T) {
	h := newRCHandler()
	ready := make(chan struct{}, 2)
	h.traffic = func(c Conn) Action {
		if c.PeerClosed() {
			ready <- struct{}{}
			return None
		}
		if err := c.PauseRead(); err != nil {
			t.Error(err)
		}
		ready <- struct{}{}
		return None
	}
	e := startRC(t, h, WithHalfClose(true))
	c1, _ := e.dial(t)
	c2, _ := e.dial(t)
	_, _ = c1.Write([]byte("pause me"))
	_ = c2.CloseWrite()
	for i := 0; i < 2; i++ {
		select {
		case <-ready:
		case <-time.After(5 * time.Second):
			t.Fatal("connections not set up")
		}
	}
	e.stop()
	if n := h.closes.Load(); n != 2 {
		t.Fatalf("OnClose fired %d times, want 2", n)
	}
	// c1 left unread input in the server's socket, so its close may come as a reset.
	for _, cc := range []net.Conn{c1, c2} {
		_ = cc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := cc.Read(make([]byte, 1)); err == nil || (cc == c2 && err != io.EOF) {
			t.Fatalf("client read after Stop: %v, want EOF", err)
		}
	}
}
