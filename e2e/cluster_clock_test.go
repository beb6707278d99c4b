package e2e

import (
	"strconv"
	"testing"
)

// Only delays follow the wall clock: a delayed job's deadline is stamped
// by the leader that put it, and read by whichever node leads. A node
// whose clock runs an hour ahead leads with every job and hands out ids
// above every acknowledged one; a delay a correct clock stamped is over
// on it an hour early, and its own stamps hold on a correct node for an
// hour more. Leases, elections, TTR and reserve timeouts run on each
// node's monotonic clock and do not notice.
func TestClusterClockOffsetOnOneNodeMovesOnlyDelays(t *testing.T) {
	tc := newTestCluster(t, 3)
	n1, n2, ahead := tc.nodes[0], tc.nodes[1], tc.nodes[2]
	// n1 and n2 are a majority: one of them leads before n3 starts.
	tc.start(n1)
	tc.start(n2)
	lead := tc.leader()
	ahead.clockOffset = "1h"
	tc.start(ahead)
	third := n1
	if lead == n1 {
		third = n2
	}

	c := lead.srv.dial(t)
	put(t, c, 0, 0, 60, "now", 1)
	put(t, c, 0, 600, 60, "in ten minutes", 2)
	if st := statsJob(t, c, 2); st["state"] != "delayed" {
		t.Fatalf("job 2 on %s: %v", lead.id, st)
	}

	tc.transferTo(lead, ahead)
	ca := ahead.srv.dial(t)
	mustSend(t, ca, "peek 1\r\n")
	expect(t, ca, "FOUND 1 3\r\nnow\r\n")
	if st := statsJob(t, ca, 2); st["state"] != "ready" {
		t.Fatalf("job 2 on %s, an hour ahead: %v; its ten minutes are over there", ahead.id, st)
	}
	put(t, ca, 0, 600, 60, "in ten minutes, an hour ahead", 3)
	// Monotonic timers are unmoved: a reservation's TTR is what was asked.
	mustSend(t, ca, "reserve-with-timeout 0\r\n")
	expect(t, ca, "RESERVED 1 3\r\nnow\r\n")
	if left, _ := strconv.Atoi(statsJob(t, ca, 1)["time-left"]); left > 60 || left < 50 {
		t.Fatalf("job 1's time-left %d on %s, want about 60", left, ahead.id)
	}

	tc.transferTo(ahead, third)
	ct := third.srv.dial(t)
	st := statsJob(t, ct, 3)
	if left, _ := strconv.Atoi(st["time-left"]); st["state"] != "delayed" || left < 3600 {
		t.Fatalf("job 3 on %s, stamped an hour ahead: %v; want delayed for over an hour", third.id, st)
	}
	// Job 2's release on the node ahead was that node's own reading of
	// the deadline, not a change in the log: a correct clock holds it.
	st = statsJob(t, ct, 2)
	if left, _ := strconv.Atoi(st["time-left"]); st["state"] != "delayed" || left > 600 || left < 500 {
		t.Fatalf("job 2 on %s: %v; want delayed for its own ten minutes", third.id, st)
	}
	if st := statsJob(t, ct, 1); st["state"] != "ready" { // its reservation ended with its leader
		t.Fatalf("job 1 on %s: %v", third.id, st)
	}
	put(t, ct, 0, 0, 60, "after", 4)
}
