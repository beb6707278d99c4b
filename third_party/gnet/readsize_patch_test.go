// Copyright (c) 2026 The beanpole authors. Licensed under the Apache License, Version 2.0.
//
// Tests for SetReadSize (beanpole's third_party/PATCHES.md). Run with:
//   go test -race -run Patch .

//go:build linux

package gnet

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// SetReadSize caps each read(2) of a connection at the size given, from the
// next read on, and 0 restores reads of the whole buffer: with the input
// already waiting in the kernel, 10,000 bytes arrive in OnTraffic calls of
// exactly 100 bytes, then, after SetReadSize(0), 10,000 more in one; every
// byte intact and in order.
func TestPatchSetReadSize(t *testing.T) {
	for _, m := range rcModes {
		t.Run(m.name, func(t *testing.T) {
			const size = 10_000
			var mu sync.Mutex
			var got []byte
			var chunks []int
			h := newRCHandler()
			h.traffic = func(c Conn) Action {
				b, _ := c.Next(-1)
				mu.Lock()
				got = append(got, b...)
				if len(b) > 0 {
					chunks = append(chunks, len(b))
				}
				mu.Unlock()
				return None
			}
			e := startRC(t, h, m.opts...)
			cc, gc := e.dial(t)
			payload := rcPayload(2 * size)

			// send writes p while gc's reads are paused, waits until the
			// kernel holds all of it, and resumes with reads of readSize.
			send := func(p []byte, readSize int) []int {
				t.Helper()
				onLoop(t, gc, func() {
					if err := gc.PauseRead(); err != nil {
						t.Error(err)
					}
					gc.SetReadSize(readSize)
				})
				mu.Lock()
				chunks = nil
				had := len(got)
				mu.Unlock()
				if _, err := cc.Write(p); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "the input to reach the server's socket", func() bool {
					n, err := unix.IoctlGetInt(gc.Fd(), unix.SIOCINQ)
					return err == nil && n == len(p)
				})
				onLoop(t, gc, func() {
					if err := gc.ResumeRead(); err != nil {
						t.Error(err)
					}
				})
				waitFor(t, "the server to read it all", func() bool {
					mu.Lock()
					defer mu.Unlock()
					return len(got) == had+len(p)
				})
				mu.Lock()
				defer mu.Unlock()
				return append([]int(nil), chunks...)
			}

			small := send(payload[:size], 100)
			if len(small) != size/100 {
				t.Errorf("with SetReadSize(100): %d reads, want %d", len(small), size/100)
			}
			for _, n := range small {
				if n != 100 {
					t.Fatalf("with SetReadSize(100): reads of %v bytes, want 100 each", small)
				}
			}
			if whole := send(payload[size:], 0); len(whole) != 1 || whole[0] != size {
				t.Errorf("after SetReadSize(0): reads of %v bytes, want one of %d", whole, size)
			}
			mu.Lock()
			defer mu.Unlock()
			if !bytes.Equal(got, payload) {
				t.Fatal("the input arrived altered or out of order")
			}
		})
	}
}

// waitFor polls cond until it holds, failing the test after 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
