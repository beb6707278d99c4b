package e2e

// Partitions between cluster nodes. Every directed raft link i→j passes
// through a proxy of its own: node i's --bootstrap names peer j by the
// proxy's address (raft dials the addresses of its own configuration, and
// the configuration bootstrapped on each node is never changed in these
// tests), while j binds its real --raft address. Blocking a proxy closes
// its connections and refuses new ones, so the link is cut in that
// direction: the RPCs i sends j fail (the replies to RPCs j sends i travel
// on j's own connections, through the proxy j→i). Stalling leaves the
// connections open and passes nothing on either way until it ends, as a
// network that loses every packet for a while does: no FIN, no RST,
// nothing (what was sent meanwhile arrives afterwards, as TCP's
// retransmissions bring it, unless a side gave up first). Holding passes i's
// RPCs to j but keeps j's answers until they are released, as a paused
// i leaves them unread.

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

type linkProxy struct {
	ln      net.Listener
	target  string
	delay   atomic.Int64                  // ns each chunk waits before it is passed on
	stall   atomic.Pointer[chan struct{}] // everything waits until it is closed
	hold    atomic.Pointer[chan struct{}] // answers wait until it is closed
	mu      sync.Mutex
	blocked bool
	conns   map[net.Conn]bool
}

func newLinkProxy(t *testing.T, target string) *linkProxy {
	t.Helper()
	ln, err := listenFresh()
	if err != nil {
		t.Fatal(err)
	}
	p := &linkProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); p.setBlocked(true) })
	go p.serve()
	return p
}

func (p *linkProxy) addr() string { return p.ln.Addr().String() }

func (p *linkProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.join(c)
	}
}

func (p *linkProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blocked {
		return false
	}
	p.conns[c] = true
	return true
}

