package loop

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/beanpole/beanpole/codec"
	"github.com/beanpole/beanpole/engine"
	"github.com/rs/zerolog"
)

// startServerCfg is startServer with a custom loop count and flow-control
// limits.
func startServerCfg(t testing.TB, loops int, maxJob uint32, highWater int) string {
	t.Helper()
	addr, _ := startServerEng(t, loops, maxJob, highWater)
	return addr
}

// startServerEng is startServerCfg that also gives the server's engine, for
// tests that wait for a state by polling its stats.
func startServerEng(t testing.TB, loops int, maxJob uint32, highWater int) (string, *engine.Engine) {
	t.Helper()
	eng := engine.New(loops)
	srv, err := New(Config{Loops: loops, MaxJobSize: maxJob, Version: "test", Log: zerolog.Nop(), HighWater: highWater}, eng)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Stop(context.Background()) })
	return ln.Addr().String(), eng
}

// awaitWaiting polls the engine until current-waiting is n.
func awaitWaiting(t testing.TB, eng *engine.Engine, n uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st codec.ServerStats
		eng.Stats(&st)
		if st.CurrentWaiting == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("current-waiting %d after 10 s, want %d", st.CurrentWaiting, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestReviewWakeWhileThrottledLeaksReply: a connection that is both parked
// and throttled (its pipelined peeks filled the output past the high-water
// mark, then its reserve parked) gets its RESERVED reply appended to the
// loop-shared output batch by conn.Run, but process() returns early for a
// throttled connection without flushing it. The reply is then written to
// whichever connection the loop serves next.
func TestReviewWakeWhileThrottledLeaksReply(t *testing.T) {
	addr, eng := startServerEng(t, 1, 1<<20, 256<<10)
	a := dial(t, addr)
	// A small fixed receive buffer (no autotuning) so the kernel cannot
	// absorb the replies A never reads: they must pile up in gnet.
	_ = a.(*net.TCPConn).SetReadBuffer(16 << 10)
	body := strings.Repeat("x", 1<<20)
	send(t, a, "use big\r\nput 0 0 100 1048576\r\n"+body+"\r\n")
	expect(t, a, "USING big\r\nINSERTED 1\r\n")
	// 3 MiB of FOUND replies A never reads (under the 4 MiB of bodies that
	// make a batch be written at once, so the reserve runs in the same
	// pass), then a reserve that parks (A watches only default, job 1 is in
	// "big").
	send(t, a, strings.Repeat("peek 1\r\n", 3)+"reserve\r\n")
	awaitWaiting(t, eng, 1)

	p := dial(t, addr)
	send(t, p, "put 0 0 10 3\r\nabc\r\n")
	expect(t, p, "INSERTED 2\r\n")
	time.Sleep(100 * time.Millisecond)

	q := dial(t, addr)
	send(t, q, "list-tube-used\r\n")
	want := "USING default\r\n"
	_ = q.SetReadDeadline(time.Now().Add(2 * time.Second))
	got := make([]byte, 64)
	n, _ := io.ReadAtLeast(q, got, len(want))
	if string(got[:n]) != want {
		t.Fatalf("connection Q got %q, want %q: another connection's reply leaked into it", got[:n], want)
	}
}
