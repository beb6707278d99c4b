// Package route serves the clients of a node of a cluster whose tubes are
// spread over many raft groups (docs/cluster.md, "Many groups"). A client's
// connection and its session (the tube it uses, the tubes it watches) live
// on the node it connected to; each command runs at the leader of the
// group of the tube or job it names, over a connection of the session to
// that leader's internal listener (a backend), which speaks the beanstalk
// protocol with three internal commands (beanpole-peek-watched,
// beanpole-cancel-wait, beanpole-unreserve). The leader's engine does the work, so every reply
// is the one a single server gives; the router only chooses where a
// command runs, answers what the session alone knows (use, watch, ignore,
// list-tube-used, list-tubes-watched), and merges what every group knows
// (stats, list-tubes).
//
// A session runs on a goroutine of its own while it has work; the session
// of a client that is idle, or whose reserve waits, holds none
// (park.go): one goroutine waits on an epoll set of their sockets.
//
// When a group's leader dies, stops or hands its lead over, a session's
// backend to it is replaced at its next leader unseen by the client, a
// reserve waiting there waits on at the next leader, and a read on its way
// there is sent again, as long as the session held no reservation in that
// group. Otherwise the client's
// connection is closed, as a single server's death closes it: the
// reservations the session held in that group are ready again at its next
// leader, and a command on its way may or may not have run.
package route

import (
	"crypto/tls"
	"errors"
	"hash/fnv"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/beanpole/beanpole/internal/fds"
	"github.com/beanpole/beanpole/internal/share"
)

// Config is what a router needs of its node.
type Config struct {
	// Groups is the number of data groups: groups 1 to Groups hold the
	// tubes.
	Groups int
	// Leader is where group g's leader serves its internal listener, ""
	// while the node knows of none.
	Leader func(g int) string
	// Dial opens a backend to an internal listener.
	Dial func(addr string) (net.Conn, error)
	// MaxJobSize is -z: a larger put body is read and dropped, then
	// answered JOB_TOO_BIG, as the groups' servers do.
	MaxJobSize uint32
	// LeaderWait bounds how long a command waits for its group to have a
	// leader (an election) before its client's connection is closed.
	LeaderWait time.Duration
	// Budget bounds what the router holds for its clients all together
	// (0: no bound): the input of sessions whose reserve waits, and
	// list replies over 64 KiB that their clients have not taken (the
	// input budget, as one server holds of its waiting connections).
	Budget int64
	// ReserveFDs is how many descriptors under the open-file limit the
	// router leaves to raft (cluster.ReserveFDs): a client, or a session's
	// connection to a group, that would take one of them is closed at
	// once. 0: none kept.
	ReserveFDs int
	Log        zerolog.Logger
}

// Router serves client connections (Serve, ServeTLS) until Stop.
type Router struct {
	cfg     Config
	mu      sync.Mutex
	lns     []net.Listener
	conns   map[net.Conn]struct{}
	stopped bool
	wg      sync.WaitGroup
	total   atomic.Uint64
	// leaders[g] is where group g's leader serves (cfg.Leader), looked up
	// every leaderRefresh by one goroutine: a command reads it without
	// the locks of the node's raft and state.
	leaders []atomic.Pointer[leaderAt]
	// open[g] are the sessions' backends of group g: when another node
	// leads it, those to the one before are closed (refreshLeaders).
	open []openBackends
	// park holds the sessions of idle clients (nil: none parks).
	park *parking
	done chan struct{}
	// waitCap bounds the input a session holds while a reserve waits, as
	// one server bounds a waiting connection's: max(4 MiB, 2 × (-z + 256)).
	waitCap int
	// handshakes are the TLS handshakes in progress, shared among client
	// addresses (share.Handshakes of them at most).
	handshakes share.Table
	// refused counts the clients and the connections to groups closed to
	// keep descriptors for raft; tlsFailed the TLS handshakes that failed
	// or timed out, tlsShed the TLS clients closed, or their handshakes
	// cut short, at the handshakes' bound; tlsOpen the TLS clients whose
	// handshake is done.
	refused, tlsFailed, tlsShed atomic.Uint64
	tlsOpen                     atomic.Int64
	// warned is when a line about refusing or shedding was last logged.
	warned atomic.Int64
	// held is what the sessions hold against Config.Budget.
	held atomic.Int64
}

// longReply is the size past which a list reply the router builds is
// held against its budget, as one server holds one against its ceiling.
const longReply = 64 << 10

// charge takes n bytes of the router's budget; false, taking none, if
// that would pass it.
func (r *Router) charge(n int64) bool {
	if r.held.Add(n) > r.cfg.Budget && r.cfg.Budget > 0 {
		r.held.Add(-n)
		return false
	}
	return true
}

// Held is how many bytes the sessions hold against the router's budget.
func (r *Router) Held() int64 { return r.held.Load() }

// leaderRefresh is how often the router looks up where each group's
// leader serves. A backend to a leader that lost its lead meanwhile gets
// no answer from it (its lease fence), so the delay costs no correctness.
const leaderRefresh = 50 * time.Millisecond

