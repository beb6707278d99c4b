package persist

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sort"
	"strings"
)

// Importing an upstream binlog.
//
// When the directory holds upstream beanstalkd's binlog.N files and no log
// of beanpole's, Open carries every live job over into a log of its own
// (same id, tube, priority, state, delay, TTR, times, counters and body;
// reserved jobs come back ready, as upstream would restart them) and moves
// the upstream files into DIR/beanstalkd-import/, which it never reads
// again: moving them back there is the way back to beanstalkd.
//
// Both logs name their files binlog.N, so the new log is written apart
// and swapped in by renames, each step safe to repeat after a crash:
//
//  1. write the new log in DIR/.beanstalkd-import.tmp/ (any such directory
//     without the marker of step 2 is a crashed attempt: removed first),
//     and wait until its last record is fsynced;
//  2. create the marker file "complete" there and fsync it: the import is
//     decided;
//  3. move every upstream file from DIR into DIR/beanstalkd-import/;
//  4. move the new log's files into DIR;
//  5. remove DIR/.beanstalkd-import.tmp/.
//
// Open finishes steps 3-5 whenever it finds the marker, before it reads
// DIR. A crash before step 2 leaves the upstream files where they were
// (the import runs again); after it, the new log is complete and only
// moves remain. No job is ever in both logs where Open reads.
const (
	importStaging = ".beanstalkd-import.tmp"
	importMarker  = "complete"
	importArchive = "beanstalkd-import"
)

// importMaxBody bounds a body read from an upstream record: upstream's
// own largest -z.
const importMaxBody = 1 << 30

// importBatch is how many bytes of records the import queues before it
// waits for them to reach the disk.
const importBatch = 64 << 20

// importUpstream runs the import when DIR holds upstream files, or
// finishes one that a crash interrupted. Open calls it under the lock.
func (l *Log) importUpstream() error {
	dir, fsys := l.opts.Dir, l.opts.FS
	staging := join(dir, importStaging)
	if _, err := os.Stat(join(staging, importMarker)); err == nil {
		l.log.Warn().Msg("binlog: finishing an import of upstream beanstalkd's binlog that was interrupted")
		return l.finishImport()
	}
	if err := os.RemoveAll(staging); err != nil {
		return fmt.Errorf("binlog import: %w", err)
	}
	up, err := upstreamSegments(fsys, dir)
	if err != nil || len(up) == 0 {
		return err
	}
	u, err := readUpstream(fsys, dir, up, importMaxBody)
	if err != nil {
		return err
	}
	for _, p := range u.problems {
		l.log.Error().Str("problem", p).Msg("binlog import: damage in upstream beanstalkd's binlog; the import carries over what could be read")
	}
	jobs := u.live()
	if err := l.writeStaged(staging, jobs, u.maxID); err != nil {
		_ = os.RemoveAll(staging)
		return err
	}
	crashPoint("staged")
	if err := writeMarker(fsys, staging); err != nil {
		return err
	}
	crashPoint("marked")
	l.log.Info().Int("files", len(up)).Int("jobs", len(jobs)).Uint64("max_id", u.maxID).
		Str("summary", Summarize(jobs)).Msg("binlog: imported upstream beanstalkd's binlog; its files go to " + importArchive + "/")
	if err := l.finishImport(); err != nil {
		return err
	}
	// Recovery reads every body again from the new log: collect the
	// upstream copies (dead from here) first, so that the peak is one copy
	// of the jobs, not two.
	debug.FreeOSMemory()
	return nil
}

// upstreamSegments lists the binlog.N files of dir that are upstream's,
// refusing a directory that mixes them with beanpole's.
func upstreamSegments(fsys FS, dir string) ([]uint64, error) {
	seqs, err := listSegments(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("binlog import: %w", err)
	}
	var up []uint64
	ours := ""
	for _, seq := range seqs {
		st, err := segHeaderOf(fsys, join(dir, segName(seq)))
		if err != nil {
			return nil, fmt.Errorf("binlog import: %w", err)
		}
		switch st {
		case hdrUpstream:
			up = append(up, seq)
		case hdrOK:
			ours = segName(seq)
		}
	}
	if len(up) > 0 && ours != "" {
		return nil, fmt.Errorf("%w: %s holds both upstream beanstalkd's binlog (%s) and beanpole's (%s); move one of them elsewhere",
			ErrFormat, dir, segName(up[0]), ours)
	}
	return up, nil
}

// segHeaderOf classifies a segment file by its first bytes.
func segHeaderOf(fsys FS, path string) (headerStatus, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	b := make([]byte, segHeaderSize)
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	_, st := parseSegHeader(b[:n])
	return st, nil
}

