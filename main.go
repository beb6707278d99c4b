// Command beanpole is a drop-in replacement for the beanstalkd work-queue
// server: same wire protocol, same flags, same stats.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/beanpole/beanpole/admin"
	"github.com/beanpole/beanpole/cluster"
	"github.com/beanpole/beanpole/codec"
	"github.com/beanpole/beanpole/config"
	"github.com/beanpole/beanpole/engine"
	"github.com/beanpole/beanpole/internal/memtune"
	"github.com/beanpole/beanpole/loop"
	"github.com/beanpole/beanpole/persist"
	"github.com/beanpole/beanpole/record"
	"github.com/rs/zerolog"
	"github.com/rs/zerolog/diode"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "import" {
		return runImport(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "cluster" {
		return runCluster(args[1:], stdout, stderr)
	}
	cfg, code, done := config.Parse(args, stdout, stderr)
	if done {
		return code
	}

	// Log lines go through a diode so that a slow stderr never blocks an
	// event loop.
	dw := diode.NewWriter(stderr, 4096, 10*time.Millisecond, func(missed int) {
		fmt.Fprintf(stderr, "beanpole: dropped %d log messages\n", missed)
	})
	defer dw.Close()
	log := newLogger(dw, cfg.Verbosity, cfg.LogJSON)

	if _, hard, err := config.RaiseFileLimit(); err != nil {
		log.Warn().Err(err).Msg("could not raise the open-file limit")
	} else {
		log.Debug().Uint64("nofile", hard).Msg("open-file limit raised")
	}

	var lns []net.Listener
	var err error
	if !cfg.TLSOnly {
		if lns, _, err = config.Listen(&cfg, log); err != nil {
			fmt.Fprintf(stderr, "beanpole: listen: %v\n", err)
			return 111
		}
	}
	if cfg.ClusterDir != "" {
		if _, err := clientListener(lns); err != nil {
			for _, ln := range lns {
				ln.Close()
			}
			fmt.Fprintf(stderr, "beanpole: %v\n", err)
			return config.ExitUsage
		}
	}
	for _, ln := range lns {
		log.Info().Str("addr", listenerName(ln)).Int("pid", os.Getpid()).Msg("listening")
	}
	// The TLS files are read before dropping privileges (a key is often
	// readable by root alone); SIGHUP reads them again as the -u user.
	// The protocol's TLS listener and HTTPS on --http share them.
	var tlsFiles *loop.TLSFiles
	if cfg.TLSListen != "" || cfg.HTTPS() || cfg.ClusterDir != "" && cfg.TLSCert != "" {
		if tlsFiles, err = loop.LoadTLS(cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA); err != nil {
			fmt.Fprintf(stderr, "beanpole: %v\n", err)
			return 1
		}
	}
	// The links between cluster nodes take files of their own
	// (--cluster-*), or else the clients' with their CA.
	linkFiles := tlsFiles
	if cfg.ClusterCA != "" {
		if linkFiles, err = loop.LoadLinkTLS(cfg.ClusterCert, cfg.ClusterKey, cfg.ClusterCA); err != nil {
			fmt.Fprintf(stderr, "beanpole: %v\n", err)
			return 1
		}
	} else if !cfg.LinkTLS() {
		linkFiles = nil
	}
	var tlsLn net.Listener
	if cfg.TLSListen != "" {
		if tlsLn, err = net.Listen("tcp", cfg.TLSListen); err != nil {
			fmt.Fprintf(stderr, "beanpole: listen: --tls-listen %s: %v\n", cfg.TLSListen, err)
			return 111
		}
		log.Info().Str("addr", tlsLn.Addr().String()).Int("pid", os.Getpid()).Bool("client-certificates", cfg.TLSClientCA != "").
			Msg("listening: TLS")
	}

	// The HTTP side (--http) comes up before the binlog is replayed, so
	// that /readyz can say the server is not ready yet.
	var adm *admin.Server
	if cfg.HTTPAddr != "" {
		var token []byte
		if cfg.HTTPTokenFile != "" {
			if token, err = readToken(cfg.HTTPTokenFile); err != nil {
				fmt.Fprintf(stderr, "beanpole: --http-token-file: %v\n", err)
				return 1
			}
		}
		var httpTLS *tls.Config
		if cfg.HTTPS() {
			httpTLS = tlsFiles.HTTPConfig()
		}
		adm, err = admin.Listen(admin.Options{Addr: cfg.HTTPAddr, Pprof: cfg.HTTPPprof, Token: token,
			Hosts: cfg.HTTPHosts, PublicBodies: cfg.HTTPPublicBodies, TLS: httpTLS,
			MaxTubes: cfg.MetricsMaxTubes, TotalNames: cfg.MetricsTotalNames, MaxConns: cfg.HTTPMaxConns, ReserveFDs: reserveFDs(&cfg),
			Log: log.With().Str("component", "http").Logger()})
		if err != nil {
			fmt.Fprintf(stderr, "beanpole: --http %s: %v\n", cfg.HTTPAddr, err)
			return 111
		}
		go adm.Serve()
		defer adm.Close()
		log.Info().Str("addr", adm.URL()).Bool("actions", token != nil).
			Msg("listening: the dashboard, /metrics, /healthz and /readyz")
	}

	if cfg.User != "" {
		if err := config.DropPrivileges(cfg.User); err != nil {
			fmt.Fprintf(stderr, "beanpole: %v\n", err)
			return config.ExitCodeFor(err)
		}
	}
	hup := &reloader{log: log}
	if tlsFiles != nil {
		hup.files = append(hup.files, tlsFiles)
	}
	if linkFiles != nil && linkFiles != tlsFiles {
		hup.files = append(hup.files, linkFiles)
	}
	if len(hup.files) > 0 {
		hup.start()
	} else if cfg.ClusterDir != "" {
		signal.Ignore(syscall.SIGHUP)
	}

	// BEANPOLE_GC_HEADROOM_MB overrides the collector's headroom floor
	// (internal/memtune); 0 leaves GOGC alone.
	headroom := uint64(64)
	if v, err := strconv.ParseUint(os.Getenv("BEANPOLE_GC_HEADROOM_MB"), 10, 32); err == nil {
		headroom = v
	}
	if headroom > 0 {
		memtune.KeepHeapHeadroom(headroom << 20)
	}
	// BEANPOLE_CPUPROFILE=FILE profiles the whole run (written at a
	// graceful stop): how performance work on beanpole is measured.
	if path := os.Getenv("BEANPOLE_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil && pprof.StartCPUProfile(f) == nil {
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	p := &process{cfg: &cfg, lns: lns, tlsLn: tlsLn, tlsFiles: tlsFiles, linkFiles: linkFiles, adm: adm,
		loops: runtime.GOMAXPROCS(0), sigs: make(chan os.Signal, 4), log: log, stderr: stderr}
	signal.Ignore(syscall.SIGPIPE)
	if cfg.ClusterDir != "" {
		return p.runNode(hup)
	}
	return p.runSingle()
}

// process is what run sets up once, and what each spell of serving uses:
// the single server's one, or each term a cluster node leads.
type process struct {
	cfg                 *config.Config
	lns                 []net.Listener
	tlsLn               net.Listener
	tlsFiles, linkFiles *loop.TLSFiles
	adm                 *admin.Server
	loops               int
	// sigs receive SIGUSR1 (drain), SIGTERM and SIGINT (stop) once the
	// process asks for them: the single server from before its replay,
	// a cluster node from its start (follow ignores a drain).
	sigs    chan os.Signal
	log     zerolog.Logger
	stderr  io.Writer
	eng     atomic.Pointer[engine.Engine] // the engine serving, for the memory releaser
	memOnce sync.Once
}

// newEngine is an empty engine; BEANPOLE_WALL_CLOCK_OFFSET (a Go
// duration) runs its wall clock that far off the host's: fault tests give
// one cluster node a clock that disagrees with the others' with it.
func (p *process) newEngine() (*engine.Engine, int) {
	eng := engine.New(p.loops)
	if v := os.Getenv("BEANPOLE_WALL_CLOCK_OFFSET"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintf(p.stderr, "beanpole: BEANPOLE_WALL_CLOCK_OFFSET: %v\n", err)
			return nil, config.ExitUsage
		}
		eng.SetWallOffset(d)
	}
	return eng, 0
}

// runSingle is the server without a cluster: the binlog (-b) replayed into
// the engine, then served until a stop. It takes SIGUSR1 from before its
// replay, so that a drain asked for once the replay's log line is out is
// never lost (it applies when the server serves); a stop during the
// replay still ends it at once.
func (p *process) runSingle() int {
	eng, code := p.newEngine()
	if code != 0 {
		return code
	}
	signal.Notify(p.sigs, syscall.SIGUSR1)
	// The binlog is opened after dropping privileges, as upstream does, so
	// its files belong to the -u user.
	blog, code := openBinlog(p.cfg, eng, p.log, p.stderr)
	if code != 0 {
		return code
	}
	if blog != nil {
		defer blog.Close()
	}
	code, _ = p.serve(eng, blog, nil)
	return code
}

// serve runs the engine on the listeners until a stop (SIGTERM, SIGINT:
// graceful, code 0), a failed listener, or, on a cluster node, the loss of
// the lead (lost): then the clients' connections are closed, as a
// beanstalkd death closes them, and the listeners are left open for the
// node to forward again.
func (p *process) serve(eng *engine.Engine, blog *persist.Log, node *cluster.Node) (code int, lost bool) {
	cfg, log := p.cfg, p.log
	var deposed <-chan struct{}
	if node != nil {
		deposed = node.LostLeadership()
	}
	srv, err := loop.New(loop.Config{
		Loops:      p.loops,
		MaxJobSize: cfg.MaxJobSize,
		Version:    config.Version,
		Verbosity:  cfg.Verbosity,
		Log:        log,
		ReserveFDs: reserveFDs(cfg),
	}, eng)
	if err != nil {
		fmt.Fprintf(p.stderr, "beanpole: %v\n", err)
		return 1, false
	}
	srv.Binlog = func(st *codec.ServerStats) {
		st.BinlogMaxSize = uint64(cfg.BinlogSize)
		if blog == nil {
			return
		}
		ls := blog.Stats()
		st.BinlogOldestIndex, st.BinlogCurrentIndex = ls.OldestIndex, ls.CurrentIndex
		st.BinlogRecordsWritten, st.BinlogRecordsMigrated = ls.RecordsWritten, ls.RecordsMigrated
		st.BinlogFailed = ls.Failed != nil
	}
	if node != nil {
		srv.Fence = node.Leads
	}
	if err := srv.Start(); err != nil {
		fmt.Fprintf(p.stderr, "beanpole: %v\n", err)
		return 1, false
	}
	// Measured once the loops run, since an address-space limit counts
	// what they have mapped; set before the first client connects.
	p.limitMemory(eng, srv)

	signal.Notify(p.sigs, syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGINT)
	served := make(chan error, len(p.lns)+1)
	for _, ln := range p.lns {
		go func() { served <- srv.Serve(ln) }()
	}
	if p.tlsLn != nil {
		go func() { served <- srv.ServeTLS(p.tlsLn, p.tlsFiles.Config()) }()
	}
	adm := p.adm
	adm.SetSource(statsSource{srv: srv, eng: eng, blog: blog, tls: p.tlsLn != nil}, eng)
	adm.SetState(admin.Ready)
	if err := config.SdNotify("READY=1"); err != nil {
		log.Warn().Err(err).Msg("could not tell systemd the server is ready")
	}

	for {
		select {
		case sig := <-p.sigs:
			if sig == syscall.SIGUSR1 {
				// Drain mode, as upstream: puts are refused from now on.
				eng.SetDraining()
				adm.SetState(admin.Draining)
				log.Info().Msg("drain mode (SIGUSR1): puts are refused from now on")
				continue
			}
			// Graceful stop (a beanpole improvement over upstream's
			// immediate death): stop accepting, flush, exit 0.
			adm.SetState(admin.Stopping)
			_ = config.SdNotify("STOPPING=1")
			if cfg.HTTPAddr != "" && cfg.StopGrace > 0 {
				// /readyz says stopping while clients are still
				// served, so that a load balancer polling it stops
				// sending new ones first; a second signal cuts it short.
				log.Info().Str("signal", sig.String()).Str("stop-grace", cfg.StopGrace.String()).Msg("stopping: no new connections after the grace, the binlog is flushed")
				graceOver(p.sigs, cfg.StopGrace)
			} else {
				log.Info().Str("signal", sig.String()).Msg("stopping: no new connections, the binlog is flushed")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			srv.Stop(ctx)
			cancel()
			leaveCluster(node, log)
			if blog != nil {
				// Write and fsync what is queued before exiting.
				if err := blog.Close(); err != nil {
					log.Error().Err(err).Msg("closing the binlog")
					return 1, false
				}
			}
			return 0, false
		case <-deposed:
			log.Warn().Msg("cluster: this node lost the lead; its clients' connections are closed and it follows again")
			adm.SetState(admin.Following)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			srv.StopKeepingListeners(ctx)
			cancel()
			adm.ClearSource()
			return 0, true
		case err := <-served:
			if err != nil {
				log.Error().Err(err).Msg("listener failed")
				return 1, false
			}
			return 0, false
		}
	}
}

// reloader reads the TLS files again at every SIGHUP, from the binlog's
// replay or a cluster node's start on: new handshakes, on --tls-listen, on
// HTTPS and on the links between nodes, get the files read then; open
// client connections keep theirs, and open links whose peer no longer
// verifies are closed. A bad file keeps the ones loaded before.
type reloader struct {
	files []*loop.TLSFiles
	node  atomic.Pointer[cluster.Node]
	log   zerolog.Logger
}

func (r *reloader) start() {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			r.reload()
		}
	}()
}

