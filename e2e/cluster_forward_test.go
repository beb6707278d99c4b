package e2e

import (
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
	tc := startTestCluster(t, 3)
	lead := tc.leader()
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