// writeStaged writes jobs and the id high-water mark as a fresh log in
// staging and returns once all of it is fsynced.
func (l *Log) writeStaged(staging string, jobs []*Job, maxID uint64) error {
	if err := os.Mkdir(staging, 0o700); err != nil {
		return fmt.Errorf("binlog import: %w", err)
	}
	sl, _, err := Open(Options{Dir: staging, WantSync: true, SyncEvery: 0, SegmentSize: l.opts.SegmentSize, FS: l.opts.FS},
		l.log.With().Str("staging", staging).Logger())
	if err != nil {
		return fmt.Errorf("binlog import: %w", err)
	}
	// Records wait in the log's buffer until written: wait for the disk
	// every importBatch bytes, so that the buffer never holds a second
	// copy of every body.
	done := make(chan error, 1)
	ack := AckFunc(func(err error) { done <- err })
	pending := 0
	for _, j := range jobs {
		pending += FullSize(j)
		var a Ack
		if pending >= importBatch {
			a = ack
		}
		if err := sl.Put(j, a); err != nil {
			sl.Close()
			return fmt.Errorf("binlog import: job %d: %w", j.ID, err)
		}
		if a != nil {
			if err := <-done; err != nil {
				sl.Close()
				return fmt.Errorf("binlog import: %w", err)
			}
			pending = 0
		}
	}
	// Acks come in append order: the last one means everything is durable.
	// An id mark keeps ids past every upstream job, deleted ones included.
	mark := appendHighWater(nil, maxID)
	if err := sl.place(mark, kindHighWater, maxID, ack); err != nil {
		sl.Close()
		return fmt.Errorf("binlog import: %w", err)
	}
	err = <-done
	if cerr := sl.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("binlog import: %w", err)
	}
	return nil
}

func writeMarker(fsys FS, staging string) error {
	f, err := fsys.OpenFile(join(staging, importMarker), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err == nil {
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = fsys.SyncDir(staging)
	}
	if err != nil {
		return fmt.Errorf("binlog import: %w", err)
	}
	return nil
}

// finishImport does steps 3-5; each is safe to repeat.
func (l *Log) finishImport() error {
	dir, fsys := l.opts.Dir, l.opts.FS
	staging, archive := join(dir, importStaging), join(dir, importArchive)
	wrap := func(err error) error { return fmt.Errorf("binlog import: %w", err) }
	if err := os.MkdirAll(archive, 0o700); err != nil {
		return wrap(err)
	}
	// Step 3 completes before step 4 begins, so DIR never holds both
	// logs here.
	up, err := upstreamSegments(fsys, dir)
	if err != nil {
		return err
	}
	for _, seq := range up {
		to := join(archive, segName(seq))
		if _, err := os.Stat(to); err == nil {
			return fmt.Errorf("%w: %s already exists; move it away to import %s", ErrFormat, to, join(dir, segName(seq)))
		}
		if err := fsys.Rename(join(dir, segName(seq)), to); err != nil {
			return wrap(err)
		}
	}
	if err := fsys.SyncDir(archive); err != nil {
		return wrap(err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return wrap(err)
	}
	crashPoint("archived")
	staged, err := listSegments(fsys, staging)
	if err != nil {
		return wrap(err)
	}
	for _, seq := range staged {
		if err := fsys.Rename(join(staging, segName(seq)), join(dir, segName(seq))); err != nil {
			return wrap(err)
		}
	}
	if err := fsys.SyncDir(dir); err != nil {
		return wrap(err)
	}
	if err := os.RemoveAll(staging); err != nil {
		return wrap(err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return wrap(err)
	}
	return nil
}

// crashPoint stops the process at once (exit 70, nothing cleaned up, as
// kill -9 would) after the named step when BEANPOLE_IMPORT_CRASH_AFTER
// names it: the crash tests of the import use it.
func crashPoint(step string) {
	if os.Getenv("BEANPOLE_IMPORT_CRASH_AFTER") == step {
		os.Exit(70)
	}
}

// DescribeUpstream reads the upstream binlog in dir without changing
// anything and says what an import would carry over.
func DescribeUpstream(dir string) (string, error) {
	up, err := upstreamSegments(OSFS{}, dir)
	if err != nil {
		return "", err
	}
	if len(up) == 0 {
		return fmt.Sprintf("%s holds no upstream beanstalkd binlog: nothing to import\n", dir), nil
	}
	u, err := readUpstream(OSFS{}, dir, up, importMaxBody)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	jobs := u.live()
	fmt.Fprintf(&b, "%d upstream binlog files, %d records: %d jobs to carry over, ids up to %d (the next id is %d)\n",
		len(up), u.records, len(jobs), u.maxID, u.maxID+1)
	b.WriteString(Summarize(jobs))
	for _, p := range u.problems {
		fmt.Fprintf(&b, "damage: %s\n", p)
	}
	return b.String(), nil
}

// Summarize counts jobs per tube and state, one tube a line.
func Summarize(jobs []*Job) string {
	type counts [StateBuried + 1]int
	per := map[string]*counts{}
	for _, j := range jobs {
		c := per[j.Tube]
		if c == nil {
			c = &counts{}
			per[j.Tube] = c
		}
		c[j.State]++
	}
	tubes := make([]string, 0, len(per))
	for t := range per {
		tubes = append(tubes, t)
	}
	sort.Strings(tubes)
	var b strings.Builder
	for _, t := range tubes {
		c := per[t]
		fmt.Fprintf(&b, "tube %q: %d ready, %d delayed, %d buried\n", t, c[StateReady], c[StateDelayed], c[StateBuried])
	}
	return b.String()
}
