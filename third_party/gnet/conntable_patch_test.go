//go:build linux && !gc_opt

package gnet

import (
	"sync"
	"testing"
)

// Descriptor numbers far above what the tests open for real, so the fake
// connections below never meet a real one in the shared table.
const (
	testFdBase = 900_000
	testFdHigh = fdChunkSize*fdChunks + 7 // beyond the table: the locked map
)

func TestPatchConnTableShowsEachLoopOnlyItsOwnConnections(t *testing.T) {
	for _, fd := range []int{testFdBase, testFdHigh} {
		a, b := new(eventloop), new(eventloop)
		ca := &conn{fd: fd, loop: a}
		a.connections.addConn(ca, 0)
		if a.connections.getConn(fd) != ca || b.connections.getConn(fd) != nil {
			t.Fatalf("fd %d: loop a must see its connection, loop b nothing", fd)
		}
		// a closes the descriptor; the kernel hands the number to a
		// connection of b's before a's stale bookkeeping is done.
		cb := &conn{fd: fd, loop: b}
		b.connections.addConn(cb, 1)
		if a.connections.getConn(fd) != nil {
			t.Fatalf("fd %d: loop a sees loop b's connection", fd)
		}
		a.connections.delConn(ca)
		if b.connections.getConn(fd) != cb {
			t.Fatalf("fd %d: loop a's late delete removed loop b's connection", fd)
		}
		if a.connections.loadCount() != 0 || b.connections.loadCount() != 1 {
			t.Fatalf("fd %d: counts %d and %d, want 0 and 1", fd, a.connections.loadCount(), b.connections.loadCount())
		}
		var seenA, seenB []*conn
		a.connections.iterate(func(c *conn) bool { seenA = append(seenA, c); return true })
		b.connections.iterate(func(c *conn) bool { seenB = append(seenB, c); return true })
		if len(seenA) != 0 || len(seenB) != 1 || seenB[0] != cb {
			t.Fatalf("fd %d: iterate gave a %v and b %v", fd, seenA, seenB)
		}
		b.connections.delConn(cb)
		if b.connections.getConn(fd) != nil {
			t.Fatalf("fd %d: deleted connection still found", fd)
		}
	}
}

// Loops take and free descriptor numbers from one pool, as the kernel hands
// them out, while every loop also looks up numbers held by the others: no
// loop may ever find a connection that is not its own, nor miss its own.
// Run under -race.
func TestPatchConnTableUnderConcurrentReuse(t *testing.T) {
	const loops, fds, rounds = 4, 16, 20000
	pool := make(chan int, fds+1)
	for i := 0; i < fds; i++ {
		pool <- testFdBase + 1000 + i
	}
	pool <- testFdHigh + 1 // one beyond the table too
	var wg sync.WaitGroup
	errs := make(chan string, loops)
	for i := 0; i < loops; i++ {
		el := new(eventloop)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				fd := <-pool
				c := &conn{fd: fd, loop: el}
				el.connections.addConn(c, 0)
				if el.connections.getConn(fd) != c {
					errs <- "a loop lost its own connection"
					return
				}
				other := testFdBase + 1000 + r%fds
				if o := el.connections.getConn(other); o != nil && o.loop != el {
					errs <- "a loop found another loop's connection"
					return
				}
				el.connections.delConn(c)
				pool <- fd
			}
			if n := el.connections.loadCount(); n != 0 {
				errs <- "a loop's count did not return to zero"
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}
