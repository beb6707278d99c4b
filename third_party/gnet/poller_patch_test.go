// Copyright (c) 2026 The beanpole authors. Licensed under the Apache License, Version 2.0.
//
// Tests for the poller's task rounds (beanpole's third_party/PATCHES.md). Run with:
//   go test -race -run Patch .

//go:build linux

package gnet

import (
	"sync/atomic"
	"testing"
	"time"
)

// A connection that keeps waking itself (a task queued by a task) does not
// keep the loop from another connection's input: a task queued during a
// round of tasks runs after the next epoll_wait, so the other connection's
// read event is served between two of its wake-ups.
func TestPatchSelfWakeDoesNotStarveOthers(t *testing.T) {
	const rounds = 1000
	var wakes atomic.Int32
	started := make(chan struct{})
	seenAt := make(chan int32, 1)
	h := newRCHandler()
	h.traffic = func(c Conn) Action {
		if c.Context() == "other" {
			_, _ = c.Next(-1)
			seenAt <- wakes.Load()
			return None
		}
		n := wakes.Add(1)
		if n == 1 {
			close(started)
		}
		for t0 := time.Now(); time.Since(t0) < 100*time.Microsecond; {
		}
		if n < rounds {
			_ = c.Wake(nil)
		}
		return None
	}
	e := startRC(t, h)
	_, busy := e.dial(t)
	cc, other := e.dial(t)
	onLoop(t, other, func() { other.SetContext("other") })
	if err := busy.Wake(nil); err != nil {
		t.Fatal(err)
	}
	<-started
	if _, err := cc.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-seenAt:
		if n >= rounds {
			t.Fatalf("the other connection's input was served after all %d wake-ups of the busy one", n)
		}
		t.Logf("the other connection's input was served after %d of %d wake-ups", n, rounds)
	case <-time.After(10 * time.Second):
		t.Fatal("the other connection's input was not served")
	}
}
