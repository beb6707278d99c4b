package persist

import (
	"github.com/beanpole/beanpole/record"

	"fmt"
	"io"
	"os"
	"strings"
)

// Recovered is what Open read back from the directory.
type Recovered struct {
	// Jobs are the live jobs in id order, each as of its last record:
	//   - StateReserved never appears: a reservation ends with the process,
	//     so those jobs are ready (as upstream);
	//   - a delayed job's Deadline is wall-clock and may be past: it is
	//     ready now;
	//   - buried jobs go back on their tube's buried list in BuriedSeq
	//     order; ready jobs are ordered by (Pri, ID) by the engine.
	Jobs []*record.Job
	// MaxID is the highest job id the log has ever recorded, deleted jobs
	// included. The next id handed out must be MaxID+1.
	MaxID uint64
	// Segments and Records count what was read.
	Segments, Records int
	// Problems lists damage found, in log order. Empty for a clean log or
	// one that just ended at a record boundary.
	Problems []Problem
	// Imported is what Open carried over from upstream beanstalkd's
	// binlog before recovering, nil when there was none to import.
	Imported *ImportReport
}

// ProblemKind classifies damage found by recovery.
type ProblemKind int

const (
	// TornTail: the final write before a crash was cut short. Cut off;
	// nothing acknowledged is lost (logged as a warning).
	TornTail ProblemKind = iota + 1
	// CorruptRecord: a record failed its checksum (or could not be decoded)
	// but its frame was intact, so it was skipped and reading went on.
	CorruptRecord
	// Unreadable: framing was lost; the rest of that segment was not read.
	Unreadable
	// BadSegment: the segment header is damaged; the file was set aside as
	// binlog.N.damaged.
	BadSegment
	// MissingRecords: a gap in the log sequence between two segments.
	MissingRecords
	// NotAFile: a binlog.N that is not a regular file (a named pipe, a
	// directory, a dangling or looping symbolic link) was not read, and
	// is left where it is; its number is not used again.
	NotAFile
)

func (k ProblemKind) String() string {
	switch k {
	case TornTail:
		return "torn tail"
	case CorruptRecord:
		return "corrupt record"
	case Unreadable:
		return "unreadable data"
	case BadSegment:
		return "bad segment header"
	case MissingRecords:
		return "missing records"
	case NotAFile:
		return "not a regular file"
	}
	return fmt.Sprintf("problem(%d)", int(k))
}

// Problem is one piece of damage found during recovery.
type Problem struct {
	Kind    ProblemKind
	Segment uint64 // N of binlog.N
	Offset  int64  // byte offset in the segment
	Bytes   int64  // bytes affected (dropped or skipped)
	// Records is how many records are known lost (0 if unknown).
	Records int
	// JobIDs names jobs whose records were lost, where they could be read
	// from the damaged bytes. They come from unverified data.
	JobIDs []uint64
	Detail string
}

func (p Problem) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "binlog.%d offset %d: %v", p.Segment, p.Offset, p.Kind)
	if p.Detail != "" {
		fmt.Fprintf(&b, " (%s)", p.Detail)
	}
	if p.Bytes > 0 {
		fmt.Fprintf(&b, ", %d bytes", p.Bytes)
	}
	if p.Records > 0 {
		fmt.Fprintf(&b, ", %d records lost", p.Records)
	}
	if len(p.JobIDs) > 0 {
		fmt.Fprintf(&b, ", jobs %v", p.JobIDs)
	}
	return b.String()
}

