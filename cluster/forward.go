package cluster

import (
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"

	"github.com/beanpole/beanpole/internal/fds"
	"golang.org/x/sys/unix"
)

// Forwarder serves a follower's client listeners: each connection is
// joined, byte for byte, to the client address of the node that leads, so a
// client configured with any node's address works unchanged. A TLS
// listener's connections go to the leader's TLS listener as they are: the
// client's TLS session is with the leader.
//
// Each forwarded client costs the follower two descriptors, and raft must
// never go without: a follower that wins an election has to dial its
// peers, and it has to accept their links to vote. So the forwarder keeps
// the last reserve descriptors under the open-file limit (ReserveFDs) for
// raft, as the single server keeps them for the binlog: a client whose
// connection, with the ones to the leader it and every client accepted
// before it still need, would take one of them is closed as soon as
// accepted, and one whose connection to the leader did take one is closed
// with it. Linux hands out the lowest free number, so connections on
// descriptors below limit - reserve leave every number from there up
// free. The limit is read at each connection (a limit
// changed with prlimit takes effect at once); the clients closed this way
// are counted (beanpole_forwarded_connections_refused_total, and
// forward_refused in GET /cluster) and logged at most every shedLogEvery.
//
// A forwarded connection lasts as long as the leader it reached: once this
// node no longer takes that node for the leader in that term (another
// leads, an election is under way, or it has not heard from the leader for
// a heartbeat timeout, after which its raft starts an election), the client
// and its connection to the old leader are closed, as the old leader's
// death would close them, and the client reconnects to the new one. So a
// leader whose host vanishes without a FIN leaves no client hanging. The
// connection to the leader also has TCP keepalive and TCP_USER_TIMEOUT
// (upstreamDialer), for a leader that still leads but whose client port no
// longer answers.
type Forwarder struct {
	node    *Node
	lns     []net.Listener // the plaintext listeners, then the TLS one if any
	reserve int
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	// links are the forwarded clients joined to a leader, by their
	// connection to it: the client's connection and the leader (and
	// term) it reached.
	links map[net.Conn]forwarded
	stop  chan struct{}
	// pending counts the clients accepted that have no connection to the
	// leader yet (waiting for one to be known, or dialing it): each will
	// take one more descriptor.
	pending atomic.Int64
	// warned is when the last line about closing clients was logged.
	warned atomic.Int64
}

// shedLogEvery is how often, at most, closing clients for the reserve is
// logged.
const shedLogEvery = 10 * time.Second

// ReserveFDs is how many descriptors under its open-file limit a cluster
// node keeps from its clients, forwarded (Forward) or served once it
// leads: what raft may need at once, doubled for the HTTP side, which
// sheds its connections at half the reserve. Raft needs its links with up
// to six other members (a group of seven), each at most four connections
// each way (hashicorp/raft's transport: heartbeats, appends, a vote or a
// snapshot, one pooled spare), 6 × 4 × 2 = 48, and 16 for its files as
// the binlog keeps (a new log segment and its directory to fsync, a
// snapshot written and one read, the metadata store, name lookups when
// dialing): 64, doubled to 128.
const ReserveFDs = 128

// leaderWait is how long a connection waits for a leader to be known
// (an election) before it is closed.
const leaderWait = 10 * time.Second

// The connection to the leader: keepalive probes after upstreamIdle of
// silence, every upstreamIdle, and TCP_USER_TIMEOUT closes it once data it
// sent stays unacknowledged for upstreamUnacked (or the probes go
// unanswered that long).
const (
	upstreamIdle    = 5 * time.Second
	upstreamUnacked = 15 * time.Second
)

// upstreamDialer dials the leader's client address.
var upstreamDialer = net.Dialer{
	Timeout:         5 * time.Second,
	KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: upstreamIdle, Interval: upstreamIdle, Count: 3},
	Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(upstreamUnacked/time.Millisecond))
		}); err != nil {
			return err
		}
		return serr
	},
}

// leaderTerm is a leader as a follower knows it: its id and the term it
// leads in.
type leaderTerm struct {
	id   raft.ServerID
	term uint64
}

// forwarded is a client: its connection and the leader its
// connection to the leader reached.
type forwarded struct {
	client net.Conn
	leader leaderTerm
}

// followed is the leader this node follows now, or false while it knows
// none it has heard from within a heartbeat timeout.
func (n *Node) followed() (leaderTerm, bool) {
	term := n.Raft.CurrentTerm()
	_, id := n.Raft.LeaderWithID()
	if id == "" || n.Raft.State() != raft.Follower || time.Since(n.Raft.LastContact()) >= n.cfg.HeartbeatTimeout ||
		n.Raft.CurrentTerm() != term {
		return leaderTerm{}, false
	}
	return leaderTerm{id, term}, true
}

// Forward starts forwarding the connections accepted on lns (plaintext)
// and tlsLn (TLS; nil: none), keeping reserve descriptors for raft
// (ReserveFDs; 0: none).
func (n *Node) Forward(lns []net.Listener, tlsLn net.Listener, reserve int) *Forwarder {
	f := &Forwarder{node: n, lns: slices.Clone(lns), reserve: reserve, conns: map[net.Conn]struct{}{},
		links: map[net.Conn]forwarded{}, stop: make(chan struct{})}
	if tlsLn != nil {
		f.lns = append(f.lns, tlsLn)
	}
	f.wg.Add(1)
	go f.watch()
	for _, ln := range lns {
		f.wg.Add(1)
		go f.accept(ln, false)
	}
	if tlsLn != nil {
		f.wg.Add(1)
		go f.accept(tlsLn, true)
	}
	return f
}

type deadliner interface{ SetDeadline(time.Time) error }

