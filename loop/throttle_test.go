package loop

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestWokenThrottledConnectionsReplyGoesToItAlone: a connection can be
// parked and throttled at once (its pipelined peeks filled the output past
// the high-water mark, then its reserve parked). When a put wakes it, its
// RESERVED reply goes to it alone: the next connection the loop serves
// gets its own reply and nothing else.
func TestWokenThrottledConnectionsReplyGoesToItAlone(t *testing.T) {
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
