// Package server assembles a beanpole server and owns its lifecycle, for
// a single node and a cluster node alike: New binds the listeners, reads
// the TLS files, starts the HTTP side and takes on -u's user; Run replays
// the binlog (-b) or opens the node (--cluster-dir) and serves until a
// stop; Drain, Stop and Reload do what SIGUSR1, SIGTERM or SIGINT, and
// SIGHUP ask for (package main maps the signals to them).
package server

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/beanpole/beanpole/admin"
	"github.com/beanpole/beanpole/config"
	"github.com/beanpole/beanpole/engine"
	"github.com/beanpole/beanpole/internal/memtune"
	"github.com/beanpole/beanpole/loop"
	"github.com/rs/zerolog"
)

// Call names one of the calls a signal maps to.
type Call int

const (
	// CallDrain is Drain (SIGUSR1).
	CallDrain Call = iota
	// CallStop is Stop (SIGTERM, SIGINT).
	CallStop
	// CallReload is Reload (SIGHUP).
	CallReload
)

// Options are what the process gives a server beside its configuration.
type Options struct {
	// Log is the server's log (NewLogger).
	Log zerolog.Logger
	// Stderr gets what went wrong when New or Run fails, before they
	// return the process's exit status.
	Stderr io.Writer
	// Takes, if set, is told when the server starts taking a call: from
	// then on its signal is to be mapped to it, and until then the signal
	// keeps its default action. A single server takes Drain from before
	// its binlog's replay and Stop once it serves (a stop during the
	// replay ends the process at once); a cluster node takes both once it
	// is open; Reload is taken by New when there are TLS files to read
	// again, or the server is a cluster node (a SIGHUP must not end it).
	// Takes may be told of a call more than once.
	Takes func(Call)
}

// Server is one process's server: the single server, or a node of a
// cluster that serves while it leads and forwards its clients while it
// follows.
type Server struct {
	cfg                 *config.Config
	log                 zerolog.Logger
	stderr              io.Writer
	takes               func(Call)
	lns                 []net.Listener
	tlsLn               net.Listener
	tlsFiles, linkFiles *loop.TLSFiles
	adm                 *admin.Server
	hup                 *reloader
	loops               int
	// calls receive Drain and Stop; what serves at the time acts on them
	// (follow remembers a drain).
	calls   chan call
	eng     atomic.Pointer[engine.Engine] // the engine serving, for the memory releaser
	memOnce sync.Once

	// draining: Drain came; every engine the server serves after drains.
	draining atomic.Bool
	// groupEngines are the engines of the data groups this node leads now
	// (--groups), for drain mode.
	groupEngines sync.Map
	// groupStats is what /metrics reads on a node of many groups.
	groupStats *groupStats
}

// call is a Drain, or a Stop (stop) asked for by why (the log names it as
// the signal).
type call struct {
	stop bool
	why  string
}

// New sets up what cfg's server serves with. The listeners are bound and
// the TLS files read (a key is often readable by root alone) before -u's
// user is taken on. On failure what went wrong is on o.Stderr, and New
// returns nil and the process's exit status.
func New(cfg *config.Config, o Options) (*Server, int) {
	s := &Server{cfg: cfg, log: o.Log, stderr: o.Stderr, takes: o.Takes,
		loops: runtime.GOMAXPROCS(0), calls: make(chan call, 4), hup: &reloader{log: o.Log}}
	if s.takes == nil {
		s.takes = func(Call) {}
	}
	if _, hard, err := config.RaiseFileLimit(); err != nil {
		s.log.Warn().Err(err).Msg("could not raise the open-file limit")
	} else {
		s.log.Debug().Uint64("nofile", hard).Msg("open-file limit raised")
	}
	for _, step := range []func() int{s.listen, s.loadTLS, s.listenHTTP, s.dropPrivileges} {
		if code := step(); code != 0 {
			s.closeBound()
			return nil, code
		}
	}
	// SIGHUP reads the TLS files again as the -u user.
	if s.tlsFiles != nil {
		s.hup.files = append(s.hup.files, s.tlsFiles)
	}
	if s.linkFiles != nil && s.linkFiles != s.tlsFiles {
		s.hup.files = append(s.hup.files, s.linkFiles)
	}
	if len(s.hup.files) > 0 || cfg.ClusterDir != "" {
		s.takes(CallReload)
	}
	headroomOnce.Do(func() {
		keepHeadroom()
		sampleHeap(cfg.HTTPPprof, os.Getenv("GODEBUG"))
	})
	return s, 0
}

