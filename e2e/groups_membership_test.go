package e2e

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// groupZeroLeader is the node that leads group 0, as the first running
// node's GET /cluster/groups names it once it knows.
func (tc *testCluster) groupZeroLeader() *clusterNode {
	tc.t.Helper()
	var lead *clusterNode
	waitFor(tc.t, 60*time.Second, "a leader of group 0", func() bool {
		gs := tc.groups(tc.running())
		for _, nd := range tc.nodes {
			if len(gs) > 0 && nd.id == gs[0].Leader && nd.srv != nil && !exited(nd.srv) {
				lead = nd
				return true
			}
		}
		return false
	})
	return lead
}

// everyGroupHas waits until every running node's replica of every group
// has exactly the voters ids, in order, and no non-voter.
func (tc *testCluster) everyGroupHas(ids ...string) {
	tc.t.Helper()
	waitFor(tc.t, 60*time.Second, fmt.Sprintf("every group on every node to have the voters %v", ids), func() bool {
		for _, nd := range tc.nodes {
			if nd.srv == nil || exited(nd.srv) {
				continue
			}
			gs := tc.groups(nd)
			if len(gs) == 0 {
				return false
			}
			for _, g := range gs {
				if !slices.Equal(slices.Sorted(slices.Values(g.Voters)), ids) || len(g.Nonvoters) > 0 {
					return false
				}
			}
		}
		return true
	})
}

// A node joins a cluster of many groups (--groups with --join): it is added
// to group 0, then each data group's leader adds it, and it becomes a
// voter of every group and leads its share of them; the jobs put before
// and after, through every node, are all there. A node removed with
// `beanpole cluster remove` (one leading a data group, then group 0's
// leader, then one of the last two) leaves every group, exits with status
// 78, its leads go to the others, and every acknowledged job is served
// through the nodes that remain. A node that asks to join with another number of
// data groups is refused before it makes its directory.
func TestGroupsANodeJoinsEveryGroupAndARemovedOneLeavesThem(t *testing.T) {
	// Four groups, so that four nodes lead one each (with three, the
	// fourth node in the order of the ids is preferred by none).
	const groups = 4
	tc := startGroupsCluster(t, 3, groups)
	acked := map[uint64]bool{}
	putEverywhere := func(prefix string) {
		t.Helper()
		for _, nd := range tc.nodes {
			if nd.srv == nil || exited(nd.srv) {
				continue
			}
			for g := 1; g <= groups; g++ {
				var id uint64
				waitFor(t, 60*time.Second, fmt.Sprintf("a put to group %d through %s", g, nd.id), func() bool {
					var ok bool
					id, ok = putX(nd, tubeOfGroup(g, groups, prefix))
					return ok
				})
				if groupOfID(id, groups) != g {
					t.Fatalf("a put to group %d through %s was given id %d", g, nd.id, id)
				}
				acked[id] = true
			}
		}
	}
	allThere := func(nd *clusterNode) {
		t.Helper()
		for id := range acked {
			want := fmt.Sprintf("FOUND %d 1\r\nx\r\n", id)
			deadline := time.Now().Add(60 * time.Second)
			for got := try(nd.srv.addr, fmt.Sprintf("peek %d\r\n", id), 5*time.Second); got != want; {
				if time.Now().After(deadline) {
					t.Fatalf("peek %d through %s: %q", id, nd.id, got)
				}
				time.Sleep(20 * time.Millisecond)
				got = try(nd.srv.addr, fmt.Sprintf("peek %d\r\n", id), 5*time.Second)
			}
		}
	}
	putEverywhere("before")

	// Another number of groups is refused before the directory is made.
	lead := tc.groupZeroLeader()
	odd := tc.newNode("n9")
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	out, code := runBeanpoleWithin(t, 30*time.Second, "-l", "127.0.0.1", "-p", strconv.Itoa(port), "--cluster-dir", odd.dir,
		"--node-id", odd.id, "--raft", odd.raft, "--http", odd.http, "--http-token-file", tc.token, "--groups", "3", "--join", lead.http)
	want := fmt.Sprintf("beanpole: --join %s: the cluster has %d data groups and this node was given --groups 3: a node joins with the cluster's number (--groups %d)\n",
		lead.http, groups, groups)
	if code != 5 || !strings.Contains(out, want) {
		t.Fatalf("a node joining with --groups 3 exited %d:\n%q", code, out)
	}
	if ents, err := os.ReadDir(odd.dir); err != nil || len(ents) != 0 {
		t.Fatalf("the refused node's directory: %v %v", ents, err)
	}

	n4 := tc.newNode("n4")
	tc.nodes = append(tc.nodes, n4)
	tc.start(n4, "--join", lead.http)
	tc.everyGroupHas("n1", "n2", "n3", "n4")
	leaders := tc.settled(n4, 60*time.Second)
	if !slices.Contains(leaders[1:], n4.id) {
		t.Fatalf("the joined n4 leads no data group: %v", leaders)
	}
	putEverywhere("after")
	for _, nd := range tc.nodes {
		allThere(nd)
	}
	// Killed and started again, the joined node is what its directory
	// says: a member of every group, given its lead back.
	n4.srv.stop()
	tc.start(n4, "--join", lead.http)
	tc.everyGroupHas("n1", "n2", "n3", "n4")
	if leaders = tc.settled(n4, 60*time.Second); !slices.Contains(leaders[1:], n4.id) {
		t.Fatalf("the restarted n4 leads no data group: %v", leaders)
	}
	allThere(n4)

	// Remove a node that leads a data group, through group 0's leader;
	// then group 0's leader itself, which hands the lead over first; then,
	// of the two left, the one that does not lead group 0: the groups it
	// led, of two voters, would elect no one without it.
	lead = tc.groupZeroLeader()
	for _, byItself := range []bool{false, true, false} {
		gone := lead
		for _, nd := range tc.nodes {
			if !byItself && nd != lead && !exited(nd.srv) {
				gone = nd
			}
		}
		if !slices.Contains(leaders[1:], gone.id) {
			t.Fatalf("%s leads no data group: %v", gone.id, leaders)
		}
		if out, code := tc.cluster(lead, "remove", "--id", gone.id); code != 0 {
			t.Fatalf("remove %s through %s: exit %d: %s", gone.id, lead.id, code, out)
		}
		if code := exitedWith(t, gone); code != 78 || !strings.Contains(gone.srv.out.String(), removedMessage) {
			t.Fatalf("the removed %s exited %d:\n%s", gone.id, code, gone.srv.out.String())
		}
		var left []string
		for _, nd := range tc.nodes {
			if !exited(nd.srv) {
				left = append(left, nd.id)
			}
		}
		tc.everyGroupHas(left...)
		leaders = tc.settled(tc.running(), 60*time.Second)
		if slices.Contains(leaders, gone.id) {
			t.Fatalf("the removed %s still leads: %v", gone.id, leaders)
		}
		putEverywhere("less" + gone.id)
		for _, nd := range tc.nodes {
			if !exited(nd.srv) {
				allThere(nd)
			}
		}
		lead = tc.groupZeroLeader()
	}
}