func (r *reloader) reload() {
	for _, f := range r.files {
		if err := f.Reload(); err != nil {
			r.log.Error().Err(err).Msg("SIGHUP: the TLS files were not reloaded; the ones loaded before stay in use")
		} else {
			r.log.Info().Msg("SIGHUP: " + f.What + " were reloaded")
		}
	}
	if n := r.node.Load(); n != nil {
		if cut := n.ReverifyLinks(); cut > 0 {
			r.log.Warn().Int("links", cut).Msg("SIGHUP: closed the links to nodes whose certificate no longer verifies")
		}
	}
}

// graceOver waits d, or until a SIGTERM or SIGINT comes first (SIGUSR1,
// drain mode, changes nothing once stopping).
func graceOver(sigs <-chan os.Signal, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return
		case sig := <-sigs:
			if sig != syscall.SIGUSR1 {
				return
			}
		}
	}
}

// limitMemory sets the ceiling on job memory (--max-job-memory, by default
// derived from the memory budget: config.DefaultJobMemory), the budget for
// the input that waiting connections hold (an eighth of the memory budget,
// at least 64 MiB; BEANPOLE_INPUT_BUDGET_MB overrides it), the Go
// runtime's soft memory limit (unless GOMEMLIMIT set one) and the release
// of freed memory after a drain (internal/memtune; BEANPOLE_RELEASE_MEMORY=0
// turns it off).
func (p *process) limitMemory(eng *engine.Engine, srv *loop.Server) {
	cfg, log := p.cfg, p.log
	budget := config.DetectMemoryBudget()
	input := max(budget.Bytes/8, 64<<20)
	if v, err := strconv.ParseInt(os.Getenv("BEANPOLE_INPUT_BUDGET_MB"), 10, 32); err == nil && v > 0 {
		input = v << 20
	}
	srv.SetInputBudget(input)
	ceiling := cfg.MaxJobMemory
	if ceiling < 0 {
		ceiling = config.DefaultJobMemory(budget.Bytes)
	}
	eng.SetJobMemoryLimit(ceiling)
	// Published once set up: the releaser of an earlier serve (a node
	// that leads again) reads the engine it finds here.
	p.eng.Store(eng)
	if os.Getenv("GOMEMLIMIT") == "" && budget.Bytes > 0 {
		debug.SetMemoryLimit(config.SoftMemoryLimit(budget.Bytes))
	}
	used, _ := eng.JobMemory()
	log.Debug().Int64("budget", budget.Bytes).Str("from", budget.Source).Int64("job-memory-limit", ceiling).Int64("input-budget", input).
		Int64("soft-limit", debug.SetMemoryLimit(-1)).Msg("memory")
	if ceiling > 0 && used > ceiling {
		log.Warn().Int64("job-memory-bytes", used).Int64("job-memory-limit", ceiling).
			Msg("the recovered jobs are past the job-memory ceiling: puts get OUT_OF_MEMORY until enough are deleted")
	}
	if os.Getenv("BEANPOLE_RELEASE_MEMORY") != "0" {
		p.memOnce.Do(func() {
			memtune.GiveMemoryBack(func() int64 { u, _ := p.eng.Load().JobMemory(); return u }, log)
		})
	}
}

