package e2e

import (
	"fmt"
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
// the replies one server gives. Each job is reserved once. Reads on their
// way to a stopped leader are answered by the next.
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
		return readInserted(t, p, 60*time.Second)
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
	// Reads on their way to it then (a stats-tube of a tube of the group
	// that holds a delayed job, so that it is there at the next leader
	// whoever watches it, and a stats, which asks every group) are
	// answered by the next leader.
	wait()
	kept := tubeOfGroup(g, groups, "kept")
	if !strings.HasPrefix(try(pn.srv.addr, "use "+kept+"\r\nput 0 600 60 1\r\nk\r\n", defaultTimeout), "USING "+kept+"\r\nINSERTED ") {
		t.Fatal("a delayed job put to the group")
	}
	r1, r2 := wn.srv.dial(t), pn.srv.dial(t)
	for _, r := range []*conn{r1, r2} {
		mustSend(t, r, "stats-tube "+kept+"\r\n")
		expectYAMLContains(t, r, "name: \""+kept+"\"\n")
	}
	if err := victim.srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resume := sync.OnceFunc(func() { _ = victim.srv.cmd.Process.Signal(syscall.SIGCONT) })
	t.Cleanup(resume)
	mustSend(t, r1, "stats-tube "+kept+"\r\n")
	mustSend(t, r2, "stats\r\n")
	waitFor(t, 60*time.Second, "another node to lead the stopped node's group", func() bool {
		gs := tc.groups(wn)
		return len(gs) > g && gs[g].Leader != "" && gs[g].Leader != victim.id
	})
	for _, r := range []*conn{r1, r2} {
		if err := r.fill(time.Now().Add(60 * time.Second)); err != nil {
			t.Fatalf("a read on its way to the stopped leader: %v", err)
		}
	}
	expectYAMLContains(t, r1, "name: \""+kept+"\"\n", "current-jobs-delayed: 1\n")
	expectYAMLContains(t, r2, "current-connections: ")
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

// Reserves a client pipelines through a node, at the tubes of one group,
// are answered in the order sent, among the commands around them: those
// that find a job at once, one that waits until a put through another
// node, and the commands behind it, which wait for it as on one server,
// whether sent with it or while it waits. A client that hangs up while
// such a reserve waits is given no job.
func TestGroupsPipelinedReservesAreAnsweredInOrder(t *testing.T) {
	const groups = 3
	tc := startGroupsCluster(t, 3, groups)
	tube := tubeOfGroup(2, groups, "pipe")
	p := tc.nodes[0].srv.dial(t)
	mustSend(t, p, "use "+tube+"\r\n")
	expect(t, p, "USING "+tube+"\r\n")
	put := func(body string) uint64 {
		t.Helper()
		mustSend(t, p, fmt.Sprintf("put 0 0 60 %d\r\n%s\r\n", len(body), body))
		return readInserted(t, p, defaultTimeout)
	}
	var ids []uint64
	for i := range 5 {
		ids = append(ids, put(fmt.Sprintf("j%d", i)))
	}
	w := tc.nodes[1].srv.dial(t)
	var send, want strings.Builder
	send.WriteString("watch " + tube + "\r\nignore default\r\n")
	want.WriteString("WATCHING 2\r\nWATCHING 1\r\n")
	for i, id := range ids {
		send.WriteString("reserve\r\nlist-tube-used\r\n")
		fmt.Fprintf(&want, "RESERVED %d 2\r\nj%d\r\nUSING default\r\n", id, i)
	}
	send.WriteString("reserve-with-timeout 0\r\n")
	want.WriteString("TIMED_OUT\r\n")
	for _, id := range ids {
		fmt.Fprintf(&send, "delete %d\r\n", id)
		want.WriteString("DELETED\r\n")
	}
	mustSend(t, w, send.String())
	expect(t, w, want.String())

	// A pipelined reserve that waits holds back the commands behind it.
	mustSend(t, w, "reserve\r\nlist-tube-used\r\nreserve-with-timeout 0\r\n")
	expectNothing(t, w, 100*time.Millisecond)
	late := put("late")
	expect(t, w, fmt.Sprintf("RESERVED %d 4\r\nlate\r\nUSING default\r\nTIMED_OUT\r\n", late))
	mustSend(t, w, fmt.Sprintf("delete %d\r\n", late))
	expect(t, w, "DELETED\r\n")

	// A reserve sent alone waits with its session's goroutine let go; what
	// the client sends meanwhile runs once it is answered.
	mustSend(t, w, "reserve\r\n")
	expectNothing(t, w, 100*time.Millisecond)
	mustSend(t, w, "list-tube-used\r\n")
	expectNothing(t, w, 50*time.Millisecond)
	mustSend(t, w, "reserve-with-timeout 0\r\n")
	expectNothing(t, w, 50*time.Millisecond)
	later := put("later")
	expect(t, w, fmt.Sprintf("RESERVED %d 5\r\nlater\r\nUSING default\r\nTIMED_OUT\r\n", later))
	mustSend(t, w, fmt.Sprintf("delete %d\r\n", later))
	expect(t, w, "DELETED\r\n")

	// Clients that hang up while their reserves wait.
	gone := tc.nodes[1].srv.dial(t)
	mustSend(t, gone, "watch "+tube+"\r\nignore default\r\nreserve\r\nlist-tube-used\r\n")
	expect(t, gone, "WATCHING 2\r\nWATCHING 1\r\n")
	expectNothing(t, gone, 100*time.Millisecond)
	// And one whose reserve, sent alone, waits with its goroutine let go.
	alone := tc.nodes[2].srv.dial(t)
	mustSend(t, alone, "watch "+tube+"\r\nignore default\r\n")
	expect(t, alone, "WATCHING 2\r\nWATCHING 1\r\n")
	mustSend(t, alone, "reserve\r\n")
	expectNothing(t, alone, 100*time.Millisecond)
	gone.nc.Close()
	alone.nc.Close()
	// Its wait is cancelled once the router sees it go: a job put then
	// stays ready, never reserved.
	waitFor(t, 30*time.Second, "the hung-up clients' waits to end", func() bool {
		out := try(tc.nodes[0].srv.addr, "stats-tube "+tube+"\r\n", 5*time.Second)
		return strings.Contains(out, "current-waiting: 0")
	})
	id := put("after")
	mustSend(t, p, fmt.Sprintf("stats-job %d\r\n", id))
	expectYAMLContains(t, p, "state: ready", "reserves: 0")
}

// A client of a node of many groups that sends nothing for a second is
// parked: its session keeps what it knows (the tube it uses, the tubes it
// watches) but no goroutine or read buffer, and it is served again as soon
// as it sends, or ended as soon as it hangs up. Half the clients are TLS
// clients, parked alike; a TLS worker's reserve that waits is suspended,
// and what it sends meanwhile, a record at a time, is run once a job
// answers it.
func TestGroupsIdleClientsAreParkedAndServedWhenTheySend(t *testing.T) {
	const groups, clients = 3, 40
	tc, ca, tlsAddr := startGroupsClusterTLS(t, 3, groups)
	nd := tc.nodes[0]
	dialTLS := func() *conn {
		t.Helper()
		c, err := dialTLSFrom(t, ca, tlsAddr[nd], "")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	parked := func() float64 {
		m := metric(scrape(t, "http://"+nd.http), "beanpole_route_parked_clients", "")
		if m == nil {
			t.Fatal("/metrics has no beanpole_route_parked_clients")
		}
		return sampleValue(m)
	}
	base := parked()
	cs := make([]*conn, clients)
	tubes := make([]string, clients)
	for i := range cs {
		tubes[i] = tubeOfGroup(1+i%groups, groups, fmt.Sprintf("park%d-", i))
		if i%2 == 0 {
			cs[i] = nd.srv.dial(t)
		} else {
			cs[i] = dialTLS()
		}
		mustSend(t, cs[i], "use "+tubes[i]+"\r\nwatch "+tubes[i]+"\r\nignore default\r\n")
		expect(t, cs[i], "USING "+tubes[i]+"\r\nWATCHING 2\r\nWATCHING 1\r\n")
	}
	waitFor(t, 60*time.Second, "the idle clients to be parked", func() bool { return parked() >= base+clients })
	// Each parked client's session knows its tube; half send their next
	// command in two parts, the first alone.
	for i, c := range cs {
		cmd := "put 0 0 60 2\r\nhi\r\nreserve-with-timeout 0\r\nlist-tube-used\r\n"
		if i%2 == 0 {
			mustSend(t, c, cmd[:5])
			expectNothing(t, c, 20*time.Millisecond)
			cmd = cmd[5:]
		}
		mustSend(t, c, cmd)
		id := readInserted(t, c, defaultTimeout)
		expect(t, c, fmt.Sprintf("RESERVED %d 2\r\nhi\r\nUSING %s\r\n", id, tubes[i]))
		mustSend(t, c, fmt.Sprintf("delete %d\r\n", id))
		expect(t, c, "DELETED\r\n")
	}
	// Parked again, then gone: their sessions end.
	waitFor(t, 60*time.Second, "the clients to be parked again", func() bool { return parked() >= base+clients })
	// A TLS worker's wait, suspended.
	w, p := dialTLS(), dialTLS()
	tube := tubeOfGroup(2, groups, "tlswait")
	mustSend(t, w, "watch "+tube+"\r\nignore default\r\n")
	expect(t, w, "WATCHING 2\r\nWATCHING 1\r\n")
	mustSend(t, p, "use "+tube+"\r\n")
	expect(t, p, "USING "+tube+"\r\n")
	before := parked()
	mustSend(t, w, "reserve\r\n")
	waitFor(t, 60*time.Second, "the TLS worker's reserve to be suspended", func() bool { return parked() >= before+1 })
	for _, cmd := range []string{"list-tube-used\r\n", "use ", tube + "\r\n"} {
		mustSend(t, w, cmd)
	}
	expectNothing(t, w, 20*time.Millisecond)
	mustSend(t, p, "put 0 0 60 2\r\nhi\r\n")
	id := readInserted(t, p, defaultTimeout)
	expect(t, w, fmt.Sprintf("RESERVED %d 2\r\nhi\r\nUSING default\r\nUSING %s\r\n", id, tube))
	w.nc.Close()
	p.nc.Close()
	for _, c := range cs {
		c.nc.Close()
	}
	waitFor(t, 60*time.Second, "the hung-up clients' sessions to end", func() bool { return parked() <= base })
	c := nd.srv.dial(t)
	waitFor(t, 60*time.Second, "the node to count only the client left", func() bool {
		mustSend(t, c, "stats\r\n")
		return strings.Contains(expectYAMLContains(t, c, "current-connections: "), "current-connections: 1\n")
	})
}
