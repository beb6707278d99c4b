package e2e

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The clients of a node of many groups, plaintext or TLS, cannot take the
// descriptors its raft needs, and TLS clients that connect and stall
// cannot hold handshakes without bound, as with a single server or a
// follower of one group. The node's open-file limit is lowered; more TLS
// connections than its share of handshakes stall, from one address, and a
// TLS client from another address still gets in and is served; then more
// plaintext clients than the limit connect, reconnecting when closed. The
// node keeps at least half its reserve free throughout, counts what it
// closed, and logs no shortage; with another node killed, every group
// then needs the flooded node's raft to commit, the flooded node leads
// some, and puts to every group through the third node are acknowledged:
// its clients leave descriptors for the other nodes' connections to the
// groups it leads.
func TestGroupsClientsLeaveRaftItsDescriptors(t *testing.T) {
	t.Parallel()
	const groups, nofile = 3, 512
	// Free for raft whoever connects: half of the 128 descriptors kept
	// back (docs/limits.md).
	const raftFree = 64
	tc, ca, tlsAddr := startGroupsClusterTLS(t, 3, groups)
	flooded := tc.nodes[0]
	pid := flooded.srv.pid()
	t.Logf("the node to flood has %d descriptors open", procFDs(t, pid))
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: nofile, Max: nofile}, nil); err != nil {
		t.Skipf("prlimit: %v", err)
	}
	base := "http://" + flooded.http
	counter := func(name string) float64 {
		t.Helper()
		m := metric(scrape(t, base), name, "")
		if m == nil {
			t.Fatalf("/metrics of a node of many groups has no %s", name)
		}
		return sampleValue(m)
	}

	// Stalled TLS connections from 127.0.0.1, more than the handshakes
	// that may be in progress.
	const limit = nofile / 4
	const stalls = limit + 64
	most := 0
	for range stalls {
		nc, err := net.DialTimeout("tcp", tlsAddr[flooded], defaultTimeout)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
	}
	var shed, failed float64
	waitFor(t, 3*tlsHandshakeTimeout, "every stalled TLS connection accounted for", func() bool {
		most = max(most, procFDs(t, pid))
		shed, failed = counter("beanpole_tls_handshakes_shed_total"), counter("beanpole_tls_handshake_failures_total")
		return shed+failed >= stalls-limit
	})
	if failed == 0 && shed != stalls-limit {
		t.Fatalf("%v TLS connections shed, want %d: %d stalled, %d handshakes allowed", shed, stalls-limit, stalls, limit)
	}
	// A TLS client from another address cuts the oldest stalled
	// handshake short, and is served.
	other, err := dialTLSFrom(t, ca, tlsAddr[flooded], "127.0.0.2")
	if err != nil {
		t.Fatalf("a TLS client from another address while one address stalls every handshake: %v", err)
	}
	tube := tubeOfGroup(2, groups, "bound")
	mustSend(t, other, "use "+tube+"\r\nput 0 0 60 2\r\nhi\r\n")
	expect(t, other, "USING "+tube+"\r\n")
	readInserted(t, other, defaultTimeout)

	// Plaintext clients, more than the descriptors.
	f := startFlood(flooded.srv.addr, nofile+64)
	defer f.close()
	most = max(most, f.untilShed(t, flooded.srv, nofile+64, 60*time.Second))
	// The clients go on: those they saw closed unanswered are counted
	// before the node's count is read.
	seen := f.shed.Load()
	refused := counter("beanpole_connections_refused_total")
	t.Logf("%d plaintext clients served, %d closed unanswered (%v counted by the node), %v TLS connections shed, %v handshakes failed; at most %d of %d descriptors open",
		f.served.Load(), seen, refused, shed, failed, most, nofile)
	if most > nofile-raftFree {
		t.Errorf("the flooded node had %d of %d descriptors open: fewer than %d left for raft", most, nofile, raftFree)
	}
	if refused < float64(seen) {
		t.Errorf("beanpole_connections_refused_total %v, clients saw %d closed unanswered", refused, seen)
	}

	// Every group needs the flooded node now, and the groups it comes to
	// lead are reached through its internal listeners, which its clients
	// leave descriptors for.
	killed, peer := tc.nodes[1], tc.nodes[2]
	killed.srv.stop()
	waitFor(t, 60*time.Second, "the flooded node to lead a data group", func() bool {
		return slices.ContainsFunc(tc.groups(peer), func(st groupStatus) bool { return st.Group > 0 && st.Leader == flooded.id })
	})
	for g := 1; g <= groups; g++ {
		tube := tubeOfGroup(g, groups, "after")
		waitFor(t, 60*time.Second, fmt.Sprintf("a put to group %d through %s", g, peer.id), func() bool {
			return strings.HasPrefix(try(peer.srv.addr, "use "+tube+"\r\nput 0 0 60 1\r\nx\r\n", 5*time.Second), "USING "+tube+"\r\nINSERTED ")
		})
	}
	most = max(most, procFDs(t, pid))
	if most > nofile-raftFree {
		t.Errorf("the flooded node had %d of %d descriptors open: fewer than %d left for raft", most, nofile, raftFree)
	}
	f.close()
	if exited(flooded.srv) {
		t.Fatalf("the flooded node exited: %v", flooded.srv.waitErr)
	}
	if n := strings.Count(flooded.srv.out.String(), "too many open files"); n > 0 {
		t.Errorf("the flooded node ran out of descriptors: %d log lines say so", n)
	}
}