// New makes a router; Stop ends it.
func New(cfg Config) *Router {
	r := &Router{cfg: cfg, conns: map[net.Conn]struct{}{}, leaders: make([]atomic.Pointer[leaderAt], cfg.Groups+1),
		done: make(chan struct{}), waitCap: max(4<<20, 2*(int(cfg.MaxJobSize)+256))}
	r.open = make([]openBackends, cfg.Groups+1)
	if p, err := newParking(r); err == nil {
		r.park = p
	} else {
		cfg.Log.Warn().Err(err).Msg("route: idle clients keep a goroutine each")
	}
	r.refreshLeaders()
	go func() {
		t := time.NewTicker(leaderRefresh)
		defer t.Stop()
		for {
			select {
			case <-r.done:
				return
			case <-t.C:
				r.refreshLeaders()
			}
		}
	}()
	return r
}

func (r *Router) refreshLeaders() {
	for g := 1; g <= r.cfg.Groups; g++ {
		if a := r.cfg.Leader(g); a != r.leader(g) {
			r.leaders[g].Store(&leaderAt{addr: a})
			if a != "" {
				r.open[g].leave(a)
			}
		}
	}
}

// openBackends are the sessions' backends of one group.
type openBackends struct {
	mu sync.Mutex
	m  map[*backend]struct{}
}

func (o *openBackends) add(b *backend) {
	o.mu.Lock()
	if o.m == nil {
		o.m = map[*backend]struct{}{}
	}
	o.m[b] = struct{}{}
	o.mu.Unlock()
}

func (o *openBackends) remove(b *backend) {
	o.mu.Lock()
	delete(o.m, b)
	o.mu.Unlock()
}

// leave closes the backends to any node but the group's leader at addr.
// A command on its way to the one before, or a reserve waiting there,
// would never be answered if that node stopped or was cut off, and
// whatever it reserved is ready at the new leader: the session sees its
// backend fail, as if that node had closed it (docs/cluster.md,
// "Failover").
func (o *openBackends) leave(addr string) {
	o.mu.Lock()
	var stale []net.Conn
	for b := range o.m {
		if b.addr != addr {
			stale = append(stale, b.c)
		}
	}
	o.mu.Unlock()
	for _, c := range stale {
		// The socket itself, shut down rather than closed: its session
		// reads its end (a socket closed under a wait parked on it would
		// never wake it), then closes it. A TLS close would first send
		// an alert, which a stopped node may never take.
		if tc, ok := socket(c).(*net.TCPConn); ok {
			_ = tc.CloseRead()
			_ = tc.CloseWrite()
		} else {
			c.Close()
		}
	}
}

// leaderAt is where a group's leader serves, "" while none is known. Each
// change of it is a new leaderAt, so that a session tells a leader it
// left from a later one that serves at the same address (drop).
type leaderAt struct{ addr string }

// leader is where group g's leader serves, "" while none is known.
func (r *Router) leader(g int) string {
	if p := r.leaders[g].Load(); p != nil {
		return p.addr
	}
	return ""
}

// GroupOfTube is the data group a tube lives in: a stable hash of its
// name over the groups (1 to n).
func GroupOfTube(name []byte, n int) int {
	h := fnv.New32a()
	_, _ = h.Write(name)
	return 1 + int(h.Sum32()%uint32(n))
}

// GroupOfID is the data group that made job id: group g of n gives out
// the ids that are g modulo n (engine.SetIDSpace).
func GroupOfID(id uint64, n int) int {
	g := int(id % uint64(n))
	if g == 0 {
		g = n
	}
	return g
}

// Serve accepts plaintext clients on ln until Stop.
func (r *Router) Serve(ln net.Listener) error { return r.serve(ln, nil) }

// ServeTLS accepts TLS clients on ln until Stop; conf gives the
// configuration of each new connection, so reloaded files take effect.
func (r *Router) ServeTLS(ln net.Listener, conf func() *tls.Config) error { return r.serve(ln, conf) }

