package cluster

import (
	"bytes"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// announced starts a group of three whose leader announces an echo
// server as its client address, and returns a follower that knows it.
func announced(t *testing.T) *Node {
	t.Helper()
	_, follower := announcedIn(t, newGroup(t, 3))
	return follower
}

// announcedIn has g's leader announce an echo server as its client
// address, and returns the leader and a follower that knows it.
func announcedIn(t *testing.T, g *group, excluded ...*Node) (lead, follower *Node) {
	t.Helper()
	lead, _ = g.leader(excluded...)
	echo := listenLocal(t)
	go serveEcho(echo)
	if err := lead.Announce(echo.Addr().String(), ""); err != nil {
		t.Fatal(err)
	}
	for _, nd := range g.nodes {
		if nd != lead && !slicesContains(excluded, nd) {
			follower = nd
			break
		}
	}
	want := echo.Addr().String()
	waitUntil(t, "the follower to know the leader's client address", func() bool { return follower.LeaderClient(false) == want })
	return lead, follower
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
		before := follower.m.forwardRefused.Load()
		c, ok := echoed(t, addr)
		if !ok {
			if follower.m.forwardRefused.Load() == before {
				// Closed for the other reason a forwarder has: on a
				// loaded machine the follower went a heartbeat timeout
				// without hearing from the leader (Forwarder.watch).
				continue
			}
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

// A client forwarded to a leader that vanishes without closing anything
// (cut off from the group; its client port still holds the connection
// open) is closed within two election timeouts, and reaches the next
// leader when it connects again.
func TestForwardedClientsAreClosedOnceTheirLeaderIsGone(t *testing.T) {
	g := newGroup(t, 3)
	lead, follower := announcedIn(t, g)
	addr := forward(t, follower, 0)
	c, ok := echoed(t, addr)
	if !ok {
		t.Fatal("the client was not forwarded")
	}
	cut := time.Now()
	g.partition(slices.Index(g.nodes, lead))
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var b [1]byte
	if n, err := c.Read(b[:]); n != 0 || err == nil || os.IsTimeout(err) {
		t.Fatalf("a client forwarded to a vanished leader read %q (%v)", b[:n], err)
	}
	took := time.Since(cut)
	t.Logf("closed %v after its leader was cut off", took)
	if limit := 2 * follower.cfg.ElectionTimeout; took > limit {
		t.Fatalf("closed %v after its leader was cut off, more than two election timeouts (%v)", took, limit)
	}

	next, _ := announcedIn(t, g, lead)
	if next == follower {
		follower = g.nodes[3-slices.Index(g.nodes, lead)-slices.Index(g.nodes, next)]
		addr = forward(t, follower, 0)
	}
	if _, ok := echoed(t, addr); !ok {
		t.Fatal("a client connecting again was not forwarded to the next leader")
	}
}

// The connection to the leader probes an idle peer and gives up on one
// that acknowledges nothing.
func TestConnectionToTheLeaderHasKeepaliveAndAUserTimeout(t *testing.T) {
	follower := announced(t)
	ln := listenLocal(t)
	fw := follower.Forward([]net.Listener{ln}, nil, 0)
	t.Cleanup(fw.Stop)
	if _, ok := echoed(t, ln.Addr().String()); !ok {
		t.Fatal("the client was not forwarded")
	}
	fw.mu.Lock()
	var up net.Conn
	for c := range fw.links {
		up = c
	}
	fw.mu.Unlock()
	rc, err := up.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	opt := func(level, name int) int {
		var v int
		var gerr error
		if err := rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), level, name) }); err != nil || gerr != nil {
			t.Fatalf("getsockopt: %v %v", err, gerr)
		}
		return v
	}
	if opt(unix.SOL_SOCKET, unix.SO_KEEPALIVE) != 1 {
		t.Fatal("no keepalive on the connection to the leader")
	}
	if got := opt(unix.IPPROTO_TCP, unix.TCP_KEEPIDLE); got != int(upstreamIdle/time.Second) {
		t.Fatalf("TCP_KEEPIDLE %d s, want %v", got, upstreamIdle)
	}
	if got := opt(unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT); got != int(upstreamUnacked/time.Millisecond) {
		t.Fatalf("TCP_USER_TIMEOUT %d ms, want %v", got, upstreamUnacked)
	}
}
