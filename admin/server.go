// Package admin serves what operators need besides the protocol, over
// HTTP or HTTPS on its own listener (--http) and its own goroutines, never
// on the event loops: Prometheus metrics (/metrics), liveness (/healthz),
// readiness (/readyz), a dashboard (/, see dashboard.go) and, when asked
// for, the Go profiler (/debug/pprof/).
//
// The metrics are read the way a `stats` or `stats-tube` command reads
// them (the engine's sharded counters and each tube under its own lock),
// once per rendering, which concurrent scrapers share (scrape.go): nothing
// is added to the command path. Connections, their time and their
// descriptors are bounded (conns.go and the timeouts below).
package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"log"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/beanpole/beanpole/engine"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// State is what /readyz reports.
type State int32

const (
	Starting  State = iota // replaying the binlog: not serving yet
	Ready                  // serving
	Draining               // SIGUSR1: puts are refused
	Stopping               // SIGTERM/SIGINT: closing
	Following              // a cluster node that does not lead: clients are forwarded
)

var stateText = [...]string{
	Starting:  "starting: replaying the binlog\n",
	Ready:     "ready\n",
	Draining:  "draining: puts are refused (SIGUSR1)\n",
	Stopping:  "stopping\n",
	Following: "following: clients are forwarded to the leader\n",
}

// Options configure a Server.
type Options struct {
	Addr     string // HOST:PORT to listen on
	Pprof    bool   // serve /debug/pprof/
	MaxTubes int    // tubes with series of their own in /metrics
	// TotalNames names the counters of stats and stats-tube with a
	// _total suffix (--metrics-total-names), as Prometheus wants them,
	// instead of as the beanstalkd exporters do.
	TotalNames bool
	// MaxConns is how many HTTP connections may be open at once; more
	// are closed as soon as accepted (conns.go). 0: no limit.
	MaxConns int
	// ReserveFDs is the protocol side's descriptor reserve; HTTP
	// connections leave half of it free (conns.go).
	ReserveFDs int
	// Token allows the dashboard's actions to whoever presents it; with
	// none the dashboard is read-only.
	Token []byte
	// Hosts are the names, besides the listener's address and localhost,
	// that requests may give as their Host (--http-host).
	Hosts []string
	// PublicBodies shows job bodies on the pages without the token
	// (--http-public-bodies).
	PublicBodies bool
	// TLS, when set, makes the listener serve HTTPS with it.
	TLS *tls.Config
	Log zerolog.Logger
}

// Server is the HTTP side of a beanpole process.
type Server struct {
	ln    *limitListener
	tls   *tls.Config // nil: plain HTTP
	http  *http.Server
	state atomic.Int32
	src   atomic.Pointer[sources]
	// metricsOnly is what /metrics reads while src is unset
	// (SetMetricsSource).
	metricsOnly atomic.Pointer[Source]
	log         zerolog.Logger
	// cluster, when set, is the cluster node this process is (SetCluster).
	cluster atomic.Pointer[Cluster]
	// groups, when set, is the node's view of its raft groups (SetGroups).
	groups atomic.Pointer[func() any]
	reg    *prometheus.Registry
	coll   *collector
	// hist is the overview's last hour (history.go), sampled from
	// SetSource until Close or Shutdown closes stop.
	hist     *ring
	stop     chan struct{}
	stopOnce sync.Once
	// srcStop ends the sampling of the source SetSource gave last.
	srcMu   sync.Mutex
	srcStop chan struct{}
}

// Listen binds opts.Addr; Serve then serves it. The state starts as
// Starting and /metrics answers 503 until SetSource.
func Listen(opts Options) (*Server, error) {
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, err
	}
	maxConns := opts.MaxConns
	if maxConns <= 0 {
		maxConns = math.MaxInt
	}
	s := &Server{ln: &limitListener{Listener: ln, max: maxConns, reserve: opts.ReserveFDs / 2, log: opts.Log},
		tls: opts.TLS, log: opts.Log, hist: newRing(historyLen), stop: make(chan struct{})}
	s.reg = prometheus.NewRegistry()
	c := &collector{src: s.metricsSource, maxTubes: opts.MaxTubes, http: s.ln, totalNames: opts.TotalNames}
	s.coll = c
	s.reg.MustRegister(c)
	metrics := &scraper{reg: s.reg, tubes: c, log: opts.Log}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		st := State(s.state.Load())
		if st != Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = w.Write([]byte(stateText[st]))
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		// A cluster node that follows serves no client, but its raft
		// figures are what tell an operator it is behind.
		if s.metricsSource() == nil && s.cluster.Load() == nil {
			http.Error(w, stateText[Starting], http.StatusServiceUnavailable)
			return
		}
		metrics.ServeHTTP(w, r)
	})
	newDashboard(s, opts).routes(mux)
	if opts.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	s.http = &http.Server{Handler: probeOnly(newHostGuard(opts.Hosts, mux)),
		ConnState: s.ln.connState, ConnContext: connContext,
		ReadHeaderTimeout: readTimeout, ReadTimeout: readTimeout, WriteTimeout: writeTimeout,
		IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes,
		ErrorLog: log.New(&errorLog{log: opts.Log}, "", 0)}
	if opts.TLS != nil {
		// HTTP/1.1 only (the configuration offers no h2): one request
		// in progress per connection, as over plain HTTP.
		s.http.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	}
	return s, nil
}

