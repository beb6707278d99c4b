package cluster

import (
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
)

// hostCluster is n hosts of the same groups on loopback, each on its own
// raft port; a host can be stopped and started again on its port and
// directory.
type hostCluster struct {
	t       testing.TB
	members []Member
	dirs    []string
	tls     []func() *tls.Config
	groups  int
	// replicas is each data group's number of members, 0: every node.
	replicas int
	ports    []*linkLayer
	hosts    []*Host // nil while stopped
	// booted is how many of the members bootstrapped the groups; the
	// others join (join).
	booted int
}

func newHostCluster(t testing.TB, n, groups int, ca *testCA) *hostCluster {
	return newReplicatedHosts(t, n, groups, 0, ca)
}

// newReplicatedHosts is newHostCluster with each data group on replicas of
// the nodes.
func newReplicatedHosts(t testing.TB, n, groups, replicas int, ca *testCA) *hostCluster {
	c := &hostCluster{t: t, groups: groups, replicas: replicas, ports: make([]*linkLayer, n), hosts: make([]*Host, n), booted: n}
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var cfg func() *tls.Config
		if ca != nil {
			nc := NodeTLS(ca.node(t, fmt.Sprintf("n%d", i+1)), ca.pool)
			cfg = func() *tls.Config { return nc }
		}
		c.tls = append(c.tls, cfg)
		c.ports[i] = newLinkLayer(ln, cfg, func() []string { return []string{"127.0.0.1"} }, linkGreeting)
		c.members = append(c.members, Member{ID: fmt.Sprintf("n%d", i+1), Raft: ln.Addr().String()})
		c.dirs = append(c.dirs, t.TempDir())
	}
	t.Cleanup(func() {
		for i := range c.hosts {
			c.stop(i)
		}
	})
	for i := range n {
		c.open(i)
	}
	return c
}

// open opens host i on its port, listening on it again if it was stopped.
func (c *hostCluster) open(i int) {
	c.t.Helper()
	if c.ports[i] == nil {
		ln, err := net.Listen("tcp", c.members[i].Raft)
		if err != nil {
			c.t.Fatal(err)
		}
		c.ports[i] = newLinkLayer(ln, c.tls[i], func() []string { return []string{"127.0.0.1"} }, linkGreeting)
	}
	h, err := OpenHost(Config{ID: c.members[i].ID, Dir: c.dirs[i], Raft: c.members[i].Raft, Bootstrap: c.members[:c.booted],
		Log: zerolog.Nop(), links: c.ports[i]}, c.groups-1, c.replicas)
	if err != nil {
		c.t.Fatal(err)
	}
	c.hosts[i] = h
}

// stop stops host i and closes its port, as its process's death does.
func (c *hostCluster) stop(i int) {
	if c.hosts[i] != nil {
		c.hosts[i].Close()
		c.hosts[i] = nil
	}
	if c.ports[i] != nil {
		c.ports[i].Close()
		c.ports[i] = nil
	}
}

// leads counts, for every running host, the data groups it leads (group
// 0 when there are none); ok is false while a group has no leader among
// the running hosts or two claim one.
func (c *hostCluster) leads() (counts map[string]int, ok bool) {
	counts = map[string]int{}
	for i, h := range c.hosts {
		if h != nil {
			counts[c.members[i].ID] = 0
		}
	}
	ok = true
	for g := range c.groups {
		leaders := 0
		for i, h := range c.hosts {
			if h != nil && h.Groups[g] != nil && h.Groups[g].Raft.State() == raft.Leader {
				if g > 0 || c.groups == 1 { // the data groups' leads are spread
					counts[c.members[i].ID]++
				}
				leaders++
			}
		}
		ok = ok && leaders == 1
	}
	return counts, ok
}