// headroomOnce: the collector's tuning and the heap profile's sampling are
// the process's, set by its first server.
var headroomOnce sync.Once

// sampleHeap turns the runtime's heap profile off unless /debug/pprof/ can
// serve it (pprof, --http-pprof) or GODEBUG sets its rate (godebug). Its
// sampling records a stack every 512 KiB allocated: with 64 KiB job bodies
// every eighth put, about 2% of the server's CPU.
func sampleHeap(pprof bool, godebug string) {
	if !pprof && !strings.Contains(godebug, "memprofilerate=") {
		runtime.MemProfileRate = 0
	}
}

// keepHeadroom keeps the collector's headroom (internal/memtune);
// BEANPOLE_GC_HEADROOM_MB overrides its floor, and 0 leaves GOGC alone.
func keepHeadroom() {
	headroom := uint64(64)
	if v, err := strconv.ParseUint(os.Getenv("BEANPOLE_GC_HEADROOM_MB"), 10, 32); err == nil {
		headroom = v
	}
	if headroom > 0 {
		memtune.KeepHeapHeadroom(headroom << 20)
	}
}

// Run serves until a stop, and returns the process's exit status: 0 after
// a graceful stop; otherwise what went wrong is on Options.Stderr or in
// the log.
func (s *Server) Run() int {
	defer s.adm.Close()
	// BEANPOLE_CPUPROFILE=FILE profiles the whole run (written at a
	// graceful stop): how performance work on beanpole is measured.
	if path := os.Getenv("BEANPOLE_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil && pprof.StartCPUProfile(f) == nil {
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	if s.cfg.ClusterDir != "" {
		return s.runNode()
	}
	return s.runSingle()
}

// Drain enters drain mode, as SIGUSR1 does: puts are refused from then
// on. A cluster node that follows remembers it, and drains each time it
// leads.
func (s *Server) Drain() { s.calls <- call{} }

// Stop stops the server gracefully, as SIGTERM and SIGINT do: no new
// connections, the binlog flushed, the lead handed over; Run then returns
// 0. why names what asked for it in the log (main passes the signal).
func (s *Server) Stop(why string) { s.calls <- call{stop: true, why: why} }

// Reload reads the TLS files again, as SIGHUP does (reloader).
func (s *Server) Reload() { s.hup.reload() }

// dropPrivileges takes on -u's user, once everything that needs root is
// bound and read.
func (s *Server) dropPrivileges() int {
	if s.cfg.User == "" {
		return 0
	}
	if err := config.DropPrivileges(s.cfg.User); err != nil {
		fmt.Fprintf(s.stderr, "beanpole: %v\n", err)
		return config.ExitCodeFor(err)
	}
	return 0
}

// closeBound closes what New bound before it failed, so that a process
// that starts a server in it and goes on (a test) keeps no listener.
func (s *Server) closeBound() {
	for _, ln := range s.lns {
		ln.Close()
	}
	if s.tlsLn != nil {
		s.tlsLn.Close()
	}
	if s.adm != nil {
		s.adm.Close()
	}
}

// listen binds the protocol's plaintext listeners (none with --tls-only).
// A cluster node needs a TCP one among them (clientListener). What it
// bound before it fails, New closes (closeBound).
func (s *Server) listen() int {
	cfg := s.cfg
	if !cfg.TLSOnly {
		var err error
		if s.lns, _, err = config.Listen(cfg, s.log); err != nil {
			fmt.Fprintf(s.stderr, "beanpole: listen: %v\n", err)
			return config.ExitListen
		}
	}
	if cfg.ClusterDir != "" {
		if _, err := clientListener(s.lns); err != nil {
			fmt.Fprintf(s.stderr, "beanpole: %v\n", err)
			return config.ExitUsage
		}
	}
	for _, ln := range s.lns {
		s.log.Info().Str("addr", listenerName(ln)).Int("pid", os.Getpid()).Msg("listening")
	}
	return 0
}

// loadTLS reads the TLS files and binds --tls-listen. The protocol's TLS
// listener and HTTPS on --http share the files; the links between cluster
// nodes take files of their own (--cluster-*), or else the clients' with
// their CA.
func (s *Server) loadTLS() int {
	cfg := s.cfg
	var err error
	if cfg.TLSListen != "" || cfg.HTTPS() || cfg.ClusterDir != "" && cfg.TLSCert != "" {
		if s.tlsFiles, err = loop.LoadTLS(cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA); err != nil {
			fmt.Fprintf(s.stderr, "beanpole: %v\n", err)
			return 1
		}
	}
	s.linkFiles = s.tlsFiles
	if cfg.ClusterCA != "" {
		if s.linkFiles, err = loop.LoadLinkTLS(cfg.ClusterCert, cfg.ClusterKey, cfg.ClusterCA); err != nil {
			fmt.Fprintf(s.stderr, "beanpole: %v\n", err)
			return 1
		}
	} else if !cfg.LinkTLS() {
		s.linkFiles = nil
	}
	if cfg.TLSListen != "" {
		if s.tlsLn, err = net.Listen("tcp", cfg.TLSListen); err != nil {
			fmt.Fprintf(s.stderr, "beanpole: listen: --tls-listen %s: %v\n", cfg.TLSListen, err)
			return config.ExitListen
		}
		s.log.Info().Str("addr", s.tlsLn.Addr().String()).Int("pid", os.Getpid()).Bool("client-certificates", cfg.TLSClientCA != "").
			Msg("listening: TLS")
	}
	return 0
}

// listenHTTP starts the HTTP side (--http) before the binlog is replayed,
// so that /readyz can say the server is not ready yet.
func (s *Server) listenHTTP() int {
	cfg := s.cfg
	if cfg.HTTPAddr == "" {
		return 0
	}
	var token []byte
	var err error
	if cfg.HTTPTokenFile != "" {
		if token, err = config.ReadToken(cfg.HTTPTokenFile); err != nil {
			fmt.Fprintf(s.stderr, "beanpole: --http-token-file: %v\n", err)
			return 1
		}
	}
	var httpTLS *tls.Config
	if cfg.HTTPS() {
		httpTLS = s.tlsFiles.HTTPConfig()
	}
	s.adm, err = admin.Listen(admin.Options{Addr: cfg.HTTPAddr, Pprof: cfg.HTTPPprof, Token: token,
		Hosts: cfg.HTTPHosts, PublicBodies: cfg.HTTPPublicBodies, TLS: httpTLS,
		MaxTubes: cfg.MetricsMaxTubes, TotalNames: cfg.MetricsTotalNames, MaxConns: cfg.HTTPMaxConns, ReserveFDs: reserveFDs(cfg),
		Log: s.log.With().Str("component", "http").Logger()})
	if err != nil {
		fmt.Fprintf(s.stderr, "beanpole: --http %s: %v\n", cfg.HTTPAddr, err)
		return config.ExitListen
	}
	go s.adm.Serve()
	s.log.Info().Str("addr", s.adm.URL()).Bool("actions", token != nil).
		Msg("listening: the dashboard, /metrics, /healthz and /readyz")
	return 0
}
