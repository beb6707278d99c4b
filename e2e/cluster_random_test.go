package e2e

// The cluster's searching test: producers and workers on every node's
// address, while the leader is killed (-9), stopped and resumed (SIGSTOP,
// SIGCONT), cut off from the others, cut off from one follower in one
// direction, or slowed (every chunk on its links delayed up to 200 ms), and
// followers are killed or cut off, each dead node restarted
// as a supervisor would. Every reply is checked against what the clients have
// seen so far, and at the end, with every node back, the queue is drained
// and compared with what was acknowledged:
//
//   - ids are unique and a put's id is above every id acknowledged before
//     the put was sent (ids keep increasing across leaders);
//   - a reserved job's body is the one its put carried (no id reused);
//   - a job whose delete was acknowledged is never reserved again, and no
//     two deletes of one job both succeed (never held by two workers);
//   - every job whose put was acknowledged and whose delete was never sent
//     is still there at the end (nothing acknowledged is lost).
//
// BEANPOLE_CLUSTER_RANDOM_DURATION (default 12s) sets the faulty phase.
// The faults come in rounds, each kind once a round in a random order, so
// that a long run injects every kind about as often.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

type clusterHistory struct {
	mu       sync.Mutex
	bodyOf   map[uint64]string // acknowledged puts
	idOf     map[string]uint64
	sent     map[string]bool // every put body sent
	maxAcked map[int]uint64  // by group: ids increase per group
	delSent  map[uint64]bool // a delete was sent (its outcome may be unknown)
	// reservedBody maps each body a worker reserved to the job's id: how a
	// put whose answer never came is matched to its job.
	reservedBody map[string]uint64
	deleted      map[uint64]int // acknowledged deletes, by worker
	failures     []string
	puts, del    int
}

func (h *clusterHistory) fail(format string, a ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.failures) < 20 {
		h.failures = append(h.failures, fmt.Sprintf(format, a...))
	}
}

// nodeAddrs is the current client address of each node that runs.
func (tc *testCluster) liveAddrs(mu *sync.Mutex) []string {
	mu.Lock()
	defer mu.Unlock()
	var out []string
	for _, nd := range tc.nodes {
		if nd.srv != nil && !exited(nd.srv) {
			out = append(out, nd.srv.addr)
		}
	}
	return out
}

// wire is one client connection with a reader.
type wire struct {
	nc     net.Conn
	r      *bufio.Reader
	lastOK int64 // when the last answer on it was read (jobHistory's clock)
}

func dialAny(addrs []string) *wire {
	if len(addrs) == 0 {
		return nil
	}
	nc, err := net.DialTimeout("tcp", addrs[rand.IntN(len(addrs))], 2*time.Second)
	if err != nil {
		return nil
	}
	return &wire{nc: nc, r: bufio.NewReader(nc)}
}

// call sends cmd and reads one reply line (and a body for RESERVED).
func (w *wire) call(cmd string) (line, body string, err error) {
	w.nc.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err = w.nc.Write([]byte(cmd)); err != nil {
		return "", "", err
	}
	if line, err = w.r.ReadString('\n'); err != nil {
		return "", "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if strings.HasPrefix(line, "RESERVED ") {
		f := strings.Fields(line)
		n, _ := strconv.Atoi(f[2])
		b := make([]byte, n+2)
		if _, err = io.ReadFull(w.r, b); err != nil {
			return "", "", err
		}
		body = string(b[:n])
	}
	return line, body, nil
}

func TestClusterRandomizedFaultsLoseNothingAcknowledged(t *testing.T) { randomizedFaults(t, 3, 0, 0) }

// The same search against three nodes whose tubes are spread over three
// data groups (--groups 3): each producer puts to a tube of its own group,
// every worker watches a tube of every group, the faults strike the leader
// of a group picked at random, and a put to that group through an
// untouched node measures its failover. Ids increase per group.
func TestGroupsRandomizedFaultsLoseNothingAcknowledged(t *testing.T) { randomizedFaults(t, 3, 3, 0) }