// spread waits until every group has one leader and the running hosts
// lead as evenly as they can (no two differ by more than one), and stay so
// for a few looks of the spreading rule.
func (c *hostCluster) spread() map[string]int {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var since time.Time
	for {
		counts, ok := c.leads()
		lo, hi := c.groups, 0
		for _, n := range counts {
			lo, hi = min(lo, n), max(hi, n)
		}
		switch {
		case !ok || hi-lo > 1:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= 3*spreadEvery(500*time.Millisecond):
			return counts
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the leads were not spread within 60 s: %v (every group led once: %v)", counts, ok)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestHostSpreadsTheLeadsOverItsMembers(t *testing.T) {
	// 3 nodes, 6 data groups: two leads each, whoever won the elections.
	c := newHostCluster(t, 3, 7, nil)
	for id, n := range c.spread() {
		if n != 2 {
			t.Fatalf("%s leads %d groups, want 2", id, n)
		}
	}
	// A node that dies leaves its groups to the others' elections; once
	// it is back and caught up, it is given its share again.
	c.stop(0)
	for id, n := range c.spread() {
		if n != 3 {
			t.Fatalf("with n1 down, %s leads %d groups, want 3", id, n)
		}
	}
	c.open(0)
	for id, n := range c.spread() {
		if n != 2 {
			t.Fatalf("with n1 back, %s leads %d groups, want 2", id, n)
		}
	}
}

// The leads end spread whatever order nodes die and come back in, and
// whatever the groups' elections did meanwhile.
func TestHostLeadsEndSpreadAfterRandomRestarts(t *testing.T) {
	const nodes, groups, rounds = 3, 7, 4
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, seed))
	c := newHostCluster(t, nodes, groups, nil)
	c.spread()
	for range rounds {
		i := r.IntN(nodes)
		c.stop(i)
		if r.IntN(2) == 0 {
			c.spread() // the others settle before it is back
		}
		c.open(i)
		counts := c.spread()
		total := 0
		for _, n := range counts {
			total += n
		}
		if len(counts) != nodes || total != groups-1 {
			t.Fatalf("after restarting n%d: leads %v; want every group led once by %d nodes", i+1, counts, nodes)
		}
	}
}

