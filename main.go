// Command beanpole is a drop-in replacement for the beanstalkd work-queue
// server: same wire protocol, same flags, same stats.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"

	"github.com/beanpole/beanpole/admin"
	"github.com/beanpole/beanpole/codec"
	"github.com/beanpole/beanpole/config"
	"github.com/beanpole/beanpole/engine"
	"github.com/beanpole/beanpole/loop"
	"github.com/beanpole/beanpole/persist"
	"github.com/rs/zerolog"
	"github.com/rs/zerolog/diode"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "import" {
		return runImport(args[1:], stdout, stderr)
	}
	cfg, code, done := config.Parse(args, stdout, stderr)
	if done {
		return code
	}

	// Log lines go through a diode so that a slow stderr never blocks an
	// event loop; -V raises the level like upstream's verbosity.
	dw := diode.NewWriter(stderr, 4096, 10*time.Millisecond, func(missed int) {
		fmt.Fprintf(stderr, "beanpole: dropped %d log messages\n", missed)
	})
	defer dw.Close()
	level := zerolog.WarnLevel
	switch {
	case cfg.Verbosity >= 2:
		level = zerolog.DebugLevel
	case cfg.Verbosity == 1:
		level = zerolog.InfoLevel
	}
	// --log-json: one JSON object a line, for log shippers.
	var out io.Writer = zerolog.ConsoleWriter{Out: dw, NoColor: true, TimeFormat: time.RFC3339}
	if cfg.LogJSON {
		out = dw
	}
	log := zerolog.New(out).Level(level).With().Timestamp().Logger()

	if _, hard, err := config.RaiseFileLimit(); err != nil {
		log.Warn().Err(err).Msg("could not raise the open-file limit")
	} else {
		log.Info().Uint64("nofile", hard).Msg("open-file limit raised")
	}

	lns, desc, err := config.Listen(&cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "beanpole: listen: %v\n", err)
		return 111
	}
	log.Info().Int("pid", os.Getpid()).Str("addr", desc).Msg("listening")

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
		adm, err = admin.Listen(admin.Options{Addr: cfg.HTTPAddr, Pprof: cfg.HTTPPprof, Token: token,
			MaxTubes: cfg.MetricsMaxTubes, MaxConns: cfg.HTTPMaxConns, ReserveFDs: reserveFDs(&cfg),
			Log: log.With().Str("component", "http").Logger()})
		if err != nil {
			fmt.Fprintf(stderr, "beanpole: --http %s: %v\n", cfg.HTTPAddr, err)
			return 111
		}
		go adm.Serve()
		defer adm.Close()
		log.Info().Str("addr", adm.Addr().String()).Bool("actions", token != nil).
			Msg("serving the dashboard, /metrics, /healthz and /readyz")
	}

	if cfg.User != "" {
		if err := config.DropPrivileges(cfg.User); err != nil {
			fmt.Fprintf(stderr, "beanpole: %v\n", err)
			return config.ExitCodeFor(err)
		}
	}

	// BEANPOLE_GC_HEADROOM_MB overrides the collector's headroom floor
	// (gcheadroom.go); 0 leaves GOGC alone.
	headroom := uint64(64)
	if v, err := strconv.ParseUint(os.Getenv("BEANPOLE_GC_HEADROOM_MB"), 10, 32); err == nil {
		headroom = v
	}
	if headroom > 0 {
		keepHeapHeadroom(headroom << 20)
	}
	loops := runtime.GOMAXPROCS(0)
	eng := engine.New(loops)
	// The binlog is opened after dropping privileges, as upstream does, so
	// its files belong to the -u user.
	blog, code := openBinlog(&cfg, eng, log, stderr)
	if code != 0 {
		return code
	}
	if blog != nil {
		defer blog.Close()
	}
	srv, err := loop.New(loop.Config{
		Loops:      loops,
		MaxJobSize: cfg.MaxJobSize,
		Version:    config.Version,
		Verbosity:  cfg.Verbosity,
		Log:        log,
		ReserveFDs: reserveFDs(&cfg),
	}, eng)
	if err != nil {
		fmt.Fprintf(stderr, "beanpole: %v\n", err)
		return 1
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
	if err := srv.Start(); err != nil {
		fmt.Fprintf(stderr, "beanpole: %v\n", err)
		return 1
	}
	// Measured once the loops run, since an address-space limit counts
	// what they have mapped; set before the first client connects.
	limitMemory(&cfg, eng, srv, log)

	// BEANPOLE_CPUPROFILE=FILE profiles the whole run (written at a
	// graceful stop): how performance work on beanpole is measured.
	if path := os.Getenv("BEANPOLE_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil && pprof.StartCPUProfile(f) == nil {
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGINT)
	signal.Ignore(syscall.SIGPIPE)
	served := make(chan error, len(lns))
	for _, ln := range lns {
		go func() { served <- srv.Serve(ln) }()
	}
	adm.SetSource(statsSource{srv: srv, eng: eng, blog: blog}, eng)
	adm.SetState(admin.Ready)
	if err := sdNotify("READY=1"); err != nil {
		log.Warn().Err(err).Msg("could not tell systemd the server is ready")
	}

	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGUSR1 {
				// Drain mode, as upstream: puts are refused from now on.
				eng.SetDraining()
				adm.SetState(admin.Draining)
				log.Info().Msg("entering drain mode")
				continue
			}
			// Graceful stop (a beanpole improvement over upstream's
			// immediate death): stop accepting, flush, exit 0.
			log.Info().Str("signal", sig.String()).Msg("shutting down")
			adm.SetState(admin.Stopping)
			_ = sdNotify("STOPPING=1")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			srv.Stop(ctx)
			cancel()
			if blog != nil {
				// Write and fsync what is queued before exiting.
				if err := blog.Close(); err != nil {
					log.Error().Err(err).Msg("closing the binlog")
					return 1
				}
			}
			return 0
		case err := <-served:
			if err != nil {
				log.Error().Err(err).Msg("listener failed")
				return 1
			}
			return 0
		}
	}
}