// The same search against five nodes with five data groups on three
// replicas each (--replicas 3): the clients' nodes host some groups and
// not others, the follower a fault strikes is a member of the struck
// leader's group, and the node measuring the failover may host it or not.
func TestGroupsOnReplicasRandomizedFaultsLoseNothingAcknowledged(t *testing.T) {
	randomizedFaults(t, 5, 5, 3)
}

// randomizedFaults is the search against a cluster of nodes nodes and
// groups data groups (0: the one group), each on replicas of the nodes (0:
// on every node).
func randomizedFaults(t *testing.T, nodes, groups, replicas int) {
	t.Parallel()
	dur := 12 * time.Second
	if v := os.Getenv("BEANPOLE_CLUSTER_RANDOM_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		dur = d
	}
	var extra []string
	ng := max(groups, 1)
	tubes := []string{"default"}
	if groups > 0 {
		extra = []string{"--groups", strconv.Itoa(groups)}
		if replicas > 0 {
			extra = append(extra, "--replicas", strconv.Itoa(replicas))
		}
		tubes = nil
		for g := 1; g <= groups; g++ {
			tubes = append(tubes, tubeOfGroup(g, groups, "r"))
		}
	}
	tc, pt := startPartitionableCluster(t, nodes, extra...)
	if groups > 0 {
		tc.settled(tc.nodes[0], 60*time.Second)
	} else {
		tc.leader()
	}
	var nodesMu sync.Mutex // guards each node's srv while the supervisor restarts it
	jh := newJobHistory()
	h := &clusterHistory{bodyOf: map[uint64]string{}, idOf: map[string]uint64{}, sent: map[string]bool{}, maxAcked: map[int]uint64{},
		delSent: map[uint64]bool{}, deleted: map[uint64]int{}, reservedBody: map[string]uint64{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup

	// connected returns w, or else a new connection to a running node
	// with the commands of setup sent and answered as expected; false once
	// the faulty phase is over.
	connected := func(w *wire, setup []string) (*wire, bool) {
		for {
			select {
			case <-stop:
				return nil, false
			default:
			}
			if w != nil {
				return w, true
			}
			if w = dialAny(tc.liveAddrs(&nodesMu)); w == nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			for i := 0; i < len(setup); i += 2 {
				if line, _, err := w.call(setup[i]); err != nil || !strings.HasPrefix(line, setup[i+1]) {
					w.nc.Close()
					w = nil
					break
				}
			}
		}
	}
	// watchAll has a worker watch a tube of every group, and those alone.
	var watchAll []string
	if groups > 0 {
		for _, tube := range tubes {
			watchAll = append(watchAll, "watch "+tube+"\r\n", "WATCHING ")
		}
		watchAll = append(watchAll, "ignore default\r\n", "WATCHING ")
	}
	for p := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var w *wire
			tube := tubes[p%ng]
			var setup []string
			if groups > 0 {
				setup = []string{"use " + tube + "\r\n", "USING "}
			}
			for n := 0; ; n++ {
				var ok bool
				if w, ok = connected(w, setup); !ok {
					return
				}
				body := fmt.Sprintf("p%d-%d", p, n)
				h.mu.Lock()
				h.sent[body] = true
				floor := h.maxAcked[p%ng+1]
				h.mu.Unlock()
				call := jh.now()
				line, _, err := w.call(fmt.Sprintf("put 0 0 120 %d\r\n%s\r\n", len(body), body))
				if err != nil {
					jh.add(jobInput{kind: opPut, worker: 10 + p, body: body}, call, outUnknown)
					w.nc.Close()
					w = nil
					continue
				}
				id, perr := strconv.ParseUint(strings.TrimPrefix(line, "INSERTED "), 10, 64)
				if perr != nil {
					jh.add(jobInput{kind: opPut, worker: 10 + p, body: body}, call, outUnknown)
					if line != "INTERNAL_ERROR" { // a leader that lost the lead refuses
						h.fail("put %s: %q", body, line)
					}
					w.nc.Close()
					w = nil
					continue
				}
				h.mu.Lock()
				if _, dup := h.bodyOf[id]; dup {
					h.failures = append(h.failures, fmt.Sprintf("id %d acknowledged twice (%s and %s)", id, h.bodyOf[id], body))
				}
				if id <= floor {
					h.failures = append(h.failures, fmt.Sprintf("put %s got id %d, not above %d acknowledged before it was sent", body, id, floor))
				}
				h.bodyOf[id], h.idOf[body] = body, id
				if g := groupOfID(id, ng); g != p%ng+1 {
					h.failures = append(h.failures, fmt.Sprintf("put %s to %s got id %d of group %d", body, tube, id, g))
				}
				h.maxAcked[p%ng+1] = max(h.maxAcked[p%ng+1], id)
				jh.add(jobInput{kind: opPut, worker: 10 + p, id: id, body: body}, call, outOK)
				h.puts++
				h.mu.Unlock()
			}
		}()
	}
	for wk := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var w *wire
			for {
				var ok bool
				if w, ok = connected(w, watchAll); !ok {
					return
				}
				// lose records the connection lost, for the job the
				// worker held on it (it holds one at most).
				lose := func(held uint64) {
					if held != 0 {
						jh.add(jobInput{kind: opLost, worker: wk, id: held}, w.lastOK, outOK)
					}
					w.nc.Close()
					w = nil
				}
				call := jh.now()
				line, body, err := w.call("reserve-with-timeout 1\r\n")
				if err != nil || !strings.HasPrefix(line, "RESERVED ") {
					if err != nil || (line != "TIMED_OUT" && line != "DEADLINE_SOON") {
						lose(0)
					} else {
						w.lastOK = jh.now()
					}
					continue
				}
				w.lastOK = jh.now()
				id, _ := strconv.ParseUint(strings.Fields(line)[1], 10, 64)
				jh.add(jobInput{kind: opReserve, worker: wk, id: id}, call, outOK)
				h.mu.Lock()
				h.reservedBody[body] = id
				h.mu.Unlock()
				h.mu.Lock()
				if b, ok := h.bodyOf[id]; ok && b != body {
					h.failures = append(h.failures, fmt.Sprintf("job %d reserved with body %q, put with %q", id, body, b))
				} else if !ok && !h.sent[body] {
					h.failures = append(h.failures, fmt.Sprintf("job %d reserved with body %q, which no put sent", id, body))
				}
				if by, ok := h.deleted[id]; ok {
					h.failures = append(h.failures, fmt.Sprintf("job %d reserved by worker %d after worker %d's delete was acknowledged", id, wk, by))
				}
				h.delSent[id] = true
				h.mu.Unlock()
				call = jh.now()
				line, _, err = w.call(fmt.Sprintf("delete %d\r\n", id))
				switch {
				case err == nil && line == "DELETED":
					w.lastOK = jh.now()
					jh.add(jobInput{kind: opDelete, worker: wk, id: id}, call, outOK)
				case err == nil && line == "NOT_FOUND":
					w.lastOK = jh.now()
					jh.add(jobInput{kind: opDelete, worker: wk, id: id}, call, outNotFound)
					continue
				default:
					jh.add(jobInput{kind: opDelete, worker: wk, id: id}, call, outUnknown)
					lose(id)
					continue
				}
				h.mu.Lock()
				if by, ok := h.deleted[id]; ok {
					h.failures = append(h.failures, fmt.Sprintf("job %d deleted by worker %d and by worker %d: held by two at once", id, by, wk))
				}
				h.deleted[id] = wk
				h.del++
				h.mu.Unlock()
			}
		}()
	}

	// Faults, one node down at a time, and a supervisor that restarts the
	// killed.
	restart := func() {
		nodesMu.Lock()
		defer nodesMu.Unlock()
		for _, nd := range tc.nodes {
			if exited(nd.srv) {
				tc.start(nd)
			}
		}
	}
	faults := map[string]int{}
	downtimes := map[string][]time.Duration{}
	end := time.Now().Add(dur)
	var order []int // the kinds of fault still to come in this round, each once
	for time.Now().Before(end) {
		time.Sleep(time.Duration(800+rand.IntN(1200)) * time.Millisecond)
		// The leader struck is group 0's, or a data group's picked at
		// random; a put to that group measures its failover.
		var lead, follower *clusterNode
		availTube := "avail"
		if groups > 0 {
			leaders := tc.settled(tc.running(), 60*time.Second)
			tc.groupsCaughtUp(leaders)
			g := 1 + rand.IntN(groups)
			availTube = tubeOfGroup(g, groups, "avail")
			for _, nd := range tc.nodes {
				if nd.id == leaders[g] {
					lead = nd
				}
			}
			// A follower of the struck group: with replicas, one of its
			// members (the nodes in the order of their ids, from the
			// (g-1)th on).
			for k := range max(replicas, 1) {
				if nd := tc.nodes[(g-1+k)%nodes]; replicas > 0 && nd != lead && follower == nil {
					follower = nd
				}
			}
		} else {
			lead = tc.agreedLeader()
			tc.caughtUp(lead)
		}
		if follower == nil {
			follower = tc.other(lead)
		}
		third := tc.other(lead, follower)
		li, fi := tc.index(lead), tc.index(follower)
		type fault struct {
			kind          string
			start, finish func()
		}
		nothing := func() {}
		fs := []fault{
			{"kill -9 the leader", lead.srv.stop, nothing},
			{"SIGSTOP, SIGCONT the leader", func() { lead.srv.signal(t, syscall.SIGSTOP) }, func() { lead.srv.signal(t, syscall.SIGCONT) }},
			{"kill -9 a follower", follower.srv.stop, nothing},
			{"isolate the leader", func() { pt.isolate(li) }, pt.heal},
			{"isolate a follower", func() { pt.isolate(fi) }, pt.heal},
			{"cut the link leader→follower", func() { pt.cut(li, fi) }, pt.heal},
			{"delay the leader's links", func() { pt.slow(li, time.Duration(20+rand.IntN(180))*time.Millisecond) }, pt.heal},
			{"stall the leader's links (left open, nothing passes)", func() { pt.stall(li) }, pt.heal},
			{"stall a follower's links (left open, nothing passes)", func() { pt.stall(fi) }, pt.heal},
		}
		if len(order) == 0 {
			order = rand.Perm(len(fs))
		}
		f := fs[order[0]]
		order = order[1:]
		kind := f.kind
		began := time.Now()
		f.start()
		// Availability: from the fault's start, puts through a node on
		// the majority's side (one the fault does not touch) must be
		// acknowledged again within availWithin.
		avail := make(chan time.Duration, 1)
		go func() { avail <- putAgain(third.srv.addr, availTube) }()
		time.Sleep(time.Duration(1200+rand.IntN(1500)) * time.Millisecond)
		f.finish()
		faults[kind]++
		d := <-avail
		downtimes[kind] = append(downtimes[kind], d)
		if d > availWithin()/2 {
			t.Logf("%s at %s: a put through %s took %v; the nodes said meanwhile:\n%s", kind, began.UTC().Format(logStamp),
				third.id, d.Round(time.Millisecond), tc.logsBetween(began.Add(-time.Second), began.Add(d)))
		}
		if d > availWithin() {
			h.fail("a put through %s was acknowledged %v after a fault began, want within %v", third.id, d.Round(time.Millisecond), availWithin())
		}
		time.Sleep(time.Duration(300+rand.IntN(700)) * time.Millisecond)
		noneExitedOfItself(t, tc)
		restart()
	}
	close(stop)
	wg.Wait()
	restart()
	// The drain goes through group 0's leader, or with groups through any
	// node, a tube at a time.
	drainNode := func() *clusterNode {
		if groups > 0 {
			return tc.running()
		}
		return tc.leader()
	}
	// A lead that moves (the nodes hand their groups back to a node that
	// is up again) closes the connections with a command on its way to
	// it, as a server's death does: a client dials again.
	dial := func(tube string) *conn {
		deadline := time.Now().Add(time.Minute)
		for {
			c := drainNode().srv.dial(t)
			if tube == "default" {
				return c
			}
			mustSend(t, c, "watch "+tube+"\r\nignore default\r\n")
			first, err := c.lineBy(time.Now().Add(defaultTimeout))
			if err == nil {
				if line := first + "," + readLine(t, c); line != "WATCHING 2,WATCHING 1" {
					t.Fatalf("drain: watch %s: %q", tube, line)
				}
				return c
			}
			if time.Now().After(deadline) {
				t.Fatalf("drain: watch %s: %v, for a minute", tube, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("faults %v; %d puts and %d deletes acknowledged", faults, h.puts, h.del)
	var all []time.Duration
	for kind, ds := range downtimes {
		all = append(all, ds...)
		t.Logf("%s: from its start to a put acknowledged through an untouched node: %s", kind, quantiles(ds))
	}
	t.Logf("every fault: %s", quantiles(all))

	// Drain through the leader: every acknowledged put whose delete was
	// never sent must be there. The lead may still change under the
	// drain (a node starved on a loaded machine): a lost connection is
	// recorded as a worker's would be, and the drain goes on through the
	// leader then.
	// A leader that cannot confirm its lease for a moment after the
	// faults closes each connection at its first reply, so the drain
	// reconnects for as long as a failover may take, backing off, rather
	// than a number of times that a few milliseconds use up.
	found := map[uint64]bool{}
	const drainer = 3
	drainStart, backoff := time.Now(), 10*time.Millisecond
	drops := 0
	for _, tube := range tubes {
		c := dial(tube)
		for {
			reconnect := func() {
				if drops++; time.Since(drainStart) > time.Minute {
					t.Fatalf("drain: the connection was lost %d times in %v", drops, time.Since(drainStart))
				}
				time.Sleep(backoff)
				backoff = min(2*backoff, 500*time.Millisecond)
				c = dial(tube)
			}
			call := jh.now()
			mustSend(t, c, "reserve-with-timeout 0\r\n")
			line, err := c.lineBy(time.Now().Add(defaultTimeout))
			ok := err == nil
			if !ok {
				reconnect() // a reserve that may have taken effect: its job goes back
				continue
			}
			if line == "TIMED_OUT" {
				break
			}
			f := strings.Fields(line)
			if len(f) != 3 || f[0] != "RESERVED" {
				t.Fatalf("drain: %q", line)
			}
			id, _ := strconv.ParseUint(f[1], 10, 64)
			n, _ := strconv.Atoi(f[2])
			jh.add(jobInput{kind: opReserve, worker: drainer, id: id}, call, outOK)
			held := jh.now()
			body, err := c.readNErr(n+2, defaultTimeout)
			ok = err == nil
			if !ok {
				jh.add(jobInput{kind: opLost, worker: drainer, id: id}, held, outOK)
				reconnect()
				continue
			}
			found[id] = true
			h.reservedBody[strings.TrimSuffix(body, "\r\n")] = id
			if b, ok := h.bodyOf[id]; ok && b+"\r\n" != body {
				h.fail("drain: job %d has body %q, put with %q", id, body, b)
			}
			if _, ok := h.deleted[id]; ok {
				h.fail("drain: job %d is back after its delete was acknowledged", id)
			}
			call = jh.now()
			mustSend(t, c, fmt.Sprintf("delete %d\r\n", id))
			h.delSent[id] = true
			line, err = c.lineBy(time.Now().Add(defaultTimeout))
			ok = err == nil
			if !ok {
				jh.add(jobInput{kind: opDelete, worker: drainer, id: id}, call, outUnknown)
				jh.add(jobInput{kind: opLost, worker: drainer, id: id}, held, outOK)
				reconnect()
				continue
			}
			if line != "DELETED" {
				t.Fatalf("drain: delete %d: %q", id, line)
			}
			jh.add(jobInput{kind: opDelete, worker: drainer, id: id}, call, outOK)
		}
	}
	res, n := jh.check(h.reservedBody)
	t.Logf("porcupine: %d operations, one partition a job: %v", n, res)
	if res != porcupine.Ok {
		h.fail("the history of some job is not linearizable under the job model (porcupine: %v)", res)
	}
	lost := 0
	for id, body := range h.bodyOf {
		if !found[id] && !h.delSent[id] {
			lost++
			h.fail("job %d (%s) was acknowledged and never deleted, and is gone", id, body)
		}
	}
	if h.puts == 0 || h.del == 0 {
		h.fail("the workload made no progress: %d puts, %d deletes acknowledged", h.puts, h.del)
	}
	for _, f := range h.failures {
		t.Error(f)
	}
}

// quantiles says the p50, p99 and max of ds, and how many there are.
func quantiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	n := len(ds)
	return fmt.Sprintf("p50 %v, p99 %v, max %v over %d", ds[n/2].Round(time.Millisecond),
		ds[(n*99)/100].Round(time.Millisecond), ds[n-1].Round(time.Millisecond), n)
}

// availWithin is how soon after a single fault puts through the majority's
// side must be acknowledged again: 5 s, or 15 s for a race-built server,
// which runs several times slower.
func availWithin() time.Duration {
	if target.race {
		return 15 * time.Second
	}
	return 5 * time.Second
}

// putAgain puts through addr, in a tube that the workers do not watch, until a put is acknowledged and returns how long that took (a
// minute at most), as a client would that gives up on an attempt after 2 s
// and tries again: a node that has just lost the lead and knows no leader
// yet holds a connection forwarded to it while it waits for one.
func putAgain(addr, tube string) time.Duration {
	start := time.Now()
	for time.Since(start) < time.Minute {
		if strings.HasPrefix(try(addr, "use "+tube+"\r\nput 0 0 60 5\r\navail\r\n", 2*time.Second), "USING "+tube+"\r\nINSERTED ") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// caughtUp waits until every running node has applied what the leader
// lead had committed when asked: a node restarted after the last fault is
// still catching up before that, and a fault then would be its second.
func (tc *testCluster) caughtUp(lead *clusterNode) {
	tc.t.Helper()
	committed := tc.status(lead).CommitIndex
	waitFor(tc.t, 60*time.Second, "every node to catch up with the leader", func() bool {
		for _, nd := range tc.nodes {
			if nd.srv != nil && !exited(nd.srv) && tc.status(nd).AppliedIndex < committed {
				return false
			}
		}
		return true
	})
}

// logStamp is the layout of the time that opens each of the server's log
// lines.
const logStamp = "2006-01-02T15:04:05.000"

// logsBetween is every node's log lines stamped from since to until, each
// line led by its node's id: what the nodes did while a put waited.
func (tc *testCluster) logsBetween(since, until time.Time) string {
	var b strings.Builder
	for _, nd := range tc.nodes {
		for _, line := range strings.Split(nd.srv.out.String(), "\n") {
			if len(line) < len(logStamp) {
				continue
			}
			at, err := time.Parse(logStamp, line[:len(logStamp)])
			if err == nil && !at.Before(since.UTC()) && !at.After(until.UTC()) {
				fmt.Fprintf(&b, "%s %s\n", nd.id, line)
			}
		}
	}
	return b.String()
}

// noneExitedOfItself fails the test when a node ended other than by the
// test's kill -9: a node that loses the lead follows again in the same
// process, so a node's own exit is a defect (its output is in the log).
func noneExitedOfItself(t *testing.T, tc *testCluster) {
	t.Helper()
	for _, nd := range tc.nodes {
		var ee *exec.ExitError
		if exited(nd.srv) && errors.As(nd.srv.waitErr, &ee) && ee.Exited() {
			t.Fatalf("%s exited with status %d of itself:\n%s", nd.id, ee.ExitCode(), nd.srv.out.String())
		}
	}
}