func (f *Forwarder) accept(ln net.Listener, tls bool) {
	defer f.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case <-f.stop:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like
			continue
		}
		// The client's connection, then the one to the leader it and
		// every client still waiting for theirs need.
		if p := f.pending.Add(1); f.short(c, 1+int(p)) {
			f.pending.Add(-1)
			continue
		}
		if !f.track(c) {
			f.pending.Add(-1)
			c.Close()
			return
		}
		go f.join(c, tls)
	}
}

// short reports whether c's descriptor, with need-1 more after it, would
// leave fewer than the reserve free under the open-file limit; if so it
// has closed c and counted a client shed.
func (f *Forwarder) short(c net.Conn, need int) bool {
	if !fds.ConnShort(c, need, f.reserve) {
		return false
	}
	// Counted before the close, so that a client that sees it closed
	// finds it counted.
	n := f.node.m.forwardRefused.Add(1)
	c.Close()
	now, last := time.Now().UnixNano(), f.warned.Load()
	if now-last >= int64(shedLogEvery) && f.warned.CompareAndSwap(last, now) {
		f.node.cfg.Log.Warn().Int("reserve", f.reserve).Uint64("refused", n).
			Msg("cluster: near the open-file limit: closing new clients to keep descriptors for raft")
	}
	return true
}

func (f *Forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conns == nil {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *Forwarder) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	delete(f.links, c)
	f.mu.Unlock()
	c.Close()
}

// watch closes the links to a leader this node no longer follows, every
// tenth of a heartbeat timeout.
func (f *Forwarder) watch() {
	defer f.wg.Done()
	tick := time.NewTicker(f.node.cfg.HeartbeatTimeout / 10)
	defer tick.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-tick.C:
		}
		now, ok := f.node.followed()
		var stale []net.Conn
		f.mu.Lock()
		for up, l := range f.links {
			if !ok || l.leader != now {
				stale = append(stale, up, l.client)
				delete(f.links, up)
			}
		}
		f.mu.Unlock()
		if len(stale) > 0 {
			f.node.cfg.Log.Info().Int("clients", len(stale)/2).Bool("leader-known", ok).
				Msg("cluster: closing the clients forwarded to a node that no longer leads, or has not been heard from for a heartbeat timeout")
		}
		for _, c := range stale {
			c.Close()
		}
	}
}

// dial connects to the leader's client address once one is known, or
// returns nil; it returns the leader it reached too. The client it dials
// for is no longer pending when it returns.
func (f *Forwarder) dial(tls bool) (net.Conn, leaderTerm) {
	defer f.pending.Add(-1)
	var addr string
	var leader leaderTerm
	for deadline := time.Now().Add(leaderWait); ; {
		var ok bool
		if leader, ok = f.node.followed(); ok {
			// The address read between two looks at the leader is
			// the one it announced.
			addr = f.node.LeaderClient(tls)
			if again, _ := f.node.followed(); addr != "" && again == leader {
				break
			}
		}
		if time.Now().After(deadline) {
			return nil, leader
		}
		select {
		case <-f.stop:
			return nil, leader
		case <-time.After(20 * time.Millisecond):
		}
	}
	up, err := upstreamDialer.Dial("tcp", addr)
	if err != nil || f.short(up, 1) {
		return nil, leader
	}
	return up, leader
}

// join connects c to the leader and copies both ways until either side
// closes; a half-close is passed on, so commands sent before it are
// answered as on the leader itself.
func (f *Forwarder) join(c net.Conn, tls bool) {
	defer f.untrack(c)
	up, leader := f.dial(tls)
	if up == nil {
		return
	}
	if !f.track(up) {
		up.Close()
		return
	}
	defer f.untrack(up)
	f.mu.Lock()
	f.links[up] = forwarded{client: c, leader: leader}
	f.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		copyConn(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			dst.Close()
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}

// copyBufs are the buffers copyConn reads into. A copy holds one only
// while bytes are on their way, so an idle forwarded client costs no
// buffer, and no descriptor beyond its two sockets: io.Copy between two
// TCP connections splices, holding a pipe (two more descriptors) in each
// direction for as long as the connection lasts.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyConn copies what src sends to dst until src's end or an error.
func copyConn(dst, src net.Conn) {
	sc, ok := src.(syscall.Conn)
	if !ok {
		_, _ = io.Copy(dst, src)
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	for {
		// rc.Read waits for src to be readable each time the callback
		// returns false, holding no buffer meanwhile.
		var b *[]byte
		var n int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			b = copyBufs.Get().(*[]byte)
			for {
				if n, rerr = unix.Read(int(fd), *b); rerr != unix.EINTR {
					break
				}
			}
			if rerr == unix.EAGAIN {
				copyBufs.Put(b)
				b = nil
				return false
			}
			return true
		})
		if b == nil { // src closed while waiting
			return
		}
		if err == nil && rerr == nil && n > 0 {
			_, err = dst.Write((*b)[:n])
		}
		copyBufs.Put(b)
		if err != nil || rerr != nil || n <= 0 {
			return
		}
	}
}

// Stop stops accepting and closes every forwarded connection, as a
// leader's death would: the listeners stay open for the server that
// takes them over.
func (f *Forwarder) Stop() {
	close(f.stop)
	for _, ln := range f.lns {
		if d, ok := ln.(deadliner); ok {
			_ = d.SetDeadline(time.Unix(1, 0))
		}
	}
	f.wg.Wait()
	for _, ln := range f.lns {
		if d, ok := ln.(deadliner); ok {
			_ = d.SetDeadline(time.Time{})
		}
	}
	f.mu.Lock()
	conns := f.conns
	f.conns = nil
	f.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}