// reserveFDs is how many descriptors the server keeps free for the binlog
// by shedding new connections near the open-file limit: a new segment,
// its spare, the directory opened to fsync it, a file being compacted.
// A cluster node keeps cluster.ReserveFDs for raft, following (the
// forwarder) as leading. Without -b nothing needs them.
func reserveFDs(cfg *config.Config) int {
	switch {
	case cfg.ClusterDir != "":
		return cluster.ReserveFDs
	case cfg.BinlogDir == "":
		return 0
	}
	return 16
}

// openBinlog opens and replays the -b directory into the engine and makes
// the engine log through it. It returns a non-zero exit code on failure.
func openBinlog(cfg *config.Config, eng *engine.Engine, log zerolog.Logger, stderr io.Writer) (*persist.Log, int) {
	if cfg.BinlogDir == "" {
		return nil, 0
	}
	// Compaction may call back before the journal is installed: hold it
	// until then.
	installed := make(chan struct{})
	opts := persist.Options{
		Dir:         cfg.BinlogDir,
		WantSync:    cfg.WantSync,
		SyncEvery:   cfg.SyncEvery,
		SegmentSize: cfg.BinlogSize,
		Rewrite: func(ids []uint64) {
			<-installed
			eng.Rewrite(ids)
		},
	}
	start := time.Now()
	blog, rec, err := persist.Open(opts, log.With().Str("component", "binlog").Logger())
	if err != nil {
		// Upstream exits 10 ("failed to lock wal dir") whenever it cannot
		// lock the directory, 1 when it cannot replay what it holds.
		return nil, binlogFailure(stderr, "beanpole", cfg.BinlogDir, err, config.ExitLocked)
	}
	for _, p := range rec.Problems {
		log.Error().Str("problem", p.String()).Msg("binlog damage found during recovery; the server starts with what could be read")
	}
	eng.Restore(rec.Jobs, rec.MaxID)
	eng.SetJournal(blog)
	close(installed)
	if imp := rec.Imported; imp != nil && !imp.Interrupted {
		log.Info().Int("jobs", imp.Jobs).Int("files", imp.Files).Str("moved-to", imp.ArchiveDir()).
			Msg("imported upstream beanstalkd's binlog")
	}
	log.Info().Int("jobs", len(rec.Jobs)).Int("records", rec.Records).Int("segments", rec.Segments).
		Uint64("max-id", rec.MaxID).Int("problems", len(rec.Problems)).Str("took", time.Since(start).Round(time.Millisecond/10).String()).
		Msg("binlog replayed")
	warnFewIDs(log, rec.MaxID)
	return blog, 0
}