func (r *Router) serve(ln net.Listener, conf func() *tls.Config) error {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return nil
	}
	r.lns = append(r.lns, ln)
	r.mu.Unlock()
	for {
		c, err := ln.Accept()
		if err != nil {
			r.mu.Lock()
			stopped := r.stopped
			r.mu.Unlock()
			if stopped {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Out of descriptors and the like: the next accept may work.
			r.cfg.Log.Warn().Err(err).Msg("route: accept")
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if r.short(c) {
			continue
		}
		if conf != nil {
			r.startHandshake(c, conf())
			continue
		}
		if !r.track(c) {
			c.Close()
			return nil
		}
		r.wg.Add(1)
		go r.serveSession(newSession(r, c))
	}
}

// short reports whether c would take a descriptor kept for raft; if so it
// has closed c and counted it.
func (r *Router) short(c net.Conn) bool {
	if !fds.ConnShort(c, 1, r.cfg.ReserveFDs) {
		return false
	}
	// Counted before the close, so that a client that sees it closed
	// finds it counted.
	n := r.refused.Add(1)
	c.Close()
	r.warnEvery(func() {
		r.cfg.Log.Warn().Int("reserve", r.cfg.ReserveFDs).Uint64("refused", n).
			Msg("route: near the open-file limit: closing new clients, and connections to groups, to keep descriptors for raft")
	})
	return true
}

// startHandshake has a TLS client's handshake done on a goroutine of its
// own, then its session served there, if a handshake may start: at most
// share.Handshakes() are in progress, shared among client addresses
// (package share), each within share.HandshakeTimeout. Past the bound, c
// is closed, or the oldest handshake of an address holding more than its
// share is cut short for it.
func (r *Router) startHandshake(c net.Conn, conf *tls.Config) {
	_ = c.SetDeadline(time.Now().Add(share.HandshakeTimeout))
	cut := func() { _ = c.SetDeadline(time.Now()) }
	place, out := r.handshakes.Take(share.ClientOfAddr(c.RemoteAddr()), share.Handshakes(), cut)
	if out == share.Refused {
		c.Close()
		r.shed()
		return
	}
	if !r.track(c) {
		r.handshakes.Release(place)
		c.Close()
		return
	}
	r.wg.Add(1)
	go func() {
		tc := tls.Server(c, conf)
		err := tc.Handshake()
		held := r.handshakes.Release(place)
		switch {
		case err != nil && !held:
			r.shed() // cut short for another address's
		case err != nil:
			n := r.tlsFailed.Add(1)
			r.warnEvery(func() {
				r.cfg.Log.Warn().Err(err).Uint64("failures", n).Str("addr", c.RemoteAddr().String()).Msg("route: TLS handshake failed")
			})
		}
		if err != nil || !r.retrack(c, tc) {
			r.untrack(c)
			r.wg.Done()
			return
		}
		_ = c.SetDeadline(time.Time{})
		r.serveSession(newSession(r, tc))
	}()
}

// shed counts and logs a TLS client closed, or its handshake cut short,
// at the handshakes' bound.
func (r *Router) shed() {
	n := r.tlsShed.Add(1)
	r.warnEvery(func() {
		r.cfg.Log.Warn().Int("handshakes", share.Handshakes()).Uint64("shed", n).
			Msg("route: too many TLS handshakes in progress: closing new TLS clients at once, or the oldest handshakes of an address past its share")
	})
}

// warnEvery runs warn unless a line of the router's bounds was logged less
// than a second ago.
func (r *Router) warnEvery(warn func()) {
	now, last := time.Now().UnixNano(), r.warned.Load()
	if now-last >= int64(time.Second) && r.warned.CompareAndSwap(last, now) {
		warn()
	}
}

// serveSession runs s on the goroutine it is called on, until its client
// is gone or idle (parked); r.wg counted it.
func (r *Router) serveSession(s *session) {
	defer r.wg.Done()
	if !s.run() {
		s.end()
	}
}

func (r *Router) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return false
	}
	r.conns[c] = struct{}{}
	r.total.Add(1)
	return true
}

// retrack tracks a TLS client by its tls.Conn once its handshake is done,
// in place of its socket; false once the router stops.
func (r *Router) retrack(raw net.Conn, tc *tls.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return false
	}
	delete(r.conns, raw)
	r.conns[tc] = struct{}{}
	r.tlsOpen.Add(1)
	return true
}

func (r *Router) untrack(c net.Conn) {
	r.mu.Lock()
	if _, ok := r.conns[c]; ok {
		delete(r.conns, c)
		if _, isTLS := c.(*tls.Conn); isTLS {
			r.tlsOpen.Add(-1)
		}
	}
	r.mu.Unlock()
	c.Close()
}

// Connections is how many clients are connected now, and have been since
// the router started.
func (r *Router) Connections() (current, total uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return uint64(len(r.conns)), r.total.Load()
}

// Refused is how many clients, and connections to groups, were closed as
// soon as opened to keep descriptors for raft (Config.ReserveFDs).
func (r *Router) Refused() uint64 { return r.refused.Load() }

// TLSHandshakeFailures is how many TLS clients' handshakes failed or
// timed out; TLSHandshakesShed how many TLS clients were closed, or their
// handshakes cut short, at the handshakes' bound; TLSConnections how many
// TLS clients are connected, their handshake done.
func (r *Router) TLSHandshakeFailures() uint64 { return r.tlsFailed.Load() }
func (r *Router) TLSHandshakesShed() uint64    { return r.tlsShed.Load() }
func (r *Router) TLSConnections() int64        { return r.tlsOpen.Load() }

// Parked is how many clients' sessions are parked (idle) or have their
// reserve suspended: they hold no goroutine.
func (r *Router) Parked() int {
	if r.park == nil {
		return 0
	}
	return r.park.count()
}

// Stop closes the listeners and every client's connection, and waits for
// their sessions to end.
func (r *Router) Stop() {
	r.mu.Lock()
	if !r.stopped {
		close(r.done)
	}
	r.stopped = true
	for _, ln := range r.lns {
		ln.Close()
	}
	r.mu.Unlock()
	if r.park != nil {
		r.park.end()
	}
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
