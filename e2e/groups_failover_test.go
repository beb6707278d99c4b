package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A group's leader that dies, hands its lead over or stops leaves the
// clients of the other nodes connected: a reserve waiting at it (at its group alone,
// or at every group) waits on at the group's next leader, with what is left
// of its timeout, and a producer's next put goes to that leader; both get
// the replies one server gives. Each job is reserved once.
func TestGroupsAWaitingReserveOutlivesItsGroupsLeader(t *testing.T) {
	const groups = 3
	tc := startGroupsCluster(t, 3, groups)
	leaders := tc.settled(tc.nodes[0], 60*time.Second)
	const g = 2
	var victim *clusterNode
	for _, nd := range tc.nodes {
		if nd.id == leaders[g] {
			victim = nd
		}
	}
	wn := tc.other(victim)
	pn := tc.other(victim, wn)
	tube := tubeOfGroup(g, groups, "survive")

	// One worker watches the tube alone, the other a tube of every group.
	w1, w2 := wn.srv.dial(t), pn.srv.dial(t)
	mustSend(t, w1, "watch "+tube+"\r\nignore default\r\n")
	expect(t, w1, "WATCHING 2\r\nWATCHING 1\r\n")
	mustSend(t, w2, "watch "+tube+"\r\n")
	expect(t, w2, "WATCHING 2\r\n")
	for h := 1; h <= groups; h++ {
		if h != g {
			mustSend(t, w2, "watch "+tubeOfGroup(h, groups, "survive")+"\r\n")
			readLine(t, w2)
		}
	}
	mustSend(t, w2, "ignore default\r\n")
	expect(t, w2, "WATCHING 3\r\n")
	p := pn.srv.dial(t)
	mustSend(t, p, "use "+tube+"\r\n")
	expect(t, p, "USING "+tube+"\r\n")

	// put sends one job through p, which outlives the moves, and reports
	// its id once acknowledged (a put the router could not place while
	// the group had no leader closes p, which fails the test).
	put := func(body string) uint64 {
		t.Helper()
		mustSend(t, p, fmt.Sprintf("put 0 0 60 %d\r\n%s\r\n", len(body), body))
		line := readLineWithin(t, p, 60*time.Second)
		id, err := strconv.ParseUint(strings.TrimPrefix(line, "INSERTED "), 10, 64)
		if err != nil {
			t.Fatalf("put: %q", line)
		}
		return id
	}
	// reserved reads the jobs the two workers were given, one each, and
	// deletes them.
	reserved := func(want map[uint64]string) {
		t.Helper()
		for _, w := range []*conn{w1, w2} {
			line := readLineWithin(t, w, 60*time.Second)
			var id uint64
			var n int
			if _, err := fmt.Sscanf(line, "RESERVED %d %d", &id, &n); err != nil {
				t.Fatalf("a waiting worker got %q", line)
			}
			body, ok := want[id]
			if !ok {
				t.Fatalf("a worker got job %d, not one of %v (or twice)", id, want)
			}
			delete(want, id)
			expect(t, w, body+"\r\n")
			mustSend(t, w, fmt.Sprintf("delete %d\r\n", id))
			expect(t, w, "DELETED\r\n")
		}
	}
	wait := func() {
		t.Helper()
		mustSend(t, w1, "reserve\r\n")
		mustSend(t, w2, "reserve-with-timeout 600\r\n")
		expectNothing(t, w1, 100*time.Millisecond)
		expectNothing(t, w2, 100*time.Millisecond)
	}

	// The leader dies (kill -9).
	wait()
	if err := victim.srv.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-victim.srv.exited
	a, b := put("after-kill-1"), put("after-kill-2")
	reserved(map[uint64]string{a: "after-kill-1", b: "after-kill-2"})

	// It comes back, and the group's lead is handed back to it.
	wait()
	tc.start(victim)
	waitFor(t, 60*time.Second, "the restarted node to lead its group again", func() bool {
		for _, nd := range []*clusterNode{wn, pn} {
			if gs := tc.groups(nd); len(gs) <= g || gs[g].Leader != victim.id {
				return false
			}
		}
		return true
	})
	a, b = put("after-return-1"), put("after-return-2")
	reserved(map[uint64]string{a: "after-return-1", b: "after-return-2"})

	// It stops (SIGSTOP) while it leads: the others elect a leader, and
	// the waits at the stopped one are left for the new one's.
	wait()
	if err := victim.srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resume := sync.OnceFunc(func() { _ = victim.srv.cmd.Process.Signal(syscall.SIGCONT) })
	t.Cleanup(resume)
	waitFor(t, 60*time.Second, "another node to lead the stopped node's group", func() bool {
		gs := tc.groups(wn)
		return len(gs) > g && gs[g].Leader != "" && gs[g].Leader != victim.id
	})
	// A put sent to the stopped node before the router learns of its
	// successor may or may not run there later, so its client's connection
	// is closed: these come on connections of their own, again until
	// acknowledged, as a client reconnects.
	putAgain := func() uint64 {
		t.Helper()
		var id uint64
		waitFor(t, 60*time.Second, "a put through a node that knows the new leader", func() bool {
			n, ok := putX(pn, tube)
			id = n
			return ok
		})
		return id
	}
	a, b = putAgain(), putAgain()
	reserved(map[uint64]string{a: "x", b: "x"})

	// Nothing is left behind, reserved or ready.
	c := pn.srv.dial(t)
	mustSend(t, c, "stats-tube "+tube+"\r\n")
	expectYAMLContains(t, c, "current-jobs-ready: 0", "current-jobs-reserved: 0")
}
