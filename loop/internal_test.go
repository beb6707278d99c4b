package loop

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/beanpole/beanpole/engine"
	"github.com/panjf2000/gnet/v2"
	"github.com/rs/zerolog"
)

// startInternal runs a server with a public listener (Serve) and an
// internal one (ServeInternal), returning their addresses.
func startInternal(t *testing.T) (*Server, *engine.Engine, string, string) {
	t.Helper()
	eng := engine.New(2)
	srv, err := New(Config{Loops: 2, MaxJobSize: 65535, Version: "test", Log: zerolog.Nop()}, eng)
	if err != nil {
		t.Fatal(err)
	}
	public := serve(t, srv)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeInternal(ln)
	return srv, eng, public, ln.Addr().String()
}

// readLine reads one reply line, CRLF included.
func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading a reply: %q (%v)", line, err)
	}
	return line
}

// jobStats reads a stats-job reply's YAML.
func jobStats(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	var n int
	if _, err := fmt.Sscanf(readLine(t, r), "OK %d\r\n", &n); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(r, b); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// An internal connection's parked reserve is cancelled by the cancel line:
// TIMED_OUT, the line has no reply of its own and what follows it runs.
// The line is seen whether it arrives on its own, with the reserve, or cut
// in two (the connection is read while the reserve waits).
func TestInternalCancelWait(t *testing.T) {
	_, eng, public, internal := startInternal(t)
	r := dial(t, internal)
	send(t, r, "reserve\r\n")
	awaitWaiting(t, eng, 1)
	send(t, r, "beanpole-cancel-wait\r\nlist-tube-used\r\n")
	expect(t, r, "TIMED_OUT\r\nUSING default\r\n")
	awaitWaiting(t, eng, 0)

	send(t, r, "reserve\r\nbeanpole-cancel-wait\r\nuse a\r\n")
	expect(t, r, "TIMED_OUT\r\nUSING a\r\n")

	send(t, r, "reserve\r\nbeanpole-cancel-")
	awaitWaiting(t, eng, 1)
	send(t, r, "wait\r\nuse b\r\n")
	expect(t, r, "TIMED_OUT\r\nUSING b\r\n")
	awaitWaiting(t, eng, 0)

	// The waits are gone: a job put now stays ready.
	p := dial(t, public)
	send(t, p, "put 0 0 10 1\r\nx\r\n")
	expect(t, p, "INSERTED 1\r\n")
	send(t, r, "reserve-with-timeout 0\r\n")
	expect(t, r, "RESERVED 1 1\r\nx\r\n")
}

// A cancel that comes after the wait had its answer gets the reserve's
// reply and then NOT_WAITING; one that races a put gets either that or
// TIMED_OUT alone. A job handed out in the race goes back with
// beanpole-unreserve, counting no release.
func TestInternalCancelRacingPut(t *testing.T) {
	_, eng, public, internal := startInternal(t)
	rc := dial(t, internal)
	r := bufio.NewReader(rc)
	p := dial(t, public)
	pr := bufio.NewReader(p)
	var id uint64
	put := func() {
		id++
		send(t, p, "put 5 0 10 1\r\nx\r\n")
		if got, want := readLine(t, pr), fmt.Sprintf("INSERTED %d\r\n", id); got != want {
			t.Fatalf("put: %q, want %q", got, want)
		}
	}
	// unreserve gives job id back and checks that it is ready, with its
	// priority, no release, and the reserve that took it taken back.
	unreserve := func() {
		t.Helper()
		send(t, rc, fmt.Sprintf("beanpole-unreserve %d\r\nstats-job %d\r\n", id, id))
		if got := readLine(t, r); got != "UNRESERVED\r\n" {
			t.Fatalf("unreserve: %q", got)
		}
		st := jobStats(t, r)
		for _, want := range []string{"\nstate: ready\n", "\npri: 5\n", "\nreleases: 0\n", "\nreserves: 0\n"} {
			if !strings.Contains(st, want) {
				t.Fatalf("stats-job after unreserve lacks %q:\n%s", want, st)
			}
		}
		send(t, p, fmt.Sprintf("delete %d\r\n", id))
		if got := readLine(t, pr); got != "DELETED\r\n" {
			t.Fatalf("delete: %q", got)
		}
	}

	// Answered before the cancel.
	send(t, rc, "reserve\r\n")
	awaitWaiting(t, eng, 1)
	put()
	awaitWaiting(t, eng, 0)
	send(t, rc, "beanpole-cancel-wait\r\n")
	if got, want := readLine(t, r), fmt.Sprintf("RESERVED %d 1\r\n", id); got != want {
		t.Fatalf("reserve: %q, want %q", got, want)
	}
	if got := readLine(t, r) + readLine(t, r); got != "x\r\nNOT_WAITING\r\n" {
		t.Fatalf("after RESERVED: %q", got)
	}
	unreserve()

	// Racing.
	outcomes := map[string]int{}
	for range 50 {
		send(t, rc, "reserve\r\n")
		awaitWaiting(t, eng, 1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = io.WriteString(p, "put 5 0 10 1\r\nx\r\n")
		}()
		send(t, rc, "beanpole-cancel-wait\r\n")
		<-done
		id++
		if got, want := readLine(t, pr), fmt.Sprintf("INSERTED %d\r\n", id); got != want {
			t.Fatalf("put: %q, want %q", got, want)
		}
		switch got := readLine(t, r); got {
		case "TIMED_OUT\r\n":
			outcomes["cancelled"]++
			send(t, rc, "reserve-with-timeout 0\r\n") // the job is ready: take it back
			if got, want := readLine(t, r)+readLine(t, r), fmt.Sprintf("RESERVED %d 1\r\nx\r\n", id); got != want {
				t.Fatalf("after a cancel: %q, want %q", got, want)
			}
		case fmt.Sprintf("RESERVED %d 1\r\n", id):
			outcomes["answered"]++
			if got := readLine(t, r) + readLine(t, r); got != "x\r\nNOT_WAITING\r\n" {
				t.Fatalf("after RESERVED: %q", got)
			}
		default:
			t.Fatalf("reply to the raced reserve: %q", got)
		}
		unreserve()
	}
	t.Logf("outcomes of the race: %v", outcomes)
}

func TestInternalCancelWhenNotWaiting(t *testing.T) {
	_, _, _, internal := startInternal(t)
	r := dial(t, internal)
	send(t, r, "beanpole-cancel-wait\r\nbeanpole-cancel-wait \r\nlist-tube-used\r\n")
	expect(t, r, "NOT_WAITING\r\nBAD_FORMAT\r\nUSING default\r\n")
}

// beanpole-unreserve gives back only a job this connection reserved.
func TestInternalUnreserveNotReserved(t *testing.T) {
	_, _, public, internal := startInternal(t)
	r := dial(t, internal)
	send(t, r, "beanpole-unreserve 1\r\nbeanpole-unreserve x\r\n")
	expect(t, r, "NOT_FOUND\r\nBAD_FORMAT\r\n")
	p := dial(t, public)
	send(t, p, "put 0 0 10 1\r\nx\r\nreserve\r\n")
	expect(t, p, "INSERTED 1\r\nRESERVED 1 1\r\nx\r\n")
	send(t, r, "beanpole-unreserve 1\r\n")
	expect(t, r, "NOT_FOUND\r\n")
	send(t, p, "delete 1\r\n")
	expect(t, p, "DELETED\r\n")
}

// beanpole-peek-watched names the job a reserve would take now from the
// watched tubes, most urgent first (priority, then id), paused tubes left
// out, and reserves nothing.
func TestInternalPeekWatchedNamesWhatAReserveWouldTake(t *testing.T) {
	_, _, public, internal := startInternal(t)
	r := dial(t, internal)
	send(t, r, "beanpole-peek-watched\r\nbeanpole-peek-watched x\r\n")
	expect(t, r, "NOT_FOUND\r\nBAD_FORMAT\r\n")
	p := dial(t, public)
	send(t, p, "use a\r\nput 5 0 10 1\r\nx\r\nuse b\r\nput 3 0 10 1\r\ny\r\nput 3 0 10 1\r\nz\r\nuse c\r\nput 1 0 10 1\r\nw\r\n")
	expect(t, p, "USING a\r\nINSERTED 1\r\nUSING b\r\nINSERTED 2\r\nINSERTED 3\r\nUSING c\r\nINSERTED 4\r\n")
	send(t, r, "watch a\r\nwatch b\r\nbeanpole-peek-watched\r\nbeanpole-peek-watched\r\n")
	expect(t, r, "WATCHING 2\r\nWATCHING 3\r\nREADY 2 3\r\nREADY 2 3\r\n")
	send(t, p, "pause-tube b 60\r\n")
	expect(t, p, "PAUSED\r\n")
	send(t, r, "beanpole-peek-watched\r\nwatch c\r\nbeanpole-peek-watched\r\nreserve-with-timeout 0\r\n")
	expect(t, r, "READY 1 5\r\nWATCHING 4\r\nREADY 4 1\r\nRESERVED 4 1\r\nw\r\n")
}

// To a public connection beanpole's own commands are unknown, as to
// upstream, parked or not: a parked reserve is not cancelled.
func TestPublicConnectionHasNoInternalCommands(t *testing.T) {
	_, eng, public, _ := startInternal(t)
	c := dial(t, public)
	send(t, c, "beanpole-cancel-wait\r\nbeanpole-unreserve 1\r\nbeanpole-cancel-waitx\r\nbeanpole-unreserve x\r\nbeanpole-peek-watched\r\n")
	expect(t, c, strings.Repeat("UNKNOWN_COMMAND\r\n", 5))
	send(t, c, "reserve\r\n")
	awaitWaiting(t, eng, 1)
	send(t, c, "beanpole-cancel-wait\r\n")
	p := dial(t, public)
	send(t, p, "put 0 0 10 1\r\nx\r\n")
	expect(t, p, "INSERTED 1\r\n")
	expect(t, c, "RESERVED 1 1\r\nx\r\nUNKNOWN_COMMAND\r\n")
	send(t, c, "beanpole-unreserve 1\r\n")
	expect(t, c, "UNKNOWN_COMMAND\r\n")
}

// waitingReads polls srv's loops, on their own goroutines, until a
// connection holds input while it waits, and reports whether gnet still
// reads it.
func waitingReads(t *testing.T, srv *Server) bool {
	t.Helper()
	type seen struct{ held, reading bool }
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		srv.mu.Lock()
		loops := make(map[gnet.EventLoop]*loopState, len(srv.loops))
		for el, ls := range srv.loops {
			loops[el] = ls
		}
		srv.mu.Unlock()
		found := make(chan seen, len(loops))
		for el, ls := range loops {
			_ = el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
				var s seen
				for c := range ls.heldBy {
					s = seen{true, !c.readPaused}
				}
				found <- s
				return nil
			}))
		}
		var held seen
		for range loops {
			if s := <-found; s.held {
				held = s
			}
		}
		if held.held {
			return held.reading
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no waiting connection holds input after 10 s")
	return false
}

