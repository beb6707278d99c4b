package e2e

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A cluster of beanpole processes on 127.0.0.1: each node's client port is
// the harness's, its raft port one more free port, its state a temporary
// directory. Nodes find the leader through the log (-V prints "cluster:
// leading node=ID").

type clusterNode struct {
	id, raft, http, dir string
	srv                 *server
	// bootstrap, when set, is this node's own --bootstrap list (a
	// partitionable cluster names each peer by a proxy of its own).
	bootstrap string
	// clockOffset, when set, runs this node's wall clock that far off
	// (BEANPOLE_WALL_CLOCK_OFFSET); only a test that is not parallel may
	// set it, as it goes through the test process's environment.
	clockOffset string
}

type testCluster struct {
	t         *testing.T
	nodes     []*clusterNode
	bootstrap string
	token     string // the --http-token-file every node is given
	// args are given to every node at each start, before start's own.
	args []string
}

func startTestCluster(t *testing.T, n int) *testCluster {
	t.Helper()
	tc := newTestCluster(t, n)
	for _, nd := range tc.nodes {
		tc.start(nd)
	}
	return tc
}

// newTestCluster lays out n nodes (ids, addresses, directories, the
// bootstrap list of all n) without starting them.
func newTestCluster(t *testing.T, n int) *testCluster {
	t.Helper()
	skipLegacy(t, "cluster mode is beanpole's own")
	clusterTurn(t)
	tc := &testCluster{t: t, token: filepath.Join(t.TempDir(), "token")}
	if err := os.WriteFile(tc.token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var members []string
	for i := range n {
		nd := tc.newNode(fmt.Sprintf("n%d", i+1))
		tc.nodes = append(tc.nodes, nd)
		members = append(members, nd.id+"="+nd.raft)
	}
	tc.bootstrap = strings.Join(members, ",")
	return tc
}

// The cluster tests run in parallel with the rest of the suite, but one
// cluster at a time: several groups electing and heartbeating at once on
// a loaded two-core machine (a race-built server costs 5-10 times the CPU)
// missed heartbeats, and leaders lost the lead in the middle of tests
// that do not expect it. clusterTurn waits for the turn and holds it until
// the test that takes it ends; a test that builds another cluster (itself
// or in a subtest) while it holds the turn goes on. The turn is also a
// lock on a file in the temporary directory, so that the suite's passes
// running at once (make test runs the plain and the race-built one side
// by side) take turns too.
var clusters = struct {
	sync.Mutex
	holder string // the top-level test holding the turn
	turn   chan struct{}
}{turn: make(chan struct{}, 1)}

func clusterTurn(t *testing.T) {
	top, _, _ := strings.Cut(t.Name(), "/")
	clusters.Lock()
	held := clusters.holder == top
	clusters.Unlock()
	if held {
		return
	}
	clusters.turn <- struct{}{}
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "beanpole-e2e-cluster.lock"), os.O_RDWR|os.O_CREATE, 0o666)
	if err == nil {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX)
	}
	if err != nil {
		t.Logf("no lock shared with other test processes: %v", err)
	}
	clusters.Lock()
	clusters.holder = top
	clusters.Unlock()
	t.Cleanup(func() {
		clusters.Lock()
		clusters.holder = ""
		clusters.Unlock()
		if lock != nil {
			lock.Close() // drops the lock
		}
		<-clusters.turn
	})
}

// newNode picks a node's raft and HTTP ports and its directory.
func (tc *testCluster) newNode(id string) *clusterNode {
	tc.t.Helper()
	var ports [2]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			tc.t.Fatal(err)
		}
		ports[i] = p
	}
	return &clusterNode{id: id, raft: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		http: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])), dir: tc.t.TempDir()}
}

// start (re)starts a node with its directory and addresses.
func (tc *testCluster) start(nd *clusterNode, extra ...string) {
	tc.t.Helper()
	if nd.clockOffset != "" {
		tc.t.Setenv("BEANPOLE_WALL_CLOCK_OFFSET", nd.clockOffset)
		defer os.Unsetenv("BEANPOLE_WALL_CLOCK_OFFSET")
	}
	nd.srv = startTestServer(tc.t, "tcp", "", append([]string{"-V", "--cluster-dir", nd.dir, "--node-id", nd.id,
		"--raft", nd.raft, "--bootstrap", cmp.Or(nd.bootstrap, tc.bootstrap), "--http", nd.http, "--http-token-file", tc.token},
		append(slices.Clone(tc.args), extra...)...))
}

