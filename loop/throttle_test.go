package loop

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestWokenConnectionsReplyGoesToItAloneBehindItsUnsentOutput: a parked
// connection can have megabytes of replies its client has not read still
// queued in gnet (its pipelined peeks, answered in the pass that parked
// its reserve). When a put wakes it, its RESERVED reply goes to it alone,
// after those replies: the next connection the loop serves gets its own
// reply and nothing else.
func TestWokenConnectionsReplyGoesToItAloneBehindItsUnsentOutput(t *testing.T) {
	// A high-water mark above the peeks' 3 MiB: the pass that answers them
	// never stops for output, so the reserve behind them always runs in
	// it, however little of the output the kernel has taken.
	addr, eng := startServerEng(t, 1, 1<<20, 16<<20)
	a := dial(t, addr)
	// A small fixed receive buffer (no autotuning) so the kernel cannot
	// absorb the replies A does not read yet: they pile up in gnet.
	_ = a.(*net.TCPConn).SetReadBuffer(16 << 10)
	body := strings.Repeat("x", 1<<20)
	send(t, a, "use big\r\nput 0 0 100 1048576\r\n"+body+"\r\n")
	expect(t, a, "USING big\r\nINSERTED 1\r\n")
	// 3 MiB of FOUND replies A does not read (under the 4 MiB of bodies
	// that make a batch be written at once), then a reserve that parks (A
	// watches only default, job 1 is in "big").
	send(t, a, strings.Repeat("peek 1\r\n", 3)+"reserve\r\n")
	awaitWaiting(t, eng, 1)

	p := dial(t, addr)
	send(t, p, "put 0 0 10 3\r\nabc\r\n")
	expect(t, p, "INSERTED 2\r\n")

	q := dial(t, addr)
	send(t, q, "list-tube-used\r\n")
	want := "USING default\r\n"
	_ = q.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, 64)
	n, _ := io.ReadAtLeast(q, got, len(want))
	if string(got[:n]) != want {
		t.Fatalf("connection Q got %q, want %q: another connection's reply leaked into it", got[:n], want)
	}
	found := "FOUND 1 1048576\r\n" + body + "\r\n"
	expect(t, a, strings.Repeat(found, 3)+"RESERVED 2 3\r\nabc\r\n")
}