// recover reads every segment, rebuilds the live jobs and the log's own
// state (segments, pins, LSN, id mark), and repairs the tail so appending
// can continue where the last good record ended.
func (l *Log) recover() (*Recovered, error) {
	dir, fsys := l.opts.Dir, l.opts.FS
	seqs, err := listSegments(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("binlog: %w", err)
	}
	rp := newReplay()
	scans := make([]*segScan, 0, len(seqs))
	var buf []byte
	var odd []Problem
	for _, seq := range seqs {
		path := join(dir, segName(seq))
		// Never opened: opening a named pipe waits for a writer.
		what, err := oddKind(path)
		if err != nil {
			return nil, fmt.Errorf("binlog: %w", err)
		}
		if what != "" {
			odd = append(odd, Problem{Kind: NotAFile, Segment: seq, Detail: what + ": not read, and its number is not used again"})
			l.nextSeq = max(l.nextSeq, seq+1)
			continue
		}
		if buf, err = readWhole(fsys, path, buf); err != nil {
			return nil, fmt.Errorf("binlog: %w", err)
		}
		sc := scanSegment(buf, seq, rp.lastLSN, func(r *record.Record, lsn uint64, n int64) error {
			return rp.apply(r, seq, lsn, n)
		})
		switch sc.hdr {
		case hdrUpstream:
			// Open imports upstream files before recovery: one left here
			// came in since, beside beanpole's own.
			return nil, fmt.Errorf("%w: %s is an upstream beanstalkd binlog beside beanpole's own; move one of them elsewhere", ErrFormat, path)
		case hdrVersion:
			return nil, fmt.Errorf("%w: %s was written by a newer beanpole", ErrFormat, path)
		}
		scans = append(scans, sc)
		l.nextSeq = max(l.nextSeq, seq+1)
	}
	l.nextSeq = max(l.nextSeq, 1)

	tail := -1
	for i, sc := range scans {
		if !sc.empty {
			tail = i
		}
	}
	rec := &Recovered{MaxID: rp.live.MaxID, Records: rp.records}
	report := func(p Problem) {
		rec.Problems = append(rec.Problems, p)
		ev := l.log.Error()
		if p.Kind == TornTail {
			ev = l.log.Warn()
		}
		ev.Uint64("segment", p.Segment).Int64("offset", p.Offset).Int64("bytes", p.Bytes).
			Int("records_lost", p.Records).Interface("jobs", p.JobIDs).Str("detail", p.Detail).
			Msg("binlog: " + p.Kind.String())
	}
	for _, p := range odd {
		report(p)
	}

	bySeq := make(map[uint64]*segment)
	prevLast := uint64(0)
	for i, sc := range scans {
		path := join(dir, segName(sc.seq))
		rec.MaxID = max(rec.MaxID, sc.probe.maxID)
		if sc.empty {
			if i < tail {
				_ = fsys.Remove(path) // never written, holds nothing
				continue
			}
			if err := l.adoptSpare(path, sc.seq, sc.size); err != nil {
				return nil, err
			}
			continue
		}
		rec.Segments++
		if sc.records > 0 && prevLast != 0 && sc.firstLSN > prevLast+1 {
			report(Problem{Kind: MissingRecords, Segment: sc.seq, Offset: segHeaderSize,
				Records: int(sc.firstLSN - prevLast - 1),
				Detail:  fmt.Sprintf("log sequence jumps from %d to %d", prevLast, sc.firstLSN)})
		}
		prevLast = max(prevLast, sc.lastSeen)
		for _, b := range sc.bad {
			if b.off < sc.end || i != tail {
				report(Problem{Kind: CorruptRecord, Segment: sc.seq, Offset: b.off, Bytes: b.n,
					Records: 1, JobIDs: nonZero(b.id), Detail: b.why + "; record skipped"})
			}
		}
		damaged := len(sc.bad) > 0 && (sc.bad[0].off < sc.end || i != tail)

		if sc.hdr != hdrOK {
			if i == tail && sc.probe.frames == 0 {
				report(Problem{Kind: TornTail, Segment: sc.seq, Offset: 0, Bytes: sc.size,
					Detail: "segment header incomplete; segment reinitialised"})
				if err := l.reinitSpare(path, sc.seq, sc.size); err != nil {
					return nil, err
				}
				continue
			}
			report(Problem{Kind: BadSegment, Segment: sc.seq, Offset: 0, Bytes: sc.size,
				Records: sc.probe.frames, JobIDs: sc.probe.ids,
				Detail: "segment header damaged; file moved to " + segName(sc.seq) + ".damaged"})
			if err := fsys.Rename(path, path+".damaged"); err != nil {
				return nil, fmt.Errorf("binlog: %w", err)
			}
			continue
		}

		s := &segment{seq: sc.seq, path: path, size: sc.size, used: sc.end, firstLSN: sc.firstLSN, sealed: true, damaged: damaged}
		dirty := sc.dirty()
		switch {
		case i == tail && dirty && sc.probe.frames == 0:
			// The classic crash: the last write was cut short. Everything
			// before it was acknowledged and is intact; nothing after it
			// could have been.
			report(Problem{Kind: TornTail, Segment: sc.seq, Offset: sc.end, Bytes: sc.size - sc.end,
				JobIDs: tailIDs(sc), Detail: "incomplete final write cut off"})
			if sc.records == 0 && !damaged {
				if err := l.reinitSpare(path, sc.seq, sc.size); err != nil {
					return nil, err
				}
				continue
			}
			if err := l.openTail(s, true); err != nil {
				return nil, err
			}
		case dirty:
			// Valid records exist beyond the damage (or this is not the
			// last segment): they cannot be reached safely. Keep the file
			// untouched as evidence; new records go to a fresh segment.
			// (Skipped records after the last good one were reported above.)
			if sc.lostAt >= 0 {
				report(Problem{Kind: Unreadable, Segment: sc.seq, Offset: sc.lostAt, Bytes: sc.size - sc.lostAt,
					Records: sc.probe.frames, JobIDs: sc.probe.ids, Detail: sc.lostWhy + "; rest of segment not read"})
			}
			s.damaged, s.used = true, s.size
		case i == tail:
			if sc.records == 0 && !damaged {
				if err := l.reinitSpare(path, sc.seq, sc.size); err != nil {
					return nil, err
				}
				continue
			}
			if err := l.openTail(s, false); err != nil {
				return nil, err
			}
		case sc.records == 0 && !damaged:
			_ = fsys.Remove(path) // a header and nothing else
			continue
		default:
			// A closed segment may still carry its preallocated tail (the
			// process died before trimming it): trim it now.
			if !damaged && sc.size > sc.end {
				if err := trim(fsys, path, sc.end); err != nil {
					return nil, err
				}
				s.size = sc.end
			}
			s.used = s.size
		}
		bySeq[s.seq] = s
		l.insertRecovered(s)
	}

	// Pins: each live job holds the segment with its latest full record.
	rec.Jobs = rp.live.Sorted()
	for id, p := range rp.pins {
		s := bySeq[p.seq]
		if s == nil {
			continue // cannot happen: a full record was read from it
		}
		s.refs++
		s.liveBytes += int64(p.bytes)
		l.pins[id] = p
	}
	l.maxID = rec.MaxID
	l.nextLSN = rp.lastLSN + 1
	l.writtenLSN, l.syncedLSN = rp.lastLSN, rp.lastLSN
	l.finishRecoveredList()
	if rp.live.Orphans > 0 {
		l.log.Debug().Int("records", rp.live.Orphans).Msg("binlog: updates for jobs whose full record was reclaimed")
	}
	return rec, nil
}