// A node's number of data groups is fixed when its directory is made: the
// tubes' places and the jobs' ids depend on it. Another number later, or
// data groups added to a directory that holds a group without them, is
// refused with the reason.
func TestANodesGroupsAreFixedWhenItsDirectoryIsMade(t *testing.T) {
	boot := []Member{{ID: "n1", Raft: "127.0.0.1:1"}, {ID: "n2", Raft: "127.0.0.1:2"}, {ID: "n3", Raft: "127.0.0.1:3"}}
	check := func(dir string, n, replicas int) error {
		_, err := checkGroups(dir, n, replicas, "n1", boot)
		return err
	}
	dir := t.TempDir()
	if err := check(dir, 3, 0); err != nil {
		t.Fatal(err)
	}
	if err := check(dir, 3, 0); err != nil {
		t.Fatalf("the same number again: %v", err)
	}
	for _, n := range []int{0, 2} {
		if err := check(dir, n, 0); err == nil || !strings.Contains(err.Error(), "was made with --groups 3") {
			t.Fatalf("--groups %d on a directory made with 3: %v", n, err)
		}
	}
	if err := check(dir, 3, 2); err == nil || !strings.Contains(err.Error(), "was made with --replicas 0, not 2") {
		t.Fatalf("--replicas 2 on a directory made without: %v", err)
	}
	old := t.TempDir()
	if err := os.Mkdir(filepath.Join(old, "wal"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := check(old, 0, 0); err != nil {
		t.Fatalf("a one-group node as it was: %v", err)
	}
	if err := check(old, 2, 0); err == nil || !strings.Contains(err.Error(), "--groups is given on a node's first start") {
		t.Fatalf("data groups added to a one-group node's directory: %v", err)
	}
	if err := check(t.TempDir(), 0, 2); err == nil || !strings.Contains(err.Error(), "--replicas goes with --groups") {
		t.Fatalf("--replicas without --groups: %v", err)
	}
	if _, err := checkGroups(t.TempDir(), 3, 2, "n9", boot); err == nil || !strings.Contains(err.Error(), "not among --bootstrap's members") {
		t.Fatalf("--replicas on a node not bootstrapped: %v", err)
	}
	// With replicas, the groups a node hosts are recorded, and read back
	// without --bootstrap.
	rep := t.TempDir()
	made, err := checkGroups(rep, 3, 2, "n1", boot)
	if err != nil {
		t.Fatal(err)
	}
	again, err := checkGroups(rep, 3, 2, "n1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(made.hosts, []int{1, 3}) || !slices.Equal(again.hosts, made.hosts) {
		t.Fatalf("n1 of 3 nodes hosts groups %v, read back as %v; want [1 3] both times", made.hosts, again.hosts)
	}
}

// Each data group has replicas members, in the order of the nodes' ids
// from the group's own on, whatever order --bootstrap lists them in: every
// node is the first member (the preferred leader) of as many groups as any
// other, give or take one, and with a multiple of the nodes' number of
// groups, hosts as many as any other.
func TestGroupMembersSpreadEveryGroupOverReplicasOfTheNodes(t *testing.T) {
	boot := []Member{{ID: "n3"}, {ID: "n1"}, {ID: "n6"}, {ID: "n2"}, {ID: "n5"}, {ID: "n4"}}
	for _, c := range []struct{ groups, replicas int }{{6, 3}, {7, 3}, {4, 2}, {6, 0}, {6, 6}, {2, 9}} {
		hosts, firsts := map[string]int{}, map[string]int{}
		for g := 1; g <= c.groups; g++ {
			m := GroupMembers(boot, g, c.replicas)
			want := c.replicas
			if want == 0 || want > len(boot) {
				want = len(boot)
			}
			ids := map[string]bool{}
			for _, x := range m {
				ids[x.ID] = true
				hosts[x.ID]++
			}
			if len(m) != want || len(ids) != want {
				t.Fatalf("%d groups on %d replicas: group %d has members %v, want %d distinct", c.groups, c.replicas, g, m, want)
			}
			if m[0].ID != fmt.Sprintf("n%d", (g-1)%len(boot)+1) {
				t.Fatalf("group %d's first member is %s", g, m[0].ID)
			}
			firsts[m[0].ID]++
		}
		spread := func(counts map[string]int) int {
			lo, hi := c.groups, 0
			for _, x := range boot {
				lo, hi = min(lo, counts[x.ID]), max(hi, counts[x.ID])
			}
			return hi - lo
		}
		if spread(firsts) > 1 {
			t.Fatalf("%d groups on %d replicas: the nodes are the first members of %v groups", c.groups, c.replicas, firsts)
		}
		if c.groups%len(boot) == 0 && spread(hosts) != 0 {
			t.Fatalf("%d groups on %d replicas: the nodes host %v groups", c.groups, c.replicas, hosts)
		}
	}
}

// With replicas, each data group runs on its members alone, every node
// learns where the leaders of the groups it does not host are from the
// nodes that host them, and the leads are spread over all the nodes, also
// after a node dies and comes back.
func TestHostReplicasRunEachGroupOnItsMembersAndEveryNodeKnowsEveryLeader(t *testing.T) {
	const nodes, groups, replicas = 4, 5, 3 // data groups 1 to 4
	c := newReplicatedHosts(t, nodes, groups, replicas, nil)
	for i, h := range c.hosts {
		for g := 1; g < groups; g++ {
			member := slices.ContainsFunc(GroupMembers(c.members, g, replicas), func(m Member) bool { return m.ID == c.members[i].ID })
			if (h.Groups[g] != nil) != member {
				t.Fatalf("n%d hosts group %d: %v; a member: %v", i+1, g, h.Groups[g] != nil, member)
			}
			if member {
				if f := h.Groups[g].Raft.GetConfiguration(); f.Error() != nil || len(f.Configuration().Servers) != replicas {
					t.Fatalf("group %d on n%d: configuration %v (%v), want %d members", g, i+1, f.Configuration(), f.Error(), replicas)
				}
			}
		}
	}
	for id, n := range c.spread() {
		if n != 1 {
			t.Fatalf("%s leads %d groups, want 1", id, n)
		}
	}
	c.agreeOnLeaders()
	c.stop(0)
	c.spread()
	c.agreeOnLeaders()
	c.open(0)
	c.spread()
	c.agreeOnLeaders()
}

// agreeOnLeaders waits until every running host names, for every data
// group, the leader that group's replicas have.
func (c *hostCluster) agreeOnLeaders() {
	c.t.Helper()
	waitUntil(c.t, "every node to know every group's leader", func() bool {
		for g := 1; g < c.groups; g++ {
			want := ""
			for i, h := range c.hosts {
				if h != nil && h.Groups[g] != nil && h.Groups[g].Raft.State() == raft.Leader {
					want = c.members[i].ID
				}
			}
			for _, h := range c.hosts {
				if h == nil {
					continue
				}
				if id, _ := h.Leader(g); want == "" || id != want {
					return false
				}
			}
		}
		return true
	})
}

// join opens one more host, with the bootstrapped members' groups, and
// has group 0's leader add it; it returns the host's index.
func (c *hostCluster) join() int {
	c.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	i := len(c.members)
	c.members = append(c.members, Member{ID: fmt.Sprintf("n%d", i+1), Raft: ln.Addr().String()})
	c.dirs = append(c.dirs, c.t.TempDir())
	c.tls = append(c.tls, nil)
	c.ports = append(c.ports, newLinkLayer(ln, nil, func() []string { return []string{"127.0.0.1"} }, linkGreeting))
	c.hosts = append(c.hosts, nil)
	c.open(i)
	if _, err := c.zeroLeader().Add(c.members[i].ID, c.members[i].Raft); err != nil {
		c.t.Fatal(err)
	}
	return i
}

// zeroLeader is group 0's leader among the running hosts, once there is one.
func (c *hostCluster) zeroLeader() *Node {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, h := range c.hosts {
			if h != nil && h.Groups[0].Raft.State() == raft.Leader {
				return h.Groups[0]
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatal("group 0 has no leader")
	return nil
}

// allVoters waits until every running host's every group has the voters
// ids, and no other member.
func (c *hostCluster) allVoters(ids ...string) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var off string
		for i, h := range c.hosts {
			for g := 0; h != nil && g < c.groups && off == ""; g++ {
				var got []string
				for _, s := range h.Groups[g].Raft.GetConfiguration().Configuration().Servers {
					if s.Suffrage != raft.Voter {
						s.ID += " (non-voter)"
					}
					got = append(got, string(s.ID))
				}
				if slices.Sort(got); !slices.Equal(got, ids) {
					off = fmt.Sprintf("group %d on %s: %v", g, c.members[i].ID, got)
				}
			}
		}
		if off == "" {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the groups' members are not %v within 30 s: %s", ids, off)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A node added to group 0 joins every data group, as a voter once it has
// caught up, and is given its share of the leads; a node removed from
// group 0 leaves every data group, those it led last, and its leads go
// to the others.
func TestHostDataGroupsFollowGroupZerosMembers(t *testing.T) {
	c := newHostCluster(t, 3, 5, nil) // four data groups
	c.spread()
	c.join()
	c.allVoters("n1", "n2", "n3", "n4")
	for id, n := range c.spread() {
		if n != 1 {
			t.Fatalf("with n4 joined, %s leads %d data groups, want 1", id, n)
		}
	}
	// n2 leads a data group (the one it is the first member of) and may
	// lead group 0: either way it leaves every group.
	if _, err := c.zeroLeader().Remove("n2"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.hosts[1].Groups[0].Removed():
	case <-time.After(30 * time.Second):
		t.Fatal("n2 was not told of its removal from group 0")
	}
	if !c.hosts[1].AwaitLeft(30 * time.Second) {
		t.Fatal("a data group still names n2 30 s after its removal from group 0")
	}
	c.stop(1)
	c.allVoters("n1", "n3", "n4")
	counts := c.spread()
	if len(counts) != 3 || counts["n1"]+counts["n3"]+counts["n4"] != 4 {
		t.Fatalf("with n2 removed, the leads: %v", counts)
	}
}
