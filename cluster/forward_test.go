package cluster

import (
	"bytes"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// announced starts a group of three whose leader announces an echo
// server as its client address, and returns a follower that knows it.
func announced(t *testing.T) *Node {
	t.Helper()
	g := newGroup(t, 3)
	lead, _ := g.leader()
	echo := listenLocal(t)
	go serveEcho(echo)
	if err := lead.Announce(echo.Addr().String(), ""); err != nil {
		t.Fatal(err)
	}
	follower := g.nodes[0]
	if follower == lead {
		follower = g.nodes[1]
	}
	waitUntil(t, "the follower to know the leader's client address", func() bool { return follower.LeaderClient(false) != "" })
	return follower
}

// forward has nd forward a new listener with the given reserve and
// returns the listener's address.
func forward(t *testing.T, nd *Node, reserve int) string {
	t.Helper()
	ln := listenLocal(t)
	fw := nd.Forward([]net.Listener{ln}, nil, reserve)
	t.Cleanup(fw.Stop)
	return ln.Addr().String()
}

func listenLocal(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// serveEcho sends back what each connection sends, through a buffer of
// its own (io.Copy would splice, holding pipes), and half-closes it at
// the end.
func serveEcho(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			buf := make([]byte, 4096)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					_ = c.(*net.TCPConn).CloseWrite()
					return
				}
			}
		}()
	}
}

// echoed dials addr, sends one byte and reports whether it came back
// (false: closed unanswered). The connection stays open.
func echoed(t *testing.T, addr string) (net.Conn, bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte("x")); err != nil {
		return c, false
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	n, err := c.Read(b[:])
	switch {
	case n == 1 && b[0] == 'x':
		_ = c.SetReadDeadline(time.Time{})
		return c, true
	case n == 0 && err != nil && !os.IsTimeout(err):
		return c, false
	}
	t.Fatalf("a forwarded client got %q (%v)", b[:n], err)
	return nil, false
}

// openPipes counts this process's descriptors that are pipes.
func openPipes(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "pipe:") {
			n++
		}
	}
	return n
}

func TestForwarderCopiesBothWaysAndPassesTheHalfClose(t *testing.T) {
	addr := forward(t, announced(t), 0)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	go func() {
		_, _ = c.Write(want)
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%d of %d bytes back (%v)", len(got), len(want), err)
	}
}

// A forwarded client costs the follower its two sockets and nothing more:
// no pipe held while it idles, as io.Copy's splice holds one each way.
func TestIdleForwardedClientsHoldNoPipe(t *testing.T) {
	addr := forward(t, announced(t), 0)
	before := openPipes(t)
	for i := range 16 {
		if _, ok := echoed(t, addr); !ok {
			t.Fatalf("client %d closed unanswered", i)
		}
	}
	if after := openPipes(t); after > before {
		t.Fatalf("16 idle forwarded clients hold %d more pipe descriptors", after-before)
	}
}

// With a reserve that leaves room for a few clients only, those past it
// are closed unanswered and counted, and once forwarded clients leave,
// new ones are forwarded again.
func TestForwarderShedsClientsPastTheReserve(t *testing.T) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip(err)
	}
	follower := announced(t)
	// Every number below the first free one is taken: room is what the
	// forwarder may use above it, shared with this test's own sockets
	// (each client is four descriptors in this process: the test's, the
	// forwarder's two, the echo server's).
	const room = 64
	probe, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(probe)
	addr := forward(t, follower, int(lim.Cur)-probe-room)

	var open []net.Conn
	shed := 0
	for shed < 3 {
		if len(open) > room/4 {
			t.Fatalf("%d clients forwarded with room for %d descriptors", len(open), room)
		}
		c, ok := echoed(t, addr)
		if !ok {
			shed++
			continue
		}
		if shed > 0 {
			t.Fatalf("a client forwarded after one was shed, with nothing closed between")
		}
		open = append(open, c)
	}
	if len(open) == 0 {
		t.Fatalf("no client forwarded")
	}
	if got := follower.m.forwardRefused.Load(); got != uint64(shed) {
		t.Fatalf("forwardRefused %d, %d clients shed", got, shed)
	}
	if st := follower.Status().(Status); st.ForwardRefused != uint64(shed) {
		t.Fatalf("Status().ForwardRefused %d, %d clients shed", st.ForwardRefused, shed)
	}
	t.Logf("%d clients forwarded, then shed", len(open))

	for _, c := range open {
		c.Close()
	}
	waitUntil(t, "a client forwarded again", func() bool {
		c, ok := echoed(t, addr)
		c.Close()
		return ok
	})
}
