package cluster

import (
	"bytes"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
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

// forward has nd forward a new listener and returns its address.
func forward(t *testing.T, nd *Node) string {
	t.Helper()
	ln := listenLocal(t)
	fw := nd.Forward([]net.Listener{ln}, nil)
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
	addr := forward(t, announced(t))
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
	addr := forward(t, announced(t))
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