// limitMemory sets the ceiling on job memory (--max-job-memory, by default
// derived from the memory budget: config.DefaultJobMemory), the budget for
// the input that waiting connections hold (an eighth of the memory budget,
// at least 64 MiB; BEANPOLE_INPUT_BUDGET_MB overrides it), the Go
// runtime's soft memory limit (unless GOMEMLIMIT set one) and the release
// of freed memory after a drain (memrelease.go; BEANPOLE_RELEASE_MEMORY=0
// turns it off).
func limitMemory(cfg *config.Config, eng *engine.Engine, srv *loop.Server, log zerolog.Logger) {
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
	if os.Getenv("GOMEMLIMIT") == "" && budget.Bytes > 0 {
		debug.SetMemoryLimit(config.SoftMemoryLimit(budget.Bytes))
	}
	used, _ := eng.JobMemory()
	log.Info().Int64("budget", budget.Bytes).Str("from", budget.Source).Int64("job-memory-limit", ceiling).Int64("input-budget", input).
		Int64("soft-limit", debug.SetMemoryLimit(-1)).Msg("memory")
	if ceiling > 0 && used > ceiling {
		log.Warn().Int64("job-memory-bytes", used).Int64("job-memory-limit", ceiling).
			Msg("the recovered jobs are past the job-memory ceiling: puts get OUT_OF_MEMORY until enough are deleted")
	}
	if os.Getenv("BEANPOLE_RELEASE_MEMORY") != "0" {
		giveMemoryBack(func() int64 { u, _ := eng.JobMemory(); return u }, log)
	}
}

// reserveFDs is how many descriptors the server keeps free for the binlog
// by shedding new connections near the open-file limit: a new segment,
// its spare, the directory opened to fsync it, a file being compacted.
// Without -b nothing needs them.
func reserveFDs(cfg *config.Config) int {
	if cfg.BinlogDir == "" {
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
	blog, rec, err := persist.Open(opts, log.With().Str("component", "binlog").Logger())
	if err != nil {
		fmt.Fprintf(stderr, "beanpole: -b %s: %v\n", cfg.BinlogDir, err)
		if errors.Is(err, persist.ErrFormat) {
			return nil, 1
		}
		return nil, 10 // upstream: "failed to lock wal dir", exit 10
	}
	for _, p := range rec.Problems {
		log.Error().Str("problem", p.String()).Msg("binlog damage found during recovery; the server starts with what could be read")
	}
	eng.Restore(rec)
	eng.SetJournal(blog)
	close(installed)
	log.Info().Int("jobs", len(rec.Jobs)).Uint64("max-id", rec.MaxID).Int("segments", rec.Segments).Msg("binlog recovered")
	return blog, 0
}
