package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// placedEvenly waits until every running node hosts floor or ceil of
// groups·replicas over the running nodes' number of the data groups, no
// other node hosts any, and every data group, as every running node sees
// it, has as voters the replicas nodes group 0's placement puts it on, and
// no non-voter. It returns, for each running node, the groups it hosts.
func (tc *testCluster) placedEvenly(groups, replicas int, within time.Duration) map[string][]int {
	tc.t.Helper()
	var hosts map[string][]int
	var off string
	deadline := time.Now().Add(within)
	for {
		if off = tc.placementOff(groups, replicas, &hosts); off == "" {
			return hosts
		}
		if time.Now().After(deadline) {
			tc.t.Fatalf("the replicas were not placed evenly within %v: %s", within, off)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// placementOff says what keeps the placement from being even (placedEvenly),
// "" once it is, with the groups each running node hosts in hosts.
func (tc *testCluster) placementOff(groups, replicas int, hosts *map[string][]int) string {
	*hosts = map[string][]int{}
	var running []string
	for _, nd := range tc.nodes {
		if nd.srv != nil && !exited(nd.srv) {
			running = append(running, nd.id)
		}
	}
	for _, nd := range tc.nodes {
		if nd.srv == nil || exited(nd.srv) {
			continue
		}
		gs := tc.groups(nd)
		if len(gs) != groups+1 {
			return fmt.Sprintf("%s lists %d groups", nd.id, len(gs))
		}
		if gs[0].Members != len(running) || len(gs[0].Voters) != len(running) {
			return fmt.Sprintf("%s: group 0 has the voters %v and non-voters %v", nd.id, gs[0].Voters, gs[0].Nonvoters)
		}
		for _, g := range gs[1:] {
			voters := slices.Sorted(slices.Values(g.Voters))
			if len(voters) != replicas || len(g.Nonvoters) > 0 || !slices.Equal(voters, slices.Sorted(slices.Values(g.Placed))) {
				return fmt.Sprintf("%s: group %d has the voters %v and non-voters %v, placed on %v", nd.id, g.Group, g.Voters, g.Nonvoters, g.Placed)
			}
			for _, id := range voters {
				if !slices.Contains(running, id) {
					return fmt.Sprintf("%s: group %d is placed on %s, which does not run", nd.id, g.Group, id)
				}
			}
			if g.State != "elsewhere" {
				(*hosts)[nd.id] = append((*hosts)[nd.id], g.Group)
			}
			if slices.Contains(voters, nd.id) != (g.State != "elsewhere") {
				return fmt.Sprintf("%s: group %d is placed on %v, and %s is %s", nd.id, g.Group, voters, nd.id, g.State)
			}
		}
	}
	lo, hi := groups*replicas/len(running), (groups*replicas+len(running)-1)/len(running)
	for _, id := range running {
		if n := len((*hosts)[id]); n < lo || n > hi {
			return fmt.Sprintf("%s hosts the groups %v, want %d to %d of them", id, (*hosts)[id], lo, hi)
		}
	}
	return ""
}

// drainedExit waits for a node removed from a cluster of groups on
// replicas to exit, as it does once its replicas have moved (a few
// seconds each), and checks that it exits 78, saying why.
func drainedExit(t *testing.T, nd *clusterNode) {
	t.Helper()
	select {
	case <-nd.srv.exited:
	case <-time.After(120 * time.Second):
		t.Fatalf("the removed %s still runs 120 s after its removal", nd.id)
	}
	if code := nd.srv.cmd.ProcessState.ExitCode(); code != 78 || !strings.Contains(nd.srv.out.String(), removedMessage) {
		t.Fatalf("the removed %s exited %d:\n%s", nd.id, code, nd.srv.out.String())
	}
}

// With --replicas, a node that joins (--join) is given its share of the
// data groups' replicas, one group at a time, and the lead of one; a node
// removed (`beanpole cluster remove`) first gives its replicas to the
// others, then exits 78; every group keeps three voters throughout, takes
// puts through every node, and every acknowledged job is served through
// every node.
func TestGroupsOnReplicasANodeJoinsAndALeavingOneHandsItsReplicasOver(t *testing.T) {
	const nodes, groups, replicas = 4, 4, 3
	tc := startGroupsCluster(t, nodes, groups, "--replicas", "3")
	tc.placedEvenly(groups, replicas, 60*time.Second)
	acked := map[uint64]bool{}
	tc.putEverywhere(groups, "before", acked)

	// Another number of replicas is refused before the directory is made.
	lead := tc.groupZeroLeader()
	odd := tc.newNode("n9")
	out, code := runBeanpoleWithin(t, 30*time.Second, "-l", "127.0.0.1", "-p", "0", "--cluster-dir", odd.dir, "--node-id", odd.id,
		"--raft", odd.raft, "--http", odd.http, "--http-token-file", tc.token, "--groups", "4", "--replicas", "2", "--join", lead.http)
	if want := "the cluster runs each data group on 3 replicas (0: on every node) and this node was given --replicas 2"; code != 5 || !strings.Contains(out, want) {
		t.Fatalf("a node joining with --replicas 2 exited %d:\n%s", code, out)
	}

	n5 := tc.newNode("n5")
	tc.nodes = append(tc.nodes, n5)
	start := time.Now()
	tc.start(n5, "--join", lead.http)
	hosts := tc.placedEvenly(groups, replicas, 120*time.Second)
	t.Logf("from n5's start with --join to an even placement: %v; hosts %v", time.Since(start).Round(10*time.Millisecond), hosts)
	leaders := tc.settled(n5, 60*time.Second)
	if !slices.Contains(leaders[1:], n5.id) {
		t.Fatalf("the joined n5 leads no data group: %v", leaders)
	}
	for _, nd := range tc.nodes {
		tc.allThere(nd, acked)
	}
	tc.putEverywhere(groups, "after", acked)

	// Three replicas outlive one node's death: every group takes puts
	// through every survivor. The node is then started again, as a
	// supervisor would, and is what its directory says.
	victim := tc.nodes[0]
	if err := victim.srv.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-victim.srv.exited
	tc.putEverywhere(groups, "dead", acked)
	tc.start(victim)
	tc.placedEvenly(groups, replicas, 60*time.Second)

	// Remove a node that leads a data group and not group 0.
	leaders = tc.settled(tc.running(), 60*time.Second)
	lead = tc.groupZeroLeader()
	var gone *clusterNode
	for _, nd := range tc.nodes {
		if nd != lead && slices.Contains(leaders[1:], nd.id) {
			gone = nd
		}
	}
	if gone == nil {
		t.Fatalf("no node but group 0's leader leads a data group: %v", leaders)
	}
	start = time.Now()
	if out, code := tc.cluster(lead, "remove", "--id", gone.id); code != 0 || !strings.Contains(out, "they move to the other nodes") {
		t.Fatalf("remove %s through %s: exit %d: %s", gone.id, lead.id, code, out)
	}
	drainedExit(t, gone)
	t.Logf("from cluster remove to the removed node's exit: %v", time.Since(start).Round(10*time.Millisecond))
	hosts = tc.placedEvenly(groups, replicas, 60*time.Second)
	if _, ok := hosts[gone.id]; ok {
		t.Fatalf("the removed %s still hosts groups: %v", gone.id, hosts)
	}
	tc.putEverywhere(groups, "less", acked)
	for _, nd := range tc.nodes {
		if !exited(nd.srv) {
			tc.allThere(nd, acked)
		}
	}

	// Down to three nodes, a removal is refused: the groups run on three.
	var left []*clusterNode
	for _, nd := range tc.nodes {
		if !exited(nd.srv) {
			left = append(left, nd)
		}
	}
	lead = tc.groupZeroLeader()
	other := left[0]
	if other == lead {
		other = left[1]
	}
	if out, code := tc.cluster(lead, "remove", "--id", other.id); code != 0 {
		t.Fatalf("remove %s through %s: exit %d: %s", other.id, lead.id, code, out)
	}
	drainedExit(t, other)
	tc.placedEvenly(groups, replicas, 60*time.Second)
	lead = tc.groupZeroLeader()
	want := "would leave 2 nodes, fewer than the 3 each data group runs on (--replicas)"
	if out, code := tc.cluster(lead, "remove", "--id", tc.running().id); code != 1 || !strings.Contains(out, want) {
		t.Fatalf("removing one of the last 3 nodes: exit %d: %s", code, out)
	}
	for _, nd := range tc.nodes {
		if !exited(nd.srv) {
			tc.allThere(nd, acked)
		}
	}
}
