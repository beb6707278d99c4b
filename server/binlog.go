package server

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/beanpole/beanpole/cluster"
	"github.com/beanpole/beanpole/config"
	"github.com/beanpole/beanpole/engine"
	"github.com/beanpole/beanpole/persist"
	"github.com/beanpole/beanpole/record"
	"github.com/rs/zerolog"
)

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

// routerReserveFDs is how many descriptors the router of a node of many
// groups keeps from its clients: its node's reserve for raft, and as many
// again for the connections other nodes' routers open to the groups this
// node leads (whose internal listeners keep the reserve for raft alone).
// So the node's own clients, however many, leave the groups it leads
// within the reach of the other nodes' clients.
func routerReserveFDs(cfg *config.Config) int { return 2 * reserveFDs(cfg) }

// openBinlog opens and replays the -b directory into the engine and makes
// the engine log through it. It returns a non-zero exit code on failure.
func (s *Server) openBinlog(eng *engine.Engine) (*persist.Log, int) {
	cfg, log := s.cfg, s.log
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
		return nil, BinlogFailure(s.stderr, "beanpole", cfg.BinlogDir, err, config.ExitLocked)
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

// BinlogFailure reports why dir could not be used as a binlog directory,
// with what to do about it, and returns the exit code: ExitLocked when a
// server holds it, ExitReadOnly or ExitPermission when it cannot be
// written, 1 for a format this version cannot read or a binlog that
// cannot be read once the directory is locked, otherwise fallback. prog
// begins each line (beanpole, beanpole import).
func BinlogFailure(stderr io.Writer, prog, dir string, err error, fallback int) int {
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
