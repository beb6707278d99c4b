// Package loop is beanpole's network layer: gnet v2 event loops (one per
// core) that decode pipelined commands straight out of gnet's inbound
// buffer, hand them to the engine and batch the replies.
//
// beanpole accepts connections itself (accept.go: accept4 in batches on
// its own copy of the listener's descriptor, each new descriptor handed to
// a loop with the patched gnet's EnrollFD) instead of letting gnet accept,
// because an accept error such as EMFILE shuts a whole gnet engine down;
// owning it also serves unix sockets and systemd-inherited listeners the
// same way.
package loop

import (
	"context"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/beanpole/beanpole/codec"
	"github.com/beanpole/beanpole/engine"
	"github.com/beanpole/beanpole/internal/share"
	"github.com/panjf2000/gnet/v2"
	"github.com/rs/zerolog"
)

// Config is what the network layer needs to know.
type Config struct {
	Loops      int    // event loops; 0 = one per CPU
	MaxJobSize uint32 // -z
	Version    string // reported in stats
	Verbosity  int    // -V count
	Log        zerolog.Logger
	// Output flow control: past HighWater bytes of unsent replies (or
	// past the memory ceiling) a connection's further input waits.
	HighWater int
	// ReserveFDs: new connections are shed (accepted and closed at once)
	// while fewer than this many descriptors would be left under the
	// open-file limit, so the binlog (or raft) can always open its files.
	// 0: none.
	ReserveFDs int
}

// DefaultInputBudget is the input budget until SetInputBudget sets one.
const DefaultInputBudget = 256 << 20

// Bytes is the input consumed and the output written, all loops together.
func (s *Server) Bytes() (in, out uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ls := range s.loops {
		in += ls.bytesIn.Load()
		out += ls.bytesOut.Load()
	}
	return in, out
}

// Refused is how many connections were closed as soon as accepted, for
// lack of descriptors (accept.go, reserve.go), or because their event loop
// could not register them (OnEnrollFailed).
func (s *Server) Refused() uint64 { return s.refused.Load() }

// LoopConnections appends the number of open connections of each event
// loop, in the order the loops served their first connection (a loop that
// has served none counts 0), to dst.
func (s *Server) LoopConnections(dst []int64) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(dst)
	for range s.cfg.Loops {
		dst = append(dst, 0)
	}
	for _, ls := range s.loops {
		dst[n+ls.idx] = ls.conns.Load()
	}
	return dst
}

// SetInputBudget bounds the input held, all connections together, by
// connections that wait (see checkInputCap). Call it before Serve.
func (s *Server) SetInputBudget(n int64) {
	s.inBudget = max(n/int64(s.cfg.Loops), int64(s.inCap))
}

// Server runs the event loops; each Serve accepts from one listener.
type Server struct {
	cfg   Config
	eng   *engine.Engine
	cli   *gnet.Client
	log   zerolog.Logger
	info  serverInfo
	inCap int // input a parked or throttled connection may buffer
	// inBudget is each loop's share of the input budget (SetInputBudget).
	inBudget int64

	mu          sync.Mutex
	loops       map[gnet.EventLoop]*loopState
	listeners   []net.Listener
	acceptFiles []*os.File // each Serve's own descriptor (accept.go)
	// refused counts connections accepted only to be closed at once: out
	// of descriptors, keeping the last ones for the binlog, or not
	// registered by their loop.
	refused atomic.Uint64
	// enrollWarned is when a failed registration was last logged (unix
	// nanoseconds): at most one line a second.
	enrollWarned atomic.Int64
	// tlsFailures counts failed TLS handshakes; tlsWarned is when one was
	// last logged (unix nanoseconds).
	tlsFailures atomic.Uint64
	tlsWarned   atomic.Int64
	stopping    atomic.Bool
	acceptWG    sync.WaitGroup

	// handshakes are the TLS handshakes in progress; tlsShed counts the
	// TLS connections closed unstarted, or cut short, because
	// share.Handshakes() were, shedWarned is when that was last logged (see
	// ServeTLS).
	handshakes share.Table
	tlsShed    atomic.Uint64
	shedWarned atomic.Int64
	// tlsOpen is how many TLS connections the loops serve.
	tlsOpen atomic.Int64
	// idsOut: a put found every job id handed out (logged once).
	idsOut atomic.Bool

	throttled throttleSet

	// Binlog, when set, fills the binlog-* fields of `stats`.
	Binlog BinlogStats
	// Fence, when set (a cluster's leader), is asked before each pass
	// over a connection whether this server may still answer: a leader
	// whose lead a majority has not confirmed lately may already have
	// been replaced, and another leader may have handed out the same
	// jobs. A pass it refuses closes the connection unanswered, unless
	// FenceMayReturn says the lead may yet be confirmed (leaseRetry).
	Fence func() bool
	// FenceMayReturn, when set, is asked when Fence refuses a pass at its
	// start: true (raft still has this node lead its term) leaves the
	// connection's input unread and tries the pass again shortly, so that
	// a leader starved past its lease on a loaded machine answers once a
	// new round confirms it, instead of closing every connection that
	// spoke meanwhile. Nothing is answered until Fence agrees.
	FenceMayReturn func() bool
}