func nonZero(id uint64) []uint64 {
	if id == 0 {
		return nil
	}
	return []uint64{id}
}

// tailIDs names the jobs of the (unverified) records cut off a torn tail.
func tailIDs(sc *segScan) []uint64 {
	var ids []uint64
	for _, b := range sc.bad {
		if b.off >= sc.end && b.id != 0 {
			ids = append(ids, b.id)
		}
	}
	return ids
}

func readWhole(fsys FS, path string, buf []byte) ([]byte, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return buf, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return buf, err
	}
	if int64(cap(buf)) < size {
		buf = make([]byte, size)
	}
	buf = buf[:size]
	if n, err := f.ReadAt(buf, 0); err != nil && !(err == io.EOF && int64(n) == size) {
		return buf, fmt.Errorf("read %s: %w", path, err)
	}
	return buf, nil
}

func trim(fsys FS, path string, size int64) error {
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("binlog: %w", err)
	}
	err = f.Truncate(size)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("binlog: trim %s: %w", path, err)
	}
	return nil
}

// openTail makes s, the last segment with records, the one appends go to.
// With cut, everything after s.used is garbage from a torn write and is
// zeroed first (truncate, then extend again) and the repair made durable
// before any new record can land after it.
func (l *Log) openTail(s *segment, cut bool) error {
	f, err := l.opts.FS.OpenFile(s.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("binlog: %w", err)
	}
	fail := func(err error) error {
		f.Close()
		return fmt.Errorf("binlog: repair %s: %w", s.path, err)
	}
	if cut {
		if err := f.Truncate(s.used); err != nil {
			return fail(err)
		}
		s.size = s.used
	}
	if s.size < l.opts.SegmentSize && f.Allocate(l.opts.SegmentSize) == nil {
		s.size = l.opts.SegmentSize
	}
	if cut {
		if err := f.Sync(); err != nil {
			return fail(err)
		}
	}
	s.f, s.sealed = f, false
	l.wcurInit = s
	return nil
}

// adoptSpare keeps an all-zero segment as a spare.
func (l *Log) adoptSpare(path string, seq uint64, size int64) error {
	f, err := l.opts.FS.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("binlog: %w", err)
	}
	if size < l.opts.SegmentSize && f.Allocate(l.opts.SegmentSize) == nil {
		size = l.opts.SegmentSize
	}
	l.insertRecovered(&segment{seq: seq, path: path, size: size, f: f})
	return nil
}

// reinitSpare zeroes a tail segment that holds no complete record and
// keeps it as a spare.
func (l *Log) reinitSpare(path string, seq uint64, size int64) error {
	f, err := l.opts.FS.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("binlog: %w", err)
	}
	size = max(size, l.opts.SegmentSize)
	if err := f.Truncate(0); err != nil {
		f.Close()
		return fmt.Errorf("binlog: reinit %s: %w", path, err)
	}
	if err := f.Allocate(size); err != nil {
		f.Close()
		_ = l.opts.FS.Remove(path)
		return nil
	}
	l.insertRecovered(&segment{seq: seq, path: path, size: size, f: f})
	return nil
}

func (l *Log) insertRecovered(s *segment) { l.segs = append(l.segs, s) }

// finishRecoveredList sets the placement point after recovery: the open
// tail if there is one, else the last closed segment (it has no room, so
// the first record starts the next spare).
func (l *Log) finishRecoveredList() {
	l.cur = -1
	for i, s := range l.segs {
		if s.sealed || s.used > 0 {
			l.cur = i
		} else {
			l.spareSlots += slotsIn(spareFree(s))
		}
	}
	l.w.cur = l.wcurInit
	if l.w.cur != nil {
		l.w.end = l.w.cur.used
	}
	l.wcur = l.w.cur
}
