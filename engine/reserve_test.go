package engine

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestMultiTubeReserveNeverPassesOverAnUrgentReadyJob: a reserve watching
// several tubes takes the most urgent ready job of one instant, deciding on
// all their tops together (take holds every watched tube's lock), even
// while other clients move jobs in and out of those tubes and change their
// priorities. Two jobs at priority 0 or 1 take turns being reserved by a
// mutator, which releases one before reserving the other, so at every
// instant one of them is ready (or held by the reserving client itself,
// which releases it before its next reserve); 40 more watched tubes hold a
// job at priority 1000 each. A reserve that compared tubes' tops read at
// different instants could see neither urgent job and take a 1000 (or time
// out). Run with -race it also checks that priorities are read under lock.
func TestMultiTubeReserveNeverPassesOverAnUrgentReadyJob(t *testing.T) {
	e := New(3)
	p, _ := newTestClient(e, 1)
	var urgent [2]*Tube
	for k, name := range []string{"x1", "x2"} {
		p.Use([]byte(name))
		urgent[k] = put(t, p, 0, 0, name).Tube
	}
	a, _ := newTestClient(e, 2)
	a.Watch([]byte("x1"))
	a.Watch([]byte("x2"))
	for i := range 40 {
		n := []byte{'y', byte('a' + i%26), byte('a' + i/26)}
		p.Use(n)
		put(t, p, 1000, 0, "y")
		a.Watch(n)
	}
	a.Ignore([]byte("default"))
	var m [2]*Client
	for k, name := range []string{"x1", "x2"} {
		m[k], _ = newTestClient(e, 3)
		m[k].Watch([]byte(name))
		m[k].Ignore([]byte("default"))
	}
	var held [2]*Job
	if j, o := m[1].Reserve(e.Now(), 0); o == GotJob {
		held[1] = j
	} else {
		t.Fatal("the mutator's first reserve")
	}

	const rounds = 20000
	var stop atomic.Bool
	var swaps, reserves atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; !stop.Load(); i++ {
			k := i % 2 // m[k] gives its job back, then m[1-k] takes the other
			if held[k] != nil {
				m[k].Release(held[k].ID, uint32(i/2%2), 0)
				held[k] = nil
			}
			if held[1-k] == nil {
				if j, o := m[1-k].Reserve(e.Now(), 0); o == GotJob {
					held[1-k] = j
				}
			}
			swaps.Add(1)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for (swaps.Load() < rounds || reserves.Load() < rounds) && time.Now().Before(deadline) {
		j, o := a.Reserve(e.Now(), 0)
		if o != GotJob {
			stop.Store(true)
			<-done
			t.Fatalf("reserve %d: %v with an urgent job ready throughout", reserves.Load(), o)
		}
		if j.Tube != urgent[0] && j.Tube != urgent[1] {
			stop.Store(true)
			<-done
			t.Fatalf("reserve %d took job %d of %s at priority %d with an urgent job ready throughout",
				reserves.Load(), j.ID, j.Tube.Name, j.Pri)
		}
		a.Release(j.ID, 0, 0)
		reserves.Add(1)
	}
	stop.Store(true)
	<-done
	t.Logf("%d reserves beside %d mutator rounds", reserves.Load(), swaps.Load())
}

// TestZeroTimeoutReserveInsideTheMarginIsDeadlineSoon: holding a job inside
// its safety margin, with the only ready job in a paused watched tube (so
// the "any ready" check lets the reserve proceed), reserve-with-timeout 0
// ends like upstream's timer does: inside the margin it answers
// DEADLINE_SOON (the third step of upstream's reserve), not TIMED_OUT.
func TestZeroTimeoutReserveInsideTheMarginIsDeadlineSoon(t *testing.T) {
	e := New(1)
	c, _ := newTestClient(e, 1)
	c.Put(e.Now(), e.NextID(), 0, 0, time.Second, []byte("a\r\n")) // ttr 1 s: in the margin at once
	if _, o := c.Reserve(c.e.Now(), 0); o != GotJob {
		t.Fatal("reserve")
	}
	c.Use([]byte("p"))
	c.Watch([]byte("p"))
	put(t, c, 0, 0, "b")
	c.PauseTube([]byte("p"), 100*time.Second)
	if _, o := c.Reserve(c.e.Now(), 0); o != DeadlineSoon {
		t.Fatalf("reserve-with-timeout 0 inside the margin: outcome %v, want DeadlineSoon (%v)", o, DeadlineSoon)
	}
}