// errorLog takes net/http's own messages, a failed TLS handshake above
// all, into the log: at most a line a second, counting those left out.
type errorLog struct {
	log   zerolog.Logger
	last  atomic.Int64 // unix nanoseconds of the last line
	quiet atomic.Int64
}

func (e *errorLog) Write(p []byte) (int, error) {
	now := time.Now().UnixNano()
	prev := e.last.Load()
	if now-prev < int64(time.Second) || !e.last.CompareAndSwap(prev, now) {
		e.quiet.Add(1)
		return len(p), nil
	}
	e.log.Warn().Int64("suppressed", e.quiet.Swap(0)).Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}

// Timeouts: no client holds a connection, a goroutine or a scrape's buffer
// for long without making progress.
const (
	// readTimeout bounds reading a request, headers and body (the
	// dashboard's forms are small): a body sent a byte a second is cut.
	readTimeout = 10 * time.Second
	// writeTimeout bounds writing a response, counted from the end of
	// the request's headers: room for a scrape of tens of megabytes to a
	// client that reads it, and for /debug/pprof/profile's default 30s.
	writeTimeout = 60 * time.Second
	// idleTimeout closes a keep-alive connection with no new request.
	idleTimeout = 60 * time.Second
	// maxHeaderBytes: no request of this server needs more.
	maxHeaderBytes = 64 << 10
)

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// URL is the base URL the server answers on: http://HOST:PORT or
// https://HOST:PORT.
func (s *Server) URL() string {
	if s.tls != nil {
		return "https://" + s.Addr().String()
	}
	return "http://" + s.Addr().String()
}

// Serve serves until Close. Over HTTPS the handshake runs on the
// connection's own goroutine, within readTimeout.
func (s *Server) Serve() {
	var ln net.Listener = s.ln
	if s.tls != nil {
		ln = tls.NewListener(s.ln, s.tls)
	}
	if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Error().Err(err).Msg("http listener failed")
	}
}

// Close stops serving at once. Close, SetSource and SetState do nothing
// on a nil *Server (no --http).
func (s *Server) Close() {
	if s != nil {
		s.stopSampling()
		_ = s.http.Close()
	}
}

// Shutdown stops accepting and waits, until ctx ends, for the requests
// under way to be answered (a cluster action that deposed this node among
// them).
func (s *Server) Shutdown(ctx context.Context) {
	if s != nil {
		s.stopSampling()
		_ = s.http.Shutdown(ctx)
	}
}

// SetSource gives /metrics and the dashboard what they read, and the
// dashboard the engine its actions change, and starts sampling the
// overview's history; call it when the server serves. A cluster node
// that loses the lead takes its source back with ClearSource, and sets a
// new one when it leads again.
func (s *Server) SetSource(src Source, eng *engine.Engine) {
	if s == nil {
		return
	}
	s.srcMu.Lock()
	defer s.srcMu.Unlock()
	s.clearSource()
	mine := make(chan struct{})
	s.srcStop = mine
	s.src.Store(&sources{stats: src, eng: eng, op: eng.NewOperator()})
	stop := make(chan struct{})
	go func() {
		select {
		case <-s.stop:
		case <-mine:
		}
		close(stop)
	}()
	go sampleEvery(s.hist, historyPeriod, src, stop)
}

// SetMetricsSource gives /metrics alone what it reads while SetSource's
// source is unset: on a node of many groups, the sum of the engines of
// the data groups it leads, which no one engine's dashboard shows. When
// src is also a prometheus.Collector, /metrics includes its series.
func (s *Server) SetMetricsSource(src Source) {
	if s == nil {
		return
	}
	s.metricsOnly.Store(&src)
	if col, ok := src.(prometheus.Collector); ok {
		_ = s.reg.Register(col)
	}
}

// metricsSource is what /metrics reads: SetSource's source, else
// SetMetricsSource's; nil before either.
func (s *Server) metricsSource() Source {
	if p := s.src.Load(); p != nil {
		return p.stats
	}
	if p := s.metricsOnly.Load(); p != nil {
		return *p
	}
	return nil
}

// ClearSource stops reading the source SetSource gave: /metrics and the
// dashboard answer 503 until the next SetSource.
func (s *Server) ClearSource() {
	if s != nil {
		s.srcMu.Lock()
		s.clearSource()
		s.srcMu.Unlock()
	}
}

func (s *Server) clearSource() {
	if s.srcStop != nil {
		close(s.srcStop)
		s.srcStop = nil
	}
	s.src.Store(nil)
}

func (s *Server) stopSampling() { s.stopOnce.Do(func() { close(s.stop) }) }

// SetState sets what /readyz reports.
func (s *Server) SetState(st State) {
	if s != nil {
		s.state.Store(int32(st))
	}
}