// status is a node's GET /cluster, once it answers (a node starting up
// answers 404 until its raft is open).
func (tc *testCluster) status(nd *clusterNode) clusterStatus {
	tc.t.Helper()
	var st clusterStatus
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, "http://"+nd.http+"/cluster", nil)
		req.Header.Set("Authorization", "Bearer "+tc.secret())
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			if resp.StatusCode == 200 {
				err = json.NewDecoder(resp.Body).Decode(&st)
				resp.Body.Close()
				if err != nil {
					tc.t.Fatalf("GET /cluster: %v", err)
				}
				return st
			}
			last = resp.Status
			resp.Body.Close()
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			tc.t.Fatalf("GET /cluster on %s: %s after 30 s", nd.id, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// secret is the token in tc.token's file.
func (tc *testCluster) secret() string {
	b, err := os.ReadFile(tc.token)
	if err != nil {
		tc.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

type clusterStatus struct {
	ID, State, Leader string
	Term              uint64
	CommitIndex       uint64 `json:"commit_index"`
	AppliedIndex      uint64 `json:"applied_index"`
	ForwardRefused    uint64 `json:"forward_refused"`
	Members           []struct {
		ID, Raft, Client string
		Voter            bool
	}
}

// leader waits until one of the running nodes (other than those excluded)
// says it leads and returns it.
func (tc *testCluster) leader(excluded ...*clusterNode) *clusterNode {
	tc.t.Helper()
	var found *clusterNode
	waitFor(tc.t, 60*time.Second, "a leader", func() bool {
		for _, nd := range tc.nodes {
			if nd.srv == nil || containsNode(excluded, nd) || exited(nd.srv) {
				continue
			}
			if leads(nd.srv.out.String()) {
				found = nd
				return true
			}
		}
		return false
	})
	return found
}

// agreedLeader is the leader once every running node names it as the
// leader in GET /cluster (a node whose output says it leads may not have
// noticed yet that another took over on a loaded machine, and a follower
// that does not know the leader yet closes the clients it would forward:
// a test that puts through a follower first waits for this).
func (tc *testCluster) agreedLeader() *clusterNode {
	tc.t.Helper()
	var lead *clusterNode
	waitFor(tc.t, 60*time.Second, "every node to name one leader", func() bool {
		lead = tc.leader()
		for _, nd := range tc.nodes {
			if nd.srv != nil && !exited(nd.srv) && tc.status(nd).Leader != lead.id {
				return false
			}
		}
		return tc.status(lead).State == "leader"
	})
	return lead
}

// leads reports whether a node's output says it leads: it said so after
// it last said it lost the lead (a node that loses the lead follows again
// in the same process, and may lead again).
func leads(out string) bool {
	at := strings.LastIndex(out, "cluster: leading")
	return at >= 0 && at > strings.LastIndex(out, "lost the lead")
}

// transferTo hands the lead from the leader lead to node to, and waits
// until to leads and the old leader follows.
func (tc *testCluster) transferTo(lead, to *clusterNode) {
	tc.t.Helper()
	if out, err := exec.Command(target.bin, "cluster", "transfer-leader", "--http", lead.http, "--token-file", tc.token,
		"--id", to.id).CombinedOutput(); err != nil {
		tc.t.Fatalf("transfer-leader to %s: %v\n%s", to.id, err, out)
	}
	waitFor(tc.t, 30*time.Second, "the deposed leader "+lead.id+" to follow", func() bool { return !leads(lead.srv.out.String()) })
	if next := tc.leader(lead); next != to {
		tc.t.Fatalf("%s leads, not %s", next.id, to.id)
	}
}

// other is a node of the cluster that is none of nds (the first such).
func (tc *testCluster) other(nds ...*clusterNode) *clusterNode {
	for _, x := range tc.nodes {
		if !containsNode(nds, x) {
			return x
		}
	}
	return nil
}

func containsNode(s []*clusterNode, n *clusterNode) bool {
	for _, x := range s {
		if x == n {
			return true
		}
	}
	return false
}

func exited(s *server) bool {
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// try sends one command on a fresh connection and returns what came back
// before the server closed or d passed ("" on a refused connection).
func try(addr, cmd string, d time.Duration) string {
	nc, err := net.DialTimeout("tcp", addr, d)
	if err != nil {
		return ""
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(d))
	if _, err := nc.Write([]byte(cmd)); err != nil {
		return ""
	}
	nc.(*net.TCPConn).CloseWrite()
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := nc.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return string(out)
		}
	}
}

// putUntilInserted puts through addr on fresh connections until one is
// acknowledged, and returns its id and how long that took.
func putUntilInserted(t *testing.T, addr, body string, within time.Duration) (uint64, time.Duration) {
	t.Helper()
	start := time.Now()
	cmd := fmt.Sprintf("put 0 0 60 %d\r\n%s\r\n", len(body), body)
	for time.Since(start) < within {
		if id, ok := strings.CutPrefix(try(addr, cmd, 5*time.Second), "INSERTED "); ok {
			n, err := strconv.ParseUint(strings.TrimSuffix(id, "\r\n"), 10, 64)
			if err != nil {
				t.Fatalf("INSERTED %q", id)
			}
			return n, time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no put through %s was acknowledged within %v", addr, within)
	return 0, 0
}

func TestClusterEveryAcknowledgedJobSurvivesTheLeadersDeath(t *testing.T) {
	t.Parallel()
	tc := startTestCluster(t, 3)
	lead := tc.agreedLeader()
	follower := tc.other(lead)
	// A client of a follower is served by the leader, byte for byte.
	c := follower.srv.dial(t)
	ids := map[uint64]string{}
	var last uint64
	for i := range 40 {
		body := fmt.Sprintf("job %d", i)
		mustSend(t, c, fmt.Sprintf("put %d 0 60 %d\r\n%s\r\n", i, len(body), body))
		line := readLine(t, c)
		id, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSuffix(line, "\r\n"), "INSERTED "), 10, 64)
		if err != nil || id <= last {
			t.Fatalf("put %d: %q after id %d", i, line, last)
		}
		ids[id], last = body, id
	}
	var deleted []uint64
	for id := range ids {
		if len(deleted) == 10 {
			break
		}
		mustSend(t, c, fmt.Sprintf("delete %d\r\n", id))
		expect(t, c, "DELETED\r\n")
		deleted = append(deleted, id)
	}
	for _, id := range deleted {
		delete(ids, id)
	}

	// kill -9 of the leader: the follower's client is closed, as by the
	// leader's death, and a new put through any survivor is acknowledged.
	lead.srv.stop()
	expectClosed(t, c)
	id, took := putUntilInserted(t, follower.srv.addr, "after", 30*time.Second)
	t.Logf("first put acknowledged %v after kill -9 of the leader", took)
	if id <= last {
		t.Fatalf("the first id after the failover is %d, not above %d", id, last)
	}
	ids[id] = "after"

	// Every acknowledged job is on the new leader with its body; every
	// acknowledged delete stays done. Checked through each survivor.
	for _, nd := range tc.nodes {
		if nd == lead {
			continue
		}
		c := nd.srv.dial(t)
		for id, body := range ids {
			mustSend(t, c, fmt.Sprintf("peek %d\r\n", id))
			expect(t, c, fmt.Sprintf("FOUND %d %d\r\n%s\r\n", id, len(body), body))
		}
		for _, id := range deleted {
			mustSend(t, c, fmt.Sprintf("peek %d\r\n", id))
			expect(t, c, "NOT_FOUND\r\n")
		}
	}

	// The dead node restarts, catches up and forwards to the leader.
	tc.start(lead)
	want := fmt.Sprintf("current-jobs-ready: %d\n", len(ids))
	waitFor(t, 30*time.Second, "the restarted node to serve "+want, func() bool {
		return strings.Contains(try(lead.srv.addr, "stats\r\n", 5*time.Second), want)
	})
}

func TestClusterDeposedLeaderClosesItsClientsAndFollowsAgain(t *testing.T) {
	t.Parallel()
	tc := startTestCluster(t, 3)
	lead := tc.leader()
	c := lead.srv.dial(t)
	put(t, c, 0, 0, 60, "x", 1)
	mustSend(t, c, "reserve\r\n")
	expect(t, c, "RESERVED 1 1\r\nx\r\n")

	// Stopped, the leader misses its heartbeats and another node takes the
	// lead; the reservation does not survive that (beanstalkd's rule for a
	// worker whose connection drops).
	lead.srv.signal(t, syscall.SIGSTOP)
	var others []*clusterNode
	for _, nd := range tc.nodes {
		if nd != lead {
			others = append(others, nd)
		}
	}
	putUntilInserted(t, others[0].srv.addr, "y", 30*time.Second)
	// Through the other node, once it knows the new leader too (until then
	// it forwards to the stopped one, which answers nothing): each try's
	// reservations end with its connection.
	var out string
	waitFor(t, 60*time.Second, "the new leader to hand out jobs 1 and 2 through "+others[1].id, func() bool {
		out = try(others[1].srv.addr, "reserve-with-timeout 0\r\nreserve-with-timeout 0\r\n", 5*time.Second)
		got := strings.Split(strings.TrimSuffix(out, "\r\n"), "\r\n")
		sort.Strings(got)
		return strings.Join(got, "|") == "RESERVED 1 1|RESERVED 2 1|x|y"
	})

	// Resumed, the old leader learns it lost the lead: it closes its
	// clients and follows again, in the same process, forwarding a new
	// client to the new leader, which has job 2.
	lead.srv.signal(t, syscall.SIGCONT)
	expectClosed(t, c)
	waitFor(t, 30*time.Second, lead.id+" to follow again", func() bool { return tc.status(lead).State == "follower" })
	select {
	case <-lead.srv.exited:
		t.Fatalf("the deposed leader exited: %v", lead.srv.waitErr)
	default:
	}
	putUntilInserted(t, lead.srv.addr, "z", 30*time.Second)
	fwd := lead.srv.dial(t)
	if st := statsJob(t, fwd, 2); st["id"] != "2" {
		t.Fatalf("job 2 through the deposed leader: %v", st)
	}
}

func TestClusterStatusJoinAndTransferThroughTheHTTPSide(t *testing.T) {
	t.Parallel()
	tc := startTestCluster(t, 3)
	lead := tc.leader()
	for _, nd := range tc.nodes {
		st := tc.status(nd)
		waitFor(t, 30*time.Second, nd.id+" to know the leader and where its clients connect", func() bool {
			st = tc.status(nd)
			for _, m := range st.Members {
				if m.ID == lead.id && m.Client != "" {
					return st.Leader == lead.id
				}
			}
			return false
		})
		wantState := "follower"
		if nd == lead {
			wantState = "leader"
		}
		if st.ID != nd.id || st.State != wantState || st.Term == 0 || len(st.Members) != 3 {
			t.Fatalf("%s: GET /cluster = %+v", nd.id, st)
		}
		for _, m := range st.Members {
			if !m.Voter || (m.ID == lead.id && m.Client != lead.srv.addr) {
				t.Fatalf("%s: member %+v (leader's client address %s)", nd.id, m, lead.srv.addr)
			}
		}
	}

	// /readyz: 200 on the leader only, so a load balancer can route there.
	readyz := func(nd *clusterNode) int {
		resp, err := http.Get("http://" + nd.http + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	waitFor(t, 30*time.Second, "/readyz 200 on the leader", func() bool { return readyz(lead) == 200 })
	for _, nd := range tc.nodes {
		if code := readyz(nd); nd != lead && code != 503 {
			t.Fatalf("%s, a follower: /readyz %d, want 503", nd.id, code)
		}
	}

	// `beanpole cluster status` prints the same JSON with the token, and
	// without it nothing an attacker could aim with.
	out, err := exec.Command(target.bin, "cluster", "status", "--http", lead.http, "--token-file", tc.token).Output()
	if err != nil || !strings.Contains(string(out), `"state": "leader"`) || !strings.Contains(string(out), lead.raft) {
		t.Fatalf("beanpole cluster status: %v\n%s", err, out)
	}
	out, err = exec.Command(target.bin, "cluster", "status", "--http", lead.http).Output()
	if err != nil || !strings.Contains(string(out), `"state": "leader"`) || strings.Contains(string(out), lead.raft) ||
		strings.Contains(string(out), `"id"`) || strings.Contains(string(out), `"term"`) {
		t.Fatalf("beanpole cluster status without the token: %v\n%s", err, out)
	}
	// Changes need the token.
	if out, err := exec.Command(target.bin, "cluster", "transfer-leader", "--http", lead.http).CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "401 Unauthorized") {
		t.Fatalf("transfer-leader without the token: %v\n%s", err, out)
	}

	// /metrics has raft's figures: the leader's state, its commits' latency.
	resp, err := http.Get("http://" + lead.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	scrape, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`beanpole_raft_state{state="leader"} 1`, `beanpole_raft_state{state="follower"} 0`,
		`beanpole_raft_leader{id="` + lead.id + `"} 1`, "beanpole_raft_apply_seconds_count ", "beanpole_raft_leader_changes_total "} {
		if !strings.Contains(string(scrape), want) {
			t.Fatalf("the leader's /metrics has no %q", want)
		}
	}

	// A follower's /metrics has its raft figures too (how far behind it
	// is), and none of an engine it does not run.
	f := tc.other(lead)
	resp, err = http.Get("http://" + f.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	scrape, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(scrape), `beanpole_raft_state{state="follower"} 1`) ||
		!strings.Contains(string(scrape), "beanpole_raft_last_contact_seconds ") || strings.Contains(string(scrape), "beanstalkd_current_jobs_ready") {
		t.Fatalf("a follower's /metrics: %d\n%s", resp.StatusCode, scrape)
	}

	// The dashboard shows the members and who leads.
	resp, err = http.Get("http://" + lead.http + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := lead.id + " is the leader, term "; !strings.Contains(string(page), want) ||
		!strings.Contains(string(page), lead.id+" (leader)") {
		t.Fatalf("the dashboard does not say %q and who leads:\n%s", want, page)
	}

	// A fourth node joins through the leader's HTTP side.
	c := lead.srv.dial(t)
	put(t, c, 0, 0, 60, "before the join", 1)
	n4 := tc.newNode("n4")
	tc.nodes = append(tc.nodes, n4)
	tc.start(n4, "--join", lead.http)
	waitFor(t, 30*time.Second, "n4 in the configuration", func() bool { return len(tc.status(lead).Members) == 4 })
	waitFor(t, 30*time.Second, "n4 to forward to the leader", func() bool {
		return strings.Contains(try(n4.srv.addr, "peek 1\r\n", 5*time.Second), "FOUND 1 15\r\nbefore the join\r\n")
	})

	// transfer-leader hands the lead to another node; from then on the old
	// leader answers none of its clients (the new one does not wait for its
	// lease), and, no longer leading, it exits for its supervisor to
	// restart it.
	old := lead.srv.dial(t)
	put(t, old, 0, 0, 60, "on the old leader", 2)
	if out, err := exec.Command(target.bin, "cluster", "transfer-leader", "--http", lead.http, "--token-file", tc.token).CombinedOutput(); err != nil {
		t.Fatalf("transfer-leader: %v\n%s", err, out)
	}
	mustSend(t, old, "reserve-with-timeout 0\r\n")
	expectClosed(t, old)
	next := tc.leader(lead)
	if id, _ := putUntilInserted(t, next.srv.addr, "after the transfer", 30*time.Second); id <= 1 {
		t.Fatalf("id %d after the transfer", id)
	}
}

func TestClusterWipedNodeCatchesUp(t *testing.T) {
	t.Parallel()
	tc := startTestCluster(t, 3)
	lead := tc.leader()
	c := lead.srv.dial(t)
	for i := range 30 {
		put(t, c, 0, 0, 60, fmt.Sprintf("job %d", i), uint64(i+1))
	}
	wiped := tc.other(lead)
	wiped.srv.stop()
	if err := os.RemoveAll(wiped.dir); err != nil {
		t.Fatal(err)
	}
	put(t, c, 0, 0, 60, "while it was away", 31)
	tc.start(wiped)
	leaderApplied := tc.status(lead).AppliedIndex
	waitFor(t, 30*time.Second, "the wiped node to apply the leader's log", func() bool {
		return tc.status(wiped).AppliedIndex >= leaderApplied
	})
	// Its copy of the state is whole: it serves every job once it leads.
	if out, err := exec.Command(target.bin, "cluster", "transfer-leader", "--http", lead.http, "--token-file", tc.token,
		"--id", wiped.id).CombinedOutput(); err != nil {
		t.Fatalf("transfer-leader: %v\n%s", err, out)
	}
	if next := tc.leader(lead); next != wiped {
		t.Fatalf("%s leads, not the wiped node %s", next.id, wiped.id)
	}
	cn := wiped.srv.dial(t)
	for i := range 31 {
		body := fmt.Sprintf("job %d", i)
		if i == 30 {
			body = "while it was away"
		}
		mustSend(t, cn, fmt.Sprintf("peek %d\r\n", i+1))
		expect(t, cn, fmt.Sprintf("FOUND %d %d\r\n%s\r\n", i+1, len(body), body))
	}
}

func TestClusterSeededFromABeanstalkdBinlog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := makeCBinlog(t, dir, syscall.SIGTERM)
	// One node seeds the group from C's binlog; then two more join it.
	tc := newTestCluster(t, 1)
	tc.start(tc.nodes[0], "--cluster-import", dir)
	lead := tc.leader()
	b.check(t, lead.srv.dial(t))
	for _, id := range []string{"n2", "n3"} {
		nd := tc.newNode(id)
		tc.nodes = append(tc.nodes, nd)
		tc.start(nd, "--join", lead.http)
	}
	waitFor(t, 30*time.Second, "three voters (a node joins as a non-voter, promoted once it has caught up)", func() bool {
		voters := 0
		for _, m := range tc.status(lead).Members {
			if m.Voter {
				voters++
			}
		}
		return voters == 3
	})
	// Handed the lead, a node that joined serves the same jobs; ids go on
	// above every id C handed out.
	if out, err := exec.Command(target.bin, "cluster", "transfer-leader", "--http", lead.http, "--token-file", tc.token,
		"--id", "n2").CombinedOutput(); err != nil {
		t.Fatalf("transfer-leader: %v\n%s", err, out)
	}
	next := tc.leader(lead)
	b.check(t, next.srv.dial(t))
	if id, _ := putUntilInserted(t, next.srv.addr, "after the seed", 30*time.Second); id <= b.maxID {
		t.Fatalf("id %d after the seed, not above C's %d", id, b.maxID)
	}
}

// TestClusterFailoverTime kills the leader (-9) over and over and measures
// the time from the kill to the first put acknowledged through another
// node's address. BEANPOLE_FAILOVER_KILLS sets the count (default 5; the
// figures in docs/cluster.md are from 20). The bound asserted is loose (a
// loaded machine); the figures are logged.
func TestClusterFailoverTime(t *testing.T) {
	t.Parallel()
	kills := 5
	if v := os.Getenv("BEANPOLE_FAILOVER_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		kills = n
	}
	tc := startTestCluster(t, 3)
	var took []time.Duration
	for range kills {
		lead := tc.leader()
		other := tc.other(lead)
		putUntilInserted(t, other.srv.addr, "before", 30*time.Second)
		lead.srv.stop()
		_, d := putUntilInserted(t, other.srv.addr, "after", 30*time.Second)
		took = append(took, d)
		tc.start(lead)
		next := tc.leader(lead)
		waitFor(t, 30*time.Second, "the restarted node to catch up", func() bool {
			return tc.status(lead).AppliedIndex >= tc.status(next).CommitIndex
		})
	}
	slices.Sort(took)
	p50, p99 := took[len(took)/2], took[(len(took)*99+99)/100-1]
	t.Logf("failover over %d kills: p50 %v, p99 %v, max %v", len(took), p50, p99, took[len(took)-1])
	if !raceSkipsBound(t, "failover time") && p99 > 10*time.Second {
		t.Errorf("failover p99 %v", p99)
	}
}

// A node that hands the lead over and takes it back serves a new engine in
// the same process; the memory releaser started at its first lead reads
// whichever engine serves, every 250 ms. That engine must be set up before
// the releaser can find it: against a race-built server, the node leading
// again serves for over a second so that the releaser reads it.
func TestClusterNodeLeadsAgainAfterHandingTheLeadOver(t *testing.T) {
	t.Parallel()
	tc := startTestCluster(t, 3)
	lead := tc.leader()
	put(t, lead.srv.dial(t), 0, 0, 60, "first", 1)
	f := tc.other(lead)
	tc.transferTo(lead, f)
	tc.transferTo(f, lead)
	id, _ := putUntilInserted(t, lead.srv.addr, "second", 30*time.Second)
	led := time.Now()
	c := lead.srv.dial(t)
	mustSend(t, c, fmt.Sprintf("peek 1\r\npeek %d\r\n", id))
	expect(t, c, fmt.Sprintf("FOUND 1 5\r\nfirst\r\nFOUND %d 6\r\nsecond\r\n", id))
	// The releaser's period is time the server measures; nothing else
	// shows that it has read the engine.
	time.Sleep(time.Until(led.Add(time.Second)))
	put(t, c, 0, 0, 60, "third", id+1)
}

func TestClusterEveryAcknowledgedJobSurvivesKillingEveryNode(t *testing.T) {
	t.Parallel()
	tc := startTestCluster(t, 3)
	lead := tc.leader()
	c := lead.srv.dial(t)
	for i := range 50 {
		put(t, c, i, 0, 60, fmt.Sprintf("job %d", i), uint64(i+1))
	}
	mustSend(t, c, "delete 7\r\n")
	expect(t, c, "DELETED\r\n")
	// Every node dies at once (kill -9), then all come back.
	for _, nd := range tc.nodes {
		nd.srv.stop()
	}
	for _, nd := range tc.nodes {
		tc.start(nd)
	}
	cn := tc.leader().srv.dial(t)
	for i := range 50 {
		mustSend(t, cn, fmt.Sprintf("peek %d\r\n", i+1))
		if i+1 == 7 {
			expect(t, cn, "NOT_FOUND\r\n")
			continue
		}
		body := fmt.Sprintf("job %d", i)
		expect(t, cn, fmt.Sprintf("FOUND %d %d\r\n%s\r\n", i+1, len(body), body))
	}
	put(t, cn, 0, 0, 60, "after", 51)
}

// A follower has no engine of its own to drain or files to reload: SIGUSR1
// and SIGHUP must not end it (their default action) while it follows, and
// once it leads they mean what they mean on a single server.
func TestClusterFollowerOutlivesSIGUSR1AndSIGHUPAndDrainsOnceItLeads(t *testing.T) {
	t.Parallel()
	tc := startTestCluster(t, 3)
	lead := tc.agreedLeader()
	f := tc.other(lead)
	// The handlers are in place once the node follows: it says so.
	waitFor(t, 30*time.Second, f.id+" to follow", func() bool {
		return strings.Contains(f.srv.out.String(), "cluster: following")
	})
	f.srv.signal(t, syscall.SIGUSR1)
	f.srv.signal(t, syscall.SIGHUP)
	if id, _ := putUntilInserted(t, f.srv.addr, "through the follower", 30*time.Second); id != 1 {
		t.Fatalf("id %d", id)
	}
	if exited(f.srv) {
		t.Fatalf("%s exited on SIGUSR1 or SIGHUP", f.id)
	}

	tc.transferTo(lead, f)
	c := f.srv.dial(t)
	f.srv.signal(t, syscall.SIGUSR1)
	waitFor(t, 30*time.Second, f.id+", leading, to drain", func() bool {
		return try(f.srv.addr, "put 0 0 60 1\r\nx\r\n", 5*time.Second) == "DRAINING\r\n"
	})
	mustSend(t, c, "peek 1\r\n")
	expect(t, c, "FOUND 1 20\r\nthrough the follower\r\n")
}
