package engine

import (
	"testing"
	"time"
)

// BenchmarkPipelinedDrainOfDeepTube is a worker pipelining 64 reserves
// against a tube half a million jobs deep, deleting each job 64 reserves
// after it took it: the shape of make bench's pipelined reserve+delete.
// It measures the heap's sift at depth and what a reserve costs a client
// that already holds many jobs.
func BenchmarkPipelinedDrainOfDeepTube(b *testing.B) {
	const depth, window = 500_000, 64
	e := New(1)
	c, _ := newTestClient(e, 1)
	body := []byte("0123456789012345678901234567890123456789012345678901234567890123\r\n")
	fill := func() {
		for range depth {
			if _, err := c.Put(e.Now(), e.NextID(), 1024, 0, time.Minute, body); err != nil {
				b.Fatal(err)
			}
		}
	}
	fill()
	var held [window]uint64
	b.ResetTimer()
	for i := range b.N {
		j, o := c.Reserve(c.e.Now(), 0)
		if o != GotJob {
			b.StopTimer()
			fill()
			b.StartTimer()
			if j, o = c.Reserve(c.e.Now(), 0); o != GotJob {
				b.Fatalf("reserve: %v", o)
			}
		}
		slot := &held[i%window]
		if *slot != 0 {
			if ok, err := c.Delete(c.e.Now(), *slot); !ok || err != nil {
				b.Fatalf("delete %d: %v %v", *slot, ok, err)
			}
		}
		*slot = j.ID
	}
}

// BenchmarkPutsIntoDeepTube is a producer putting into a tube until it is
// half a million jobs deep, then starting again on a fresh engine: the
// shape of make bench's pipelined puts. It measures the id index and the
// ready heap as they grow, and the collector's share of a growing heap.
func BenchmarkPutsIntoDeepTube(b *testing.B) {
	const depth = 500_000
	body := []byte("0123456789012345678901234567890123456789012345678901234567890123\r\n")
	var e *Engine
	var c *Client
	for i := range b.N {
		if i%depth == 0 {
			b.StopTimer()
			e = New(1)
			c, _ = newTestClient(e, 1)
			b.StartTimer()
		}
		if _, err := c.Put(e.Now(), e.NextID(), 1024, 0, time.Minute, append([]byte(nil), body...)); err != nil {
			b.Fatal(err)
		}
	}
}