func (p *linkProxy) join(c net.Conn) {
	if !p.track(c) {
		c.Close()
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(up) {
		c.Close()
		if up != nil {
			up.Close()
		}
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.copy(up, c, false); done <- struct{}{} }()
	go func() { p.copy(c, up, true); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// copy passes src on to dst, each chunk after the link's delay; answers
// (the direction back to the dialling node) wait while they are held.
func (p *linkProxy) copy(dst, src net.Conn, answers bool) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := p.delay.Load(); d > 0 {
				time.Sleep(time.Duration(d))
			}
			if h := p.stall.Load(); h != nil {
				<-*h
			}
			if h := p.hold.Load(); answers && h != nil {
				<-*h
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// setBlocked cuts the link (closing what passes through it) or heals it.
func (p *linkProxy) setBlocked(b bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocked = b
	if b {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

// partitions is the proxies of a cluster: links[i][j] carries i→j.
type partitions struct {
	links [][]*linkProxy
}

// startPartitionableCluster is startTestCluster with a proxy on every
// directed raft link.
func startPartitionableCluster(t *testing.T, n int, extra ...string) (*testCluster, *partitions) {
	t.Helper()
	tc := newTestCluster(t, n)
	tc.args = extra
	pt := &partitions{links: make([][]*linkProxy, n)}
	for i := range n {
		pt.links[i] = make([]*linkProxy, n)
		var members []string
		for j, nd := range tc.nodes {
			if i == j {
				members = append(members, nd.id+"="+nd.raft)
				continue
			}
			pt.links[i][j] = newLinkProxy(t, nd.raft)
			members = append(members, nd.id+"="+pt.links[i][j].addr())
		}
		tc.nodes[i].bootstrap = strings.Join(members, ",")
	}
	for _, nd := range tc.nodes {
		tc.start(nd)
	}
	return tc, pt
}

// isolate cuts node i off from every other node, both ways.
func (pt *partitions) isolate(i int) {
	for j := range pt.links {
		if i != j {
			pt.links[i][j].setBlocked(true)
			pt.links[j][i].setBlocked(true)
		}
	}
}

// cut blocks the one direction i→j.
func (pt *partitions) cut(i, j int) { pt.links[i][j].setBlocked(true) }

// slow delays every chunk on the links to and from node i by d.
func (pt *partitions) slow(i int, d time.Duration) {
	for j := range pt.links {
		if i != j {
			pt.links[i][j].delay.Store(int64(d))
			pt.links[j][i].delay.Store(int64(d))
		}
	}
}

// stall makes node i's links, both ways, pass nothing on while they stay
// open, as a host whose network vanished without a word, until heal.
func (pt *partitions) stall(i int) {
	gate := make(chan struct{})
	for j := range pt.links {
		if i != j {
			pt.links[i][j].stall.Store(&gate)
			pt.links[j][i].stall.Store(&gate)
		}
	}
}

// holdAnswers keeps the answers to the RPCs node i sends until release is
// called.
func (pt *partitions) holdAnswers(i int) (release func()) {
	gate := make(chan struct{})
	for j := range pt.links {
		if i != j {
			pt.links[i][j].hold.Store(&gate)
		}
	}
	return func() {
		for j := range pt.links {
			if i != j {
				pt.links[i][j].hold.Store(nil)
			}
		}
		close(gate)
	}
}

// heal restores every link and takes every delay away.
func (pt *partitions) heal() {
	for i := range pt.links {
		for j := range pt.links[i] {
			if i != j {
				pt.links[i][j].setBlocked(false)
				pt.links[i][j].delay.Store(0)
				if g := pt.links[i][j].stall.Swap(nil); g != nil {
					select {
					case <-*g:
					default:
						close(*g)
					}
				}
			}
		}
	}
}

func (tc *testCluster) index(nd *clusterNode) int {
	for i, x := range tc.nodes {
		if x == nd {
			return i
		}
	}
	panic(fmt.Sprintf("%s is not a node of the cluster", nd.id))
}

func TestClusterIsolatedLeaderStopsAnsweringAndAMajorityGoesOn(t *testing.T) {
	t.Parallel()
	tc, pt := startPartitionableCluster(t, 3)
	lead := tc.leader()
	c := lead.srv.dial(t)
	put(t, c, 0, 0, 60, "x", 1)

	// Cut off from both followers, the leader cannot confirm its lead, and
	// the majority elects another. From then on the old one must not hand
	// out the job the new one may hand out: it closes its clients
	// unanswered.
	pt.isolate(tc.index(lead))
	next := tc.leader(lead)
	mustSend(t, c, "reserve-with-timeout 0\r\n")
	expectClosed(t, c)
	// The majority's leader hands out the job. On a loaded machine the
	// first one elected may lose the lead again before it answers (it
	// closes the connection unanswered): ask whoever leads then.
	waitFor(t, 60*time.Second, "the majority's leader to hand out the job", func() bool {
		next = tc.leader(lead)
		switch out := try(next.srv.addr, "reserve-with-timeout 0\r\n", defaultTimeout); out {
		case "RESERVED 1 1\r\nx\r\n":
			return true
		case "":
			return false
		default:
			t.Fatalf("reserve through %s, leading: %q; want the job", next.id, out)
			return false
		}
	})

	// Healed, the old leader learns of the new term and follows again,
	// in the same process.
	pt.heal()
	waitFor(t, 60*1e9, "the old leader to follow again", func() bool {
		st := tc.status(lead)
		return st.State == "follower" && st.Leader == next.id
	})
}

// A leader paused (SIGSTOP) while the answers to its last RPCs wait for it
// reads them first when it resumes: they are from before the pause, and
// must not renew its lease while another node leads and has handed its
// job to another worker. Each round: a job put, the leader's answers held
// and the leader stopped, the job reserved through the new leader, then a
// reserve already waiting on the old leader's connection, the answers
// released and the old leader resumed: that reserve must not be answered
// with the job.
func TestClusterPausedLeaderNeverHandsOutAJobTheNewLeaderHandedOut(t *testing.T) {
	t.Parallel()
	tc, pt := startPartitionableCluster(t, 3)
	for round := range 3 {
		lead := tc.agreedLeader()
		body := fmt.Sprintf("round %d", round)
		id, _ := putUntilInserted(t, lead.srv.addr, body, 30*time.Second)
		w1 := lead.srv.dial(t)
		release := pt.holdAnswers(tc.index(lead))
		lead.srv.signal(t, syscall.SIGSTOP)
		next := tc.leader(lead)
		w2 := next.srv.dial(t)
		mustSend(t, w2, fmt.Sprintf("reserve-job %d\r\n", id))
		expect(t, w2, fmt.Sprintf("RESERVED %d %d\r\n%s\r\n", id, len(body), body))
		mustSend(t, w1, fmt.Sprintf("reserve-job %d\r\n", id))
		release()
		lead.srv.signal(t, syscall.SIGCONT)
		// Closed unanswered by the old leader, or, if its loop never took
		// the connection over before it stopped serving, forwarded to the
		// new one, which answers NOT_FOUND: never RESERVED.
		if line, err := w1.lineBy(time.Now().Add(defaultTimeout)); err == nil && strings.HasPrefix(line, "RESERVED") {
			t.Fatalf("round %d: the resumed old leader %s answered %q for job %d, which %s had handed out", round, lead.id, line, id, next.id)
		}
		waitFor(t, 30*time.Second, lead.id+" to follow", func() bool { return !leads(lead.srv.out.String()) })
		mustSend(t, w2, fmt.Sprintf("delete %d\r\n", id))
		expect(t, w2, "DELETED\r\n")
		w2.nc.Close()
	}
}
