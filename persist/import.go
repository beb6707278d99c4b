package persist

import (
	"fmt"
	"os"

	"github.com/rs/zerolog"
)

// Importing upstream beanstalkd's binlog.
//
// When DIR holds upstream's binlog.N files and no log of beanpole's, Open
// carries every live job over into a log of its own (id, tube, priority,
// state, delay, TTR, times, counters and body; reserved jobs come back
// ready, as upstream restarts them) and moves upstream's files into
// DIR/beanstalkd-import/, which it never reads again: moving them back is
// the way back to beanstalkd. The reading is package upstream's; the
// writing is the log's own Put.
//
// Both logs name their files binlog.N, so the new log is written apart and
// swapped in by renames, and every step can be repeated after a crash:
//
//  1. write the new log in DIR/.beanstalkd-import.tmp/ and wait until all
//     of it, directory entries included, is durable (a staging directory
//     without the marker of step 2 is a crashed attempt: removed first);
//  2. create the marker file "complete" there and fsync it: from here on
//     the new log is the one that counts;
//  3. move upstream's files from DIR into DIR/beanstalkd-import/;
//  4. move the new log's files into DIR, binlog.1 first;
//  5. remove the staging directory, its marker last.
//
// Open finishes steps 3 to 5 whenever it finds the marker, before it reads
// DIR. A crash before step 2 leaves DIR as it was (the import runs again);
// after it only renames remain. DIR never holds both logs at once, so no
// job is ever read twice.
const (
	importStaging = ".beanstalkd-import.tmp"
	importMarker  = "complete"
	importArchive = "beanstalkd-import"
)

// importUpstream imports the upstream binlog in opts.Dir, or finishes an
// import a crash interrupted; it returns nil and no error when there is
// nothing to import. Damage other than a torn tail is refused unless
// acceptDamage. The caller holds the directory's lock.
func importUpstream(opts Options, log zerolog.Logger, acceptDamage bool) (*ImportReport, error) {
	dir, fsys := opts.Dir, opts.FS
	staging := join(dir, importStaging)
	if exists(join(staging, importMarker)) {
		log.Warn().Msg("binlog: finishing an import of upstream beanstalkd's binlog that a crash interrupted")
		if err := finishImport(fsys, dir, log); err != nil {
			return nil, err
		}
		return &ImportReport{Dir: dir, Interrupted: true}, nil
	}
	if exists(staging) {
		log.Warn().Msg("binlog: an import of upstream beanstalkd's binlog was interrupted before it was complete; it starts again")
		if err := os.RemoveAll(staging); err != nil {
			return nil, importErr(err)
		}
	}
	files, err := classify(fsys, dir)
	if err != nil || len(files.up) == 0 {
		return nil, err
	}
	if err := checkArchive(dir, files.aside()); err != nil {
		return nil, err
	}
	for _, s := range files.skipped(dir) {
		log.Warn().Msg("binlog import: " + s)
	}
	rp, err := readUpstream(fsys, dir, files.foreign())
	if err != nil {
		return nil, err
	}
	jobs := rp.Jobs()
	rep := newImportReport(dir, rp, jobs)
	rep.Skipped = files.skipped(dir)
	if bad := rep.Refused(); len(bad) > 0 && !acceptDamage {
		return rep, &damageError{dir: dir, damage: bad}
	}
	for _, d := range rep.Damage {
		if d.TornTail {
			log.Warn().Str("damage", d.String()).Msg("binlog import: torn tail in upstream beanstalkd's binlog")
		} else {
			log.Error().Str("damage", d.String()).Uints64("jobs", d.Lost()).Msg("binlog import: damage in upstream beanstalkd's binlog accepted; importing what can be read")
		}
	}
	if err := writeStaged(opts, log, staging, jobs, rp.MaxID()); err != nil {
		_ = os.RemoveAll(staging)
		return nil, err
	}
	crashPoint("staged")
	if err := writeMarker(fsys, staging); err != nil {
		return nil, err
	}
	crashPoint("marked")
	logImport(log, rep)
	if err := finishImport(fsys, dir, log); err != nil {
		return nil, err
	}
	return rep, nil
}

// logImport says at debug level what was carried over (the caller says
// it in one line: see ImportReport).
func logImport(log zerolog.Logger, r *ImportReport) {
	log.Debug().Int("files", r.Files).Int("records", r.Records).Int("jobs", r.Jobs).Uint64("max_id", r.MaxID).
		Msg("binlog: imported upstream beanstalkd's binlog")
	for _, t := range r.Tubes {
		log.Debug().Str("tube", t.Tube).Int("ready", t.Ready).Int("delayed", t.Delayed).Int("buried", t.Buried).
			Msg("binlog: imported tube")
	}
}

// Import imports the upstream beanstalkd binlog in opts.Dir into a log of
// beanpole's, as Open would, without going on to recover it (beanpole
// import). It returns what was carried over, or nil if there was nothing
// to import. Unless acceptDamage, damage other than a torn tail is
// refused with an error for which errors.Is(err, ErrFormat) holds.
func Import(opts Options, acceptDamage bool, log zerolog.Logger) (*ImportReport, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	lockF, err := lockDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	defer lockF.Close()
	return importUpstream(opts, log, acceptDamage)
}

// PlanImport says what Import would carry over from dir, or nil if there
// is nothing to import, and changes nothing (beanpole import --dry-run).
func PlanImport(dir string) (*ImportReport, error) {
	if exists(join(join(dir, importStaging), importMarker)) {
		return &ImportReport{Dir: dir, Interrupted: true}, nil
	}
	files, err := classify(OSFS{}, dir)
	if err != nil || len(files.up) == 0 {
		return nil, err
	}
	rp, err := readUpstream(OSFS{}, dir, files.foreign())
	if err != nil {
		return nil, err
	}
	rep := newImportReport(dir, rp, rp.Jobs())
	rep.Skipped = files.skipped(dir)
	rep.InUse = inUse(dir)
	return rep, nil
}

// UpstreamFiles are the paths of the binlog.N files in dir that an import
// reads, in order: regular files (or links to them) that are not
// beanpole's. What is not a regular file (a named pipe, a link that leads
// nowhere) is left out, never opened.
func UpstreamFiles(dir string) ([]string, error) {
	files, err := classify(OSFS{}, dir)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, seq := range files.foreign() {
		paths = append(paths, join(dir, segName(seq)))
	}
	return paths, nil
}

// crashPoint stops the process at once, nothing cleaned up, as kill -9
// would, just after the named step when BEANPOLE_IMPORT_CRASH_AFTER names
// it. The import's crash tests use it; nothing else reads that variable.
func crashPoint(step string) {
	if os.Getenv("BEANPOLE_IMPORT_CRASH_AFTER") == step {
		os.Exit(70)
	}
}

// importErr marks an error as the import's; nil stays nil.
func importErr(err error) error {
	if err != nil {
		return fmt.Errorf("binlog import: %w", err)
	}
	return nil
}