// What a node of many groups holds for its clients all together is
// bounded by the input budget, as one server's waiting connections are:
// the input of clients whose reserve waits (each also bounded on its
// own), and list replies over 64 KiB that their clients do not read.
// With an 8 MiB budget, six clients each send 2 MiB behind a waiting
// reserve: some are closed, the rest wait on, and the node holds no more
// than the budget. Then two clients ask twice for a 7.7 MB list-tubes and
// read nothing: the first list is held until it is read, the others, past
// the budget, are answered OUT_OF_MEMORY, the clients go on, and another
// client is served throughout.
func TestGroupsWaitingInputAndUnreadListsStayWithinTheBudget(t *testing.T) {
	const budget = 8 << 20
	t.Setenv("BEANPOLE_INPUT_BUDGET_MB", "8")
	tc := startGroupsCluster(t, 3, 3)
	nd := tc.nodes[0]
	base := "http://" + nd.http
	held := func() float64 {
		t.Helper()
		m := metric(scrape(t, base), "beanpole_route_held_bytes", "")
		if m == nil {
			t.Fatal("/metrics of a node of many groups has no beanpole_route_held_bytes")
		}
		return sampleValue(m)
	}
	most := 0.0

	// Input behind waiting reserves.
	flood := strings.Repeat("list-tube-used\r\n", (2<<20)/len("list-tube-used\r\n"))
	var ws []*conn
	for range 6 {
		c := nd.srv.dial(t)
		mustSend(t, c, "reserve-with-timeout 120\r\n")
		ws = append(ws, c)
	}
	for _, c := range ws {
		go func() { _, _ = c.nc.Write([]byte(flood)) }()
	}
	closed := 0
	waitFor(t, 60*time.Second, "the clients past the budget to be closed", func() bool {
		most = max(most, held())
		closed = 0
		for _, c := range ws {
			if c.eof == nil {
				_ = c.fill(time.Now().Add(time.Millisecond))
			}
			if len(c.buf) > 0 {
				t.Fatalf("a client waiting in reserve got %s", show(string(c.buf)))
			}
			if c.eof != nil {
				closed++
			}
		}
		return closed >= 2
	})
	t.Logf("%d of %d flooding clients closed; at most %.0f bytes held", closed, len(ws), most)
	for _, c := range ws {
		c.nc.Close()
	}
	waitFor(t, 60*time.Second, "the closed clients' input to be let go", func() bool { return held() == 0 })

	// Long lists nobody reads: 40,000 tubes of 190-byte names, each
	// watched by one of 40 clients, make a 7.7 MB list-tubes.
	const tubes, per = 40000, 1000
	for k := range tubes / per {
		c := nd.srv.dial(t)
		var cmds, want strings.Builder
		for i := range per {
			fmt.Fprintf(&cmds, "watch %0190d\r\n", k*per+i)
			fmt.Fprintf(&want, "WATCHING %d\r\n", i+2)
		}
		mustSend(t, c, cmds.String())
		expect(t, c, want.String())
	}
	ls := []*conn{nd.srv.dial(t), nd.srv.dial(t)}
	for _, c := range ls {
		mustSend(t, c, "list-tubes\r\nlist-tubes\r\n")
	}
	p := nd.srv.dial(t)
	oom := 0
	waitFor(t, 60*time.Second, "lists past the budget to be refused", func() bool {
		most = max(most, held())
		roundTrip(t, p, defaultTimeout)
		mustSend(t, p, "stats\r\n")
		expectYAMLContains(t, p, "current-connections: ")
		return held() > budget/2
	})
	// Read everything now: whole lists, and OUT_OF_MEMORY for those that
	// did not fit.
	for _, c := range ls {
		for range 2 {
			line := readLineWithin(t, c, 60*time.Second)
			if line == "OUT_OF_MEMORY" {
				oom++
				continue
			}
			var n int
			if _, err := fmt.Sscanf(line, "OK %d", &n); err != nil {
				t.Fatalf("list-tubes: %q", line)
			}
			readN(t, c, n+2, 60*time.Second)
		}
	}
	t.Logf("%d of %d long lists refused; at most %.0f bytes held", oom, 2*len(ls), most)
	if oom < 2 {
		t.Errorf("%d lists refused, want 2: %d lists of %d bytes unread", oom, 2*len(ls), tubes*193)
	}
	if most > budget {
		t.Errorf("the router held %.0f bytes for its clients, past its budget of %d", most, budget)
	}
	for _, c := range ls {
		mustSend(t, c, "list-tube-used\r\n")
		expect(t, c, "USING default\r\n")
	}
}
