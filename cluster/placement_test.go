package cluster

import (
	"fmt"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
)

// settle makes nextMove's steps on p over nodes until none is left, and
// checks each: one replica moved, to a node ready takes replicas and that
// the group lacked, every group of replicas distinct members throughout.
func settle(t *testing.T, p placement, nodes []string, replicas int, ready func(string) bool) (placement, int) {
	t.Helper()
	steps := 0
	for {
		m, ok := nextMove(p, nodes, ready)
		if !ok {
			return p, steps
		}
		if steps++; steps > len(p.Groups)*replicas {
			t.Fatalf("more moves than replicas: %v", p.Groups)
		}
		if !ready(m.to) || slices.Contains(p.Drain, m.to) {
			t.Fatalf("moved group %d's replica to %s, which may not take one", m.g, m.to)
		}
		next := p.apply(m)
		changed := 0
		for g := range p.Groups {
			if len(next.Groups[g]) != replicas || len(slices.Compact(slices.Sorted(slices.Values(next.Groups[g])))) != replicas {
				t.Fatalf("group %d has the members %v after moving %+v", g+1, next.Groups[g], m)
			}
			for i := range p.Groups[g] {
				if p.Groups[g][i] != next.Groups[g][i] {
					changed++
				}
			}
		}
		if changed != 1 {
			t.Fatalf("the move %+v changed %d replicas", m, changed)
		}
		p = next
	}
}

// balanced fails unless every node of nodes hosts floor(N·R/nodes) or
// ceil(N·R/nodes) of p's groups, and no other node hosts any.
func balanced(t *testing.T, p placement, nodes []string, replicas int) {
	t.Helper()
	load := p.hosts()
	lo, hi := len(p.Groups)*replicas/len(nodes), (len(p.Groups)*replicas+len(nodes)-1)/len(nodes)
	for id, n := range load {
		if !slices.Contains(nodes, id) {
			t.Fatalf("%s hosts %d groups and is no node: %v", id, n, p.Groups)
		}
	}
	for _, id := range nodes {
		if load[id] < lo || load[id] > hi {
			t.Fatalf("%s hosts %d groups, want %d to %d: %v", id, load[id], lo, hi, p.Groups)
		}
	}
}

// evenLeads fails unless every node of nodes is the preferred leader of as
// many groups as any other, give or take one.
func evenLeads(t *testing.T, p placement, nodes []string) {
	t.Helper()
	n := map[string]int{}
	for _, id := range preferred(p) {
		n[id]++
	}
	lo, hi := len(p.Groups), 0
	for _, id := range nodes {
		lo, hi = min(lo, n[id]), max(hi, n[id])
	}
	if hi > lo+1 {
		t.Fatalf("the preferred leaders %v of %v", n, p.Groups)
	}
}

// The placement's steps move one replica at a time, to nodes that may take
// one, never leave a group fewer members than its replicas, and end
// balanced, with the preferred leads spread as evenly: after nodes join,
// after nodes are drained, and with a node
// that may not take replicas yet, which is given none.
func TestPlacementMovesOneReplicaAtATimeUntilBalanced(t *testing.T) {
	for _, tc := range []struct{ nodes, groups, replicas int }{{4, 4, 3}, {3, 6, 3}, {4, 7, 3}, {5, 16, 3}, {3, 3, 2}, {4, 5, 1}} {
		t.Run(fmt.Sprintf("%d nodes, %d groups on %d", tc.nodes, tc.groups, tc.replicas), func(t *testing.T) {
			var boot []Member
			var nodes []string
			for i := range tc.nodes {
				id := fmt.Sprintf("n%d", i+1)
				boot, nodes = append(boot, Member{ID: id}), append(nodes, id)
			}
			var p placement
			for g := 1; g <= tc.groups; g++ {
				var ids []string
				for _, m := range GroupMembers(boot, g, tc.replicas) {
					ids = append(ids, m.ID)
				}
				p.Groups = append(p.Groups, ids)
			}
			all := func(string) bool { return true }
			if _, steps := settle(t, p, nodes, tc.replicas, all); steps != 0 {
				t.Fatalf("the bootstrap's placement moved %d replicas", steps)
			}
			for g, id := range preferred(p) {
				if id != p.Groups[g][0] {
					t.Fatalf("group %d of the bootstrap's placement prefers %s, not its first member: %v", g+1, id, p.Groups)
				}
			}
			// Two nodes join, one ready at once, the other later.
			nodes = append(nodes, "n8", "n9")
			p, _ = settle(t, p, nodes, tc.replicas, func(id string) bool { return id != "n9" })
			if p.hosts()["n9"] != 0 {
				t.Fatalf("n9, not ready, was given replicas: %v", p.Groups)
			}
			balanced(t, p, slices.DeleteFunc(slices.Clone(nodes), func(id string) bool { return id == "n9" }), tc.replicas)
			p, _ = settle(t, p, nodes, tc.replicas, all)
			balanced(t, p, nodes, tc.replicas)
			evenLeads(t, p, nodes)
			// Drain nodes down to the replicas' number, one at a time:
			// each leaves hosting nothing, the others balanced.
			for len(nodes) > tc.replicas {
				gone := nodes[1]
				p.Drain = []string{gone}
				p, _ = settle(t, p, nodes, tc.replicas, all)
				nodes = slices.DeleteFunc(nodes, func(id string) bool { return id == gone })
				if p.hosts()[gone] != 0 {
					t.Fatalf("the drained %s still hosts groups: %v", gone, p.Groups)
				}
				p.Drain = nil
				balanced(t, p, nodes, tc.replicas)
				evenLeads(t, p, nodes)
			}
			// A node that left group 0 without being drained (lost)
			// gives its replicas up too.
			nodes = append(nodes, "n10")
			p, _ = settle(t, p, nodes, tc.replicas, all)
			lost := nodes[0]
			nodes = nodes[1:]
			p, _ = settle(t, p, nodes, tc.replicas, all)
			if p.hosts()[lost] != 0 {
				t.Fatalf("%s, no longer a node, still hosts groups: %v", lost, p.Groups)
			}
			balanced(t, p, nodes, tc.replicas)
		})
	}
}

// A placement entry is checked as any entry, and kept in snapshots.
func TestPlacementEntriesAreCheckedAndKeptInSnapshots(t *testing.T) {
	for _, bad := range []string{`{`, `{"g":[["a","a"]]}`, `{"g":[[""]]}`, `{"g":[["a"]],"d":["b","b"]}`} {
		if err := validEntry(append([]byte{entryPlacement}, bad...)); err == nil {
			t.Fatalf("the placement %s was taken", bad)
		}
	}
	f := NewFSM()
	want := placement{Groups: [][]string{{"n1", "n2"}, {"n2", "n3"}}, Drain: []string{"n3"}}
	if resp := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: placementEntry(want)}); resp != nil {
		t.Fatal(resp)
	}
	g := restoreFrom(t, f)
	got, ok := g.placement()
	if !ok || !slices.EqualFunc(got.Groups, want.Groups, slices.Equal) || !slices.Equal(got.Drain, want.Drain) {
		t.Fatalf("the snapshot's placement: %+v (%v), want %+v", got, ok, want)
	}
	if _, ok := restoreFrom(t, NewFSM()).placement(); ok {
		t.Fatal("a snapshot of no placement restored one")
	}
}