// warnFewIDs warns when few job ids are left after maxID, the highest
// used (record.IDsLeft).
func warnFewIDs(log zerolog.Logger, maxID uint64) {
	if left, few := record.IDsLeft(maxID); few {
		log.Warn().Uint64("max-id", maxID).Uint64("ids-left", left).Msg(record.FewIDsLeft(left))
	}
}

// logTimeFormat is the time of every log line, console and JSON alike, of
// the server and of beanpole import: RFC 3339 with milliseconds.
const logTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// newLogger is the log of the server and of beanpole import. At the
// default verbosity it says what an operator needs once each (where the
// server listens, the binlog replayed or imported, drain, stop) and every
// warning and error; -V adds the details (open-file limit, memory budget,
// each connection), -VV gnet's own lines. --log-json writes one JSON
// object a line, for log shippers.
func newLogger(w io.Writer, verbosity int, json bool) zerolog.Logger {
	level := zerolog.InfoLevel
	switch {
	case verbosity >= 2:
		level = zerolog.TraceLevel
	case verbosity == 1:
		level = zerolog.DebugLevel
	}
	zerolog.TimeFieldFormat = logTimeFormat
	if !json {
		w = zerolog.ConsoleWriter{Out: w, NoColor: true, TimeFormat: logTimeFormat}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

// listenerName is how the log names a listening socket: host:port, or
// unix:PATH.
func listenerName(ln net.Listener) string {
	if a := ln.Addr(); a.Network() == "unix" {
		return "unix:" + a.String()
	}
	return ln.Addr().String()
}

// binlogFailure reports why dir could not be used as a binlog directory,
// with what to do about it, and returns the exit code: ExitLocked when a
// server holds it, ExitReadOnly or ExitPermission when it cannot be
// written, 1 for a format this version cannot read or a binlog that
// cannot be read once the directory is locked, otherwise fallback.
func binlogFailure(stderr io.Writer, prog, dir string, err error, fallback int) int {
	fmt.Fprintf(stderr, "%s: -b %s: %v\n", prog, dir, err)
	// The switch from beanstalkd is the usual way into a directory of
	// another user's or on a read-only file system.
	switch code := config.ExitCodeForDir(err); {
	case errors.Is(err, persist.ErrLocked):
		fmt.Fprintf(stderr, "%s: another server (beanstalkd or beanpole) holds %s: stop it first\n", prog, filepath.Join(dir, "lock"))
		return config.ExitLocked
	case errors.Is(err, persist.ErrFormat):
		return 1
	case code == config.ExitReadOnly:
		fmt.Fprintf(stderr, "%s: %s is read-only here (under systemd's ProtectSystem=strict only the unit's StateDirectory, /var/lib/beanpole, is writable); if it is beanstalkd's, `beanpole import --from %s -b /var/lib/beanpole`, run as root, imports its binlog without changing it\n",
			prog, dir, dir)
		return code
	case code == config.ExitPermission:
		fmt.Fprintf(stderr, "%s: permission denied: uid %d may not write %s or read its files; if it is beanstalkd's, `beanpole import --from %s -b /var/lib/beanpole`, run as root, imports its binlog for beanpole's user without changing it\n",
			prog, os.Geteuid(), dir, dir)
		return code
	case errors.Is(err, persist.ErrUnusable):
		return 1
	}
	return fallback
}
