package server

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/beanpole/beanpole/admin"
	"github.com/beanpole/beanpole/cluster"
	"github.com/beanpole/beanpole/codec"
	"github.com/beanpole/beanpole/config"
	"github.com/beanpole/beanpole/engine"
	"github.com/beanpole/beanpole/internal/memtune"
	"github.com/beanpole/beanpole/loop"
	"github.com/beanpole/beanpole/persist"
)

// newEngine is an empty engine; BEANPOLE_WALL_CLOCK_OFFSET (a Go
// duration) runs its wall clock that far off the host's: fault tests give
// one cluster node a clock that disagrees with the others' with it.
func (s *Server) newEngine() (*engine.Engine, int) {
	eng := engine.New(s.loops)
	if v := os.Getenv("BEANPOLE_WALL_CLOCK_OFFSET"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintf(s.stderr, "beanpole: BEANPOLE_WALL_CLOCK_OFFSET: %v\n", err)
			return nil, config.ExitUsage
		}
		eng.SetWallOffset(d)
	}
	return eng, 0
}

// runSingle is the server without a cluster: the binlog (-b) replayed into
// the engine, then served until a stop. It takes Drain from before its
// replay, so that a drain asked for once the replay's log line is out is
// never lost (it applies when the server serves); a SIGTERM during the
// replay still ends it at once.
func (s *Server) runSingle() int {
	eng, code := s.newEngine()
	if code != 0 {
		return code
	}
	s.takes(CallDrain)
	// The binlog is opened after dropping privileges, as upstream does, so
	// its files belong to the -u user.
	blog, code := s.openBinlog(eng)
	if code != 0 {
		return code
	}
	if blog != nil {
		defer blog.Close()
	}
	code, _ = s.serve(eng, blog, nil)
	return code
}

// serve runs the engine on the listeners until a stop (graceful, code 0),
// a failed listener, or, on a cluster node, the loss of the lead (lost):
// then the clients' connections are closed, as a beanstalkd death closes
// them, and the listeners are left open for the node to forward again.
func (s *Server) serve(eng *engine.Engine, blog *persist.Log, host *cluster.Host) (code int, lost bool) {
	if s.draining.Load() {
		eng.SetDraining() // a drain asked for before this term still holds
	}
	var deposed <-chan struct{}
	var node *cluster.Node
	if host != nil {
		node = host.Groups[0]
		deposed = node.LostLeadership()
	}
	srv, code := s.startLoops(eng, blog, node)
	if code != 0 {
		return code, false
	}
	s.takes(CallStop)
	served := make(chan error, len(s.lns)+1)
	for _, ln := range s.lns {
		go func() { served <- srv.Serve(ln) }()
	}
	if s.tlsLn != nil {
		go func() { served <- srv.ServeTLS(s.tlsLn, s.tlsFiles.Config()) }()
	}
	adm := s.adm
	adm.SetSource(statsSource{srv: srv, eng: eng, blog: blog, tls: s.tlsLn != nil}, eng)
	if eng.Draining() {
		adm.SetState(admin.Draining)
	} else {
		adm.SetState(admin.Ready)
	}
	if err := config.SdNotify("READY=1"); err != nil {
		s.log.Warn().Err(err).Msg("could not tell systemd the server is ready")
	}

	for {
		select {
		case c := <-s.calls:
			if !c.stop {
				// Drain mode, as upstream: puts are refused from now on.
				s.draining.Store(true)
				eng.SetDraining()
				adm.SetState(admin.Draining)
				s.log.Info().Msg("drain mode (SIGUSR1): puts are refused from now on")
				continue
			}
			return s.stop(c, srv, blog, host), false
		case <-deposed:
			s.log.Warn().Msg("cluster: this node lost the lead; its clients' connections are closed and it follows again")
			adm.SetState(admin.Following)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			srv.StopKeepingListeners(ctx)
			cancel()
			adm.ClearSource()
			return 0, true
		case err := <-served:
			if err != nil {
				s.log.Error().Err(err).Msg("listener failed")
				return 1, false
			}
			return 0, false
		}
	}
}