// A public connection is not read while its reserve waits; an internal
// one is, and a command before the cancel line keeps the line from
// cancelling: it is answered after the reserve, NOT_WAITING.
func TestInternalConnectionIsReadWhileParked(t *testing.T) {
	for _, internal := range []bool{false, true} {
		t.Run(fmt.Sprint("internal=", internal), func(t *testing.T) {
			srv, eng, public, inAddr := startInternal(t)
			addr := public
			if internal {
				addr = inAddr
			}
			c := dial(t, addr)
			send(t, c, "reserve\r\n")
			awaitWaiting(t, eng, 1)
			send(t, c, "list-tube-used\r\n")
			if reading := waitingReads(t, srv); reading != internal {
				t.Fatalf("parked connection read: %v, want %v", reading, internal)
			}
			send(t, c, "beanpole-cancel-wait\r\n")
			p := dial(t, public)
			send(t, p, "put 0 0 10 1\r\nx\r\n")
			expect(t, p, "INSERTED 1\r\n")
			last := "UNKNOWN_COMMAND\r\n"
			if internal {
				last = "NOT_WAITING\r\n"
			}
			expect(t, c, "RESERVED 1 1\r\nx\r\nUSING default\r\n"+last)
		})
	}
}

// What an internal connection sends while its reserve waits is bounded by
// the input cap: past it, the connection is closed.
func TestInternalParkedInputIsCapped(t *testing.T) {
	srv, eng, _, internal := startInternal(t)
	c := dial(t, internal)
	send(t, c, "reserve\r\n")
	awaitWaiting(t, eng, 1)
	junk := strings.Repeat("list-tube-used\r\n", (srv.inCap+1<<20)/16)
	go func() { _, _ = io.WriteString(c, junk) }() // fails once the server closes
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.Copy(io.Discard, c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("not closed after %d bytes past the input cap of %d", len(junk), srv.inCap)
	}
	if n != 0 {
		t.Fatalf("%d bytes of replies from a connection closed for its input", n)
	}
}