// loopState is owned by one event loop goroutine.
type loopState struct {
	s     *Server
	idx   int // the loop's number, in the order loops served a first connection
	shard int // engine counter shard (1-based)
	out   output
	tubes [][]byte // scratch for list-tubes
	iov   [][]byte // scratch for writing held replies
	// chunks is scratch for writeChunks.
	chunks [][]byte
	yaml   []byte
	// The TLS connections' buffers (tlsconn.go), allocated at the loop's
	// first: decrypted input a pass borrows (tlsIn), plaintext staged
	// into records (tlsStage), the records for gnet (tlsOut).
	tlsIn, tlsStage, tlsOut []byte
	tlsBufs                 [][]byte
	// tlsConns are the loop's TLS connections, for Stop's close_notify.
	tlsConns map[*tlsConn]struct{}
	// heldIn is the input buffered by this loop's waiting connections
	// (the sum of heldBy), kept within Server.inBudget.
	heldIn int64
	heldBy map[*conn]int
	// now is the engine's clock as read by this pass (passClock); 0: not
	// read yet.
	now         int64
	inputWarned time.Time // the last warning about the budget
	// yielded: the connection whose pass just ran stopped at its time
	// slice with commands still buffered (pass); conn has no room left
	// for the flag, and a loop runs one pass at a time.
	yielded bool
	// dec is the input decoder of the connection whose pass runs, when
	// it has none of its own (conn.decoder).
	dec codec.Decoder
	// cmd counts commands for `stats`; atomics only so `stats` on another
	// loop may read them: this cache line is written by this loop alone.
	cmd [codec.NumOps]atomic.Uint64
	// bytesIn and bytesOut count the input consumed and the output handed
	// to gnet, for /metrics; like cmd, written by this loop alone.
	bytesIn, bytesOut atomic.Uint64
	// conns is the number of open connections, for /metrics.
	conns atomic.Int64
	_     [64]byte
}

// New builds a server around an engine.
func New(cfg Config, eng *engine.Engine) (*Server, error) {
	if cfg.Loops <= 0 {
		cfg.Loops = runtime.GOMAXPROCS(0)
	}
	if cfg.HighWater == 0 {
		cfg.HighWater = 1 << 20
	}
	s := &Server{cfg: cfg, eng: eng, log: cfg.Log, loops: make(map[gnet.EventLoop]*loopState)}
	s.inCap = max(4<<20, 2*(int(cfg.MaxJobSize)+256))
	s.SetInputBudget(DefaultInputBudget)
	s.info = newServerInfo(cfg.Version)
	s.throttled.init()
	cli, err := gnet.NewClient(&handler{s: s},
		gnet.WithNumEventLoop(cfg.Loops),
		gnet.WithLoadBalancing(gnet.LeastConnections),
		gnet.WithReadBufferCap(256<<10),
		// Accepted sockets inherit TCP_NODELAY from the listener
		// (listenerFile): EnrollFD need not set it on each.
		gnet.WithTCPNoDelay(gnet.TCPDelay),
		// EOF does not close: what the peer sent before it is answered
		// first (our patched gnet, see third_party/PATCHES.md).
		gnet.WithHalfClose(true),
		gnet.WithLogger(gnetLogger{cfg.Log.With().Str("component", "gnet").Logger()}),
	)
	if err != nil {
		return nil, err
	}
	s.cli = cli
	return s, nil
}

// Start starts the event loops; Serve then feeds them connections.
func (s *Server) Start() error {
	if err := s.cli.Start(); err != nil {
		return err
	}
	go s.throttled.sweep(&s.stopping)
	return nil
}

// passClock is the engine's clock, read at most once per pass: the puts of
// one read arrived together, and a clock read costs a tenth of what the
// engine spends on a put.
func (ls *loopState) passClock() int64 {
	if ls.now == 0 {
		ls.now = ls.s.eng.Now()
	}
	return ls.now
}

// loopFor returns the state of an event loop, creating it on first use.
func (s *Server) loopFor(el gnet.EventLoop) *loopState {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls := s.loops[el]
	if ls == nil {
		ls = &loopState{s: s, idx: len(s.loops), shard: len(s.loops)%s.eng.Shards() + 1, heldBy: make(map[*conn]int),
			tlsConns: make(map[*tlsConn]struct{})}
		ls.out.buf = make([]byte, 0, 64<<10)
		s.loops[el] = ls
	}
	return ls
}

// Stop stops accepting (every Serve returns), then stops the event loops
// (pending replies get a best-effort flush); each wait is bounded
// (waitAtMost).
func (s *Server) Stop(ctx context.Context) { s.stop(ctx, true) }

// StopKeepingListeners stops as Stop does, but leaves open the listeners
// Serve and ServeTLS were given (it closes only its own duplicates of
// them): a cluster node that loses the lead hands them back to its
// forwarder.
func (s *Server) StopKeepingListeners(ctx context.Context) { s.stop(ctx, false) }

func (s *Server) stop(ctx context.Context, closeListeners bool) {
	if s.stopping.Swap(true) {
		return
	}
	s.mu.Lock()
	for _, ln := range s.listeners {
		if closeListeners {
			_ = ln.Close()
		}
	}
	for _, f := range s.acceptFiles {
		_ = f.Close() // wakes its Serve
	}
	s.mu.Unlock()
	waitAtMost(ctx, s.acceptWG.Wait)
	s.closeTLS(ctx)
	waitAtMost(ctx, func() { _ = s.cli.Stop() })
}

// waitAtMost runs f on a goroutine of its own and waits until it returns,
// ctx is done or 5 s have passed, whichever comes first: a stop must not
// hang on a loop that does not answer.
func waitAtMost(ctx context.Context, f func()) {
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
	}
}
