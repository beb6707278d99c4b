package e2e

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"testing"
	"time"

)

// groupOfTube and groupOfID are the placement docs/cluster.md gives: a
// tube lives in group 1 + FNV-1a(name) mod n, and group g of n gives out
// the ids that are g modulo n.
func groupOfTube(name string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(name))
	return 1 + int(h.Sum32()%uint32(n))
}

func groupOfID(id uint64, n int) int {
	if g := int(id % uint64(n)); g != 0 {
		return g
	}
	return n
}

// startGroupsCluster starts n nodes whose tubes are spread over groups
// data groups (--groups), and returns it once a put to a tube of every
// group is acknowledged through the first node.
func startGroupsCluster(t *testing.T, n, groups int) *testCluster {
	t.Helper()
	tc := newTestCluster(t, n)
	for _, nd := range tc.nodes {
		tc.start(nd, "--groups", strconv.Itoa(groups))
	}
	deadline := time.Now().Add(60 * time.Second)
	for g := 1; g <= groups; g++ {
		cmd := "use " + tubeOfGroup(g, groups, "warm") + "\r\nput 0 0 60 1\r\nw\r\n"
		for !strings.Contains(try(tc.nodes[0].srv.addr, cmd, 5*time.Second), "INSERTED ") {
			if time.Now().After(deadline) {
				t.Fatalf("no put to group %d was acknowledged within 60 s", g)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return tc
}

// tubeOfGroup is a tube name starting with prefix that lives in group g.
func tubeOfGroup(g, groups int, prefix string) string {
	for i := 0; ; i++ {
		name := fmt.Sprintf("%s%d", prefix, i)
		if groupOfTube(name, groups) == g {
			return name
		}
	}
}

// Every command a client sends any node runs at the leader of its tube's
// or job's group, and answers as one server does: ids name their group, a
// job put through one node is reserved and deleted through another, and
// the tubes of every group are listed and counted.
func TestGroupsServeEveryCommandThroughAnyNode(t *testing.T) {
	const groups = 3
	tc := startGroupsCluster(t, 3, groups)
	for i, nd := range tc.nodes {
		for g := 1; g <= groups; g++ {
			tube := tubeOfGroup(g, groups, "t")
			p := nd.srv.dial(t)
			mustSend(t, p, "use "+tube+"\r\n")
			expect(t, p, "USING "+tube+"\r\n")
			mustSend(t, p, "put 5 0 60 3\r\nabc\r\n")
			line := readLine(t, p)
			id, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(line, "INSERTED "), "\r\n"), 10, 64)
			if err != nil || !strings.HasPrefix(line, "INSERTED ") {
				t.Fatalf("put through n%d to group %d: %q", i+1, g, line)
			}
			if groupOfID(id, groups) != g {
				t.Fatalf("job %d of group %d names group %d", id, g, groupOfID(id, groups))
			}
			// Reserved, then deleted, through the next node.
			w := tc.nodes[(i+1)%len(tc.nodes)].srv.dial(t)
			mustSend(t, w, "watch "+tube+"\r\nignore default\r\n")
			expect(t, w, "WATCHING 2\r\nWATCHING 1\r\n")
			mustSend(t, w, "reserve-with-timeout 5\r\n")
			expect(t, w, fmt.Sprintf("RESERVED %d 3\r\nabc\r\n", id))
			mustSend(t, w, fmt.Sprintf("stats-job %d\r\n", id))
			expectYAMLContains(t, w, "tube: \""+tube+"\"", "state: reserved", "pri: 5")
			mustSend(t, p, fmt.Sprintf("delete %d\r\n", id))
			expect(t, p, "NOT_FOUND\r\n") // reserved by the other client
			mustSend(t, w, fmt.Sprintf("delete %d\r\npeek %d\r\n", id, id))
			expect(t, w, "DELETED\r\nNOT_FOUND\r\n")
		}
	}
	c := tc.nodes[2].srv.dial(t)
	mustSend(t, c, "list-tubes\r\n")
	list := readYAML(t, c)
	for g := 1; g <= groups; g++ {
		if tube := tubeOfGroup(g, groups, "t"); !strings.Contains(list, "- "+tube+"\n") {
			t.Fatalf("list-tubes lacks %s of group %d:\n%s", tube, g, list)
		}
	}
	if strings.Count(list, "- default\n") != 1 {
		t.Fatalf("list-tubes names default other than once:\n%s", list)
	}
	mustSend(t, c, "list-tube-used\r\nlist-tubes-watched\r\n")
	expect(t, c, "USING default\r\nOK 14\r\n---\n- default\n\r\n")
}

// A reserve over tubes of several groups takes the most urgent job any of
// them has ready, puts the others' offers back uncounted, and, when none
// has one, waits at every group for the first.
func TestGroupsReserveOverTubesOfSeveralGroups(t *testing.T) {
	const groups = 3
	tc := startGroupsCluster(t, 3, groups)
	a, b := tubeOfGroup(1, groups, "a"), tubeOfGroup(2, groups, "b")
	p := tc.nodes[0].srv.dial(t)
	put := func(tube string, pri int, body string) uint64 {
		t.Helper()
		mustSend(t, p, fmt.Sprintf("use %s\r\nput %d 0 60 %d\r\n%s\r\n", tube, pri, len(body), body))
		expect(t, p, "USING "+tube+"\r\n")
		line := readLine(t, p)
		id, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(line, "INSERTED "), "\r\n"), 10, 64)
		if err != nil {
			t.Fatalf("put: %q", line)
		}
		return id
	}
	ida := put(a, 10, "aa")
	idb := put(b, 1, "bb")
	w := tc.nodes[1].srv.dial(t)
	mustSend(t, w, "watch "+a+"\r\nwatch "+b+"\r\nignore default\r\n")
	expect(t, w, "WATCHING 2\r\nWATCHING 3\r\nWATCHING 2\r\n")
	mustSend(t, w, "reserve\r\n")
	expect(t, w, fmt.Sprintf("RESERVED %d 2\r\nbb\r\n", idb))
	mustSend(t, w, "reserve\r\n")
	expect(t, w, fmt.Sprintf("RESERVED %d 2\r\naa\r\n", ida))
	// a's job was offered to the first reserve and put back: no release.
	mustSend(t, w, fmt.Sprintf("stats-job %d\r\n", ida))
	expectYAMLContains(t, w, "releases: 0", "state: reserved")
	mustSend(t, w, fmt.Sprintf("delete %d\r\ndelete %d\r\n", ida, idb))
	expect(t, w, "DELETED\r\nDELETED\r\n")

	// Nothing ready: the reserve waits at both groups, and a put to
	// either, through any node, answers it.
	mustSend(t, w, "reserve-with-timeout 30\r\n")
	expectNothing(t, w, 200*time.Millisecond)
	idb2 := put(b, 3, "late")
	expectWithin(t, w, fmt.Sprintf("RESERVED %d 4\r\nlate\r\n", idb2), 10*time.Second)
	// The wait at a's group was cancelled: a job put there is ready.
	ida2 := put(a, 3, "next")
	mustSend(t, p, fmt.Sprintf("stats-job %d\r\n", ida2))
	expectYAMLContains(t, p, "state: ready")
	mustSend(t, w, "reserve-with-timeout 0\r\n")
	expect(t, w, fmt.Sprintf("RESERVED %d 4\r\nnext\r\n", ida2))
	mustSend(t, w, "reserve-with-timeout 1\r\n")
	expectWithin(t, w, "TIMED_OUT\r\n", 10*time.Second)
}
