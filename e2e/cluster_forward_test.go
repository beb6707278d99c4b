package e2e

import (
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// electionTimeout is the nodes' election (and heartbeat) timeout.
const electionTimeout = 500 * time.Millisecond

// A worker connected through a follower to a leader whose host vanishes
// (stopped: no FIN, nothing answered) sees its connection closed within
// two election timeouts, as when a beanstalkd server dies, reconnects
// through the same follower and reserves the job again from the next
// leader.
func TestClusterFollowerClosesClientsOfAVanishedLeader(t *testing.T) {
	t.Parallel()
	tc := startTestCluster(t, 3)
	lead := tc.agreedLeader()
	follower := tc.other(lead)
	c := follower.srv.dial(t)
	put(t, c, 0, 0, 60, "x", 1)
	mustSend(t, c, "reserve\r\n")
	expect(t, c, "RESERVED 1 1\r\nx\r\n")

	lead.srv.signal(t, syscall.SIGSTOP)
	stopped := time.Now()
	t.Cleanup(func() { _ = lead.srv.cmd.Process.Signal(syscall.SIGCONT) })
	expectClosed(t, c)
	took := time.Since(stopped)
	t.Logf("the forwarded client was closed %v after its leader stopped", took)
	if took > 2*electionTimeout {
		t.Fatalf("the forwarded client was closed %v after its leader stopped, more than two election timeouts", took)
	}

	var out string
	waitFor(t, 30*time.Second, "the job reserved again through "+follower.id, func() bool {
		out = try(follower.srv.addr, "reserve-with-timeout 1\r\n", 5*time.Second)
		return out != ""
	})
	if out != "RESERVED 1 1\r\nx\r\n" {
		t.Fatalf("reserve through %s after the failover: %q", follower.id, out)
	}
}

// A cluster node announces where its clients connect, and the other nodes
// forward theirs there: a node whose only client listener is a UNIX
// socket, out of their reach, is refused at start (exit status 5).
func TestClusterNodeOnAUnixSocketAloneIsRefused(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, 1)
	nd := tc.nodes[0]
	sock := filepath.Join(t.TempDir(), "b.sock")
	out, code := runBeanpoleWithin(t, 30*time.Second, "-l", "unix:"+sock, "--cluster-dir", nd.dir, "--node-id", nd.id,
		"--raft", nd.raft, "--bootstrap", tc.bootstrap)
	want := "beanpole: unix:" + sock + ": a cluster node tells the other nodes where its clients connect, and they forward theirs there, " +
		"which a UNIX socket is out of reach for: listen on TCP (-l HOST -p PORT), or with socket activation pass a TCP socket beside it\n"
	if code != 5 || out != want {
		t.Fatalf("a cluster node on a UNIX socket alone: exit %d, output %q; want 5 and %q", code, out, want)
	}
}

// A node handed a UNIX socket and a TCP one (socket activation, the UNIX
// socket first) serves both and announces the TCP one.
func TestClusterNodeAnnouncesItsTCPListenerBesideAUnixSocket(t *testing.T) {
	t.Parallel()
	tool := lookTool(t, "systemd-socket-activate")
	tc := newTestCluster(t, 1)
	nd := tc.nodes[0]
	sock := filepath.Join(t.TempDir(), "b.sock")
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	tcp := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	socketActivated(t, tool, []string{"-l", sock, "-l", tcp}, "--cluster-dir", nd.dir, "--node-id", nd.id,
		"--raft", nd.raft, "--bootstrap", tc.bootstrap, "--http", nd.http, "--http-token-file", tc.token)
	// The first connection starts the server (and is closed as the node
	// starts to lead).
	waitFor(t, defaultTimeout, "a connection to "+sock, func() bool {
		nc, err := net.Dial("unix", sock)
		if err == nil {
			nc.Close()
		}
		return err == nil
	})
	waitFor(t, 30*time.Second, "the node to lead and announce its client address", func() bool {
		st := tc.status(nd)
		return st.State == "leader" && len(st.Members) == 1 && st.Members[0].Client != ""
	})
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	c := &conn{nc: nc}
	t.Cleanup(func() { nc.Close() })
	put(t, c, 0, 0, 60, "x", 1)
	if got := tc.status(nd).Members[0].Client; got != tcp {
		t.Fatalf("the node announces %q, want its TCP listener %s", got, tcp)
	}
	if got := try(tcp, "peek 1\r\n", 5*time.Second); !strings.HasPrefix(got, "FOUND 1 1\r\n") {
		t.Fatalf("peek 1 on the announced address: %q", got)
	}
}
