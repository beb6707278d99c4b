package e2e

import (
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cluster runs `beanpole cluster ARGS` against nd's HTTP side with the
// token and returns its output and exit status.
func (tc *testCluster) cluster(nd *clusterNode, args ...string) (string, int) {
	tc.t.Helper()
	cmd := exec.Command(target.bin, append(append([]string{"cluster"}, args...), "--http", nd.http, "--token-file", tc.token)...)
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil {
		tc.t.Fatal(err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// exitedWith waits for nd's process to exit of itself and returns its
// exit status.
func exitedWith(t *testing.T, nd *clusterNode) int {
	t.Helper()
	select {
	case <-nd.srv.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s still runs 30 s after its removal", nd.id)
	}
	return nd.srv.cmd.ProcessState.ExitCode()
}

const removedMessage = "beanpole: cluster: this node was removed from the group, so it exits and is not restarted by the packaged unit; " +
	"to bring it back, empty its --cluster-dir and start it with --join\n"

// A node removed from the group exits with status 78 (which the packaged
// unit does not restart) and says why; the leader, asked to remove itself,
// hands the lead over first, and the group goes on with the others.
func TestClusterRemovedNodesExitWithStatus78AndTheLeaderHandsOverFirst(t *testing.T) {
	t.Parallel()
	tc := startTestCluster(t, 4)
	lead := tc.leader()
	c := lead.srv.dial(t)
	put(t, c, 0, 0, 60, "x", 1)

	f := tc.other(lead)
	if out, code := tc.cluster(lead, "remove", "--id", f.id); code != 0 || out != "removed "+f.id+"\n" {
		t.Fatalf("remove %s: exit %d: %s", f.id, code, out)
	}
	if code := exitedWith(t, f); code != 78 || !strings.HasSuffix(f.srv.out.String(), removedMessage) {
		t.Fatalf("the removed follower exited %d:\n%s", code, f.srv.out.String())
	}

	out, code := tc.cluster(lead, "remove", "--id", lead.id)
	if code != 0 || out != lead.id+" handed the lead over; the next leader removes it, and it exits\n" {
		t.Fatalf("remove %s, the leader: exit %d: %s", lead.id, code, out)
	}
	if code := exitedWith(t, lead); code != 78 || !strings.HasSuffix(lead.srv.out.String(), removedMessage) {
		t.Fatalf("the removed leader exited %d:\n%s", code, lead.srv.out.String())
	}
	if strings.Contains(lead.srv.out.String(), "removed ourself") {
		t.Fatalf("the leader removed itself instead of handing the lead over first:\n%s", lead.srv.out.String())
	}
	next := tc.leader(lead, f)
	if st := tc.status(next); len(st.Members) != 2 {
		t.Fatalf("the group after two removals: %+v", st.Members)
	}
	for _, nd := range tc.nodes {
		if nd != lead && nd != f {
			if got := try(nd.srv.addr, "peek 1\r\n", 10*time.Second); got != "FOUND 1 1\r\nx\r\n" {
				t.Fatalf("peek 1 through %s: %q", nd.id, got)
			}
		}
	}
	putUntilInserted(t, next.srv.addr, "after", 30*time.Second)
}

// One wrong address added to a one-node group is refused as a voter: the
// add says the node does not answer, the status reports it unreachable and
// a non-voter, and the group goes on committing.
func TestClusterAddOfAnUnreachableAddressCannotWedgeTheGroup(t *testing.T) {
	t.Parallel()
	tc := startTestCluster(t, 1)
	lead := tc.leader()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	wrong := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	out, code := tc.cluster(lead, "add", "--id", "n2", "--raft", wrong)
	if code != 1 || !strings.Contains(out, "added n2 at "+wrong+" as a non-voter, but it does not answer there") {
		t.Fatalf("add of an address nothing listens on: exit %d: %s", code, out)
	}
	putUntilInserted(t, lead.srv.addr, "after the add", 10*time.Second)
	waitFor(t, 30*time.Second, "n2 reported unreachable", func() bool {
		out, _ := tc.cluster(lead, "status")
		return strings.Contains(out, `"id": "n2"`) && strings.Contains(out, `"reachable": false`)
	})
	st := tc.status(lead)
	for _, m := range st.Members {
		if m.ID == "n2" && m.Voter {
			t.Fatalf("the unreachable n2 is a voter: %+v", st.Members)
		}
	}
	if out, code := tc.cluster(lead, "remove", "--id", "n2"); code != 0 {
		t.Fatalf("remove n2: exit %d: %s", code, out)
	}
}