// loopConfig is the configuration of every engine's event loops.
func (s *Server) loopConfig() loop.Config {
	return loop.Config{Loops: s.loops, MaxJobSize: s.cfg.MaxJobSize, Version: config.Version,
		Verbosity: s.cfg.Verbosity, Log: s.log, ReserveFDs: reserveFDs(s.cfg)}
}

// memoryLimits are the ceiling on the memory clients can make the server
// hold (--max-job-memory, or derived from the memory the process may use)
// and the budget for input read but not yet run.
func (s *Server) memoryLimits() (ceiling, input int64) {
	budget := config.DetectMemoryBudget()
	input = max(budget.Bytes/8, 64<<20)
	if v, err := strconv.ParseInt(os.Getenv("BEANPOLE_INPUT_BUDGET_MB"), 10, 32); err == nil && v > 0 {
		input = v << 20
	}
	ceiling = s.cfg.MaxJobMemory
	if ceiling < 0 {
		ceiling = config.DefaultJobMemory(budget.Bytes)
	}
	return ceiling, input
}

// startLoops starts the event loops that serve eng, with the binlog's
// figures in `stats` and, on a cluster node, each reply fenced by the
// lead.
func (s *Server) startLoops(eng *engine.Engine, blog *persist.Log, node *cluster.Node) (*loop.Server, int) {
	cfg := s.cfg
	srv, err := loop.New(s.loopConfig(), eng)
	if err != nil {
		fmt.Fprintf(s.stderr, "beanpole: %v\n", err)
		return nil, 1
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
		srv.Fence, srv.FenceMayReturn = node.Leads, node.MayLeadAgain
	}
	if err := srv.Start(); err != nil {
		fmt.Fprintf(s.stderr, "beanpole: %v\n", err)
		return nil, 1
	}
	// Measured once the loops run, since an address-space limit counts
	// what they have mapped; set before the first client connects.
	s.limitMemory(eng, srv)
	return srv, 0
}

// stop is the graceful stop c asked for (a beanpole improvement over
// upstream's immediate death): stop accepting, flush, exit 0.
func (s *Server) stop(c call, srv *loop.Server, blog *persist.Log, host *cluster.Host) int {
	cfg, log := s.cfg, s.log
	s.adm.SetState(admin.Stopping)
	_ = config.SdNotify("STOPPING=1")
	if cfg.HTTPAddr != "" && cfg.StopGrace > 0 {
		// /readyz says stopping while clients are still served, so that a
		// load balancer polling it stops sending new ones first; a second
		// stop cuts it short.
		log.Info().Str("signal", c.why).Str("stop-grace", cfg.StopGrace.String()).Msg("stopping: no new connections after the grace, the binlog is flushed")
		graceOver(s.calls, cfg.StopGrace)
	} else {
		log.Info().Str("signal", c.why).Msg("stopping: no new connections, the binlog is flushed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	srv.Stop(ctx)
	cancel()
	code := 0
	if host != nil {
		code = leaveCluster(host, log)
	}
	if blog != nil {
		// Write and fsync what is queued before exiting.
		if err := blog.Close(); err != nil {
			log.Error().Err(err).Msg("closing the binlog")
			return 1
		}
	}
	return code
}

// graceOver waits d, or until another stop comes first (a drain changes
// nothing once stopping).
func graceOver(calls <-chan call, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return
		case c := <-calls:
			if c.stop {
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
func (s *Server) limitMemory(eng *engine.Engine, srv *loop.Server) {
	log := s.log
	budget := config.DetectMemoryBudget()
	ceiling, input := s.memoryLimits()
	srv.SetInputBudget(input)
	eng.SetJobMemoryLimit(ceiling)
	// Published once set up: the releaser of an earlier serve (a node
	// that leads again) reads the engine it finds here.
	s.eng.Store(eng)
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
		s.memOnce.Do(func() {
			memtune.GiveMemoryBack(func() int64 { u, _ := s.eng.Load().JobMemory(); return u }, log)
		})
	}
}
