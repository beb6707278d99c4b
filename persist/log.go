package persist

import (
	"github.com/beanpole/beanpole/record"

	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Log is an open binlog directory. Its appenders (Put, Delete, Release,
// Bury, Kick, Rewrite), FileOf, Stats and Compact are safe for concurrent
// use.
type Log struct {
	opts    Options
	maxSize int64 // -s as given, for binlog-max-size
	log     zerolog.Logger
	lockF   *os.File

	mu   sync.Mutex
	cond sync.Cond // on mu: syncedLSN moved, or the log closed or failed

	// segs are the retained segments in order: sealed ones, the placement
	// segment segs[cur], then preallocated spares.
	segs       []*segment
	cur        int   // -1 before the first segment exists
	spareSlots int64 // delete frames that fit in the spares
	nextSeq    uint64
	nextLSN    uint64
	maxID      uint64         // highest job id placed or recovered
	pins       map[uint64]pin // live job → segment of its latest full record
	pending    batch          // placed, not yet taken by the writer
	writtenLSN uint64         // written (write(2) done)
	syncedLSN  uint64         // durable to the promised level
	wcur       *segment       // the writer's segment, for the syncer
	wcurInit   *segment       // set by recovery
	closed     bool
	failed     error
	space      spaceState

	tmpSeq atomic.Uint64

	wakeWriter, wakePrealloc, wakeSync, wakeCompact chan struct{}
	stop                                            chan struct{}
	writerDone                                      chan struct{}
	bg                                              sync.WaitGroup
	compactMu, reclaimMu                            sync.Mutex

	// w is owned by the writer goroutine.
	w struct {
		cur   *segment
		end   int64 // end of the last write to cur
		spare batch
	}

	written, migrated, fsyncs, batches atomic.Uint64
	// writeNanos and fsyncNanos add up the time the group commits' writes
	// and the fsyncs of the current segment took; bytesWritten what the
	// writes wrote.
	writeNanos, fsyncNanos, bytesWritten atomic.Uint64
}

// pin records where a live job's latest full record is.
type pin struct {
	seq   uint64
	bytes uint32 // its frame size
}

// Open locks opts.Dir, recovers it and starts the log. The returned
// Recovered holds the live jobs for the engine to load before it serves
// clients. A damaged log is repaired or worked around and reported in
// Recovered.Problems (and logged); Open fails only when the directory
// cannot be used at all: missing, locked (ErrLocked), unreadable, or in a
// format this version cannot read (ErrFormat).
func Open(opts Options, log zerolog.Logger) (*Log, *Recovered, error) {
	maxSize := opts.SegmentSize
	if maxSize == 0 {
		maxSize = DefaultSegmentSize
	}
	if err := opts.normalize(); err != nil {
		return nil, nil, err
	}
	lockF, err := lockDir(opts.Dir)
	if err != nil {
		return nil, nil, err
	}
	l := &Log{
		opts: opts, maxSize: maxSize, log: log, lockF: lockF,
		cur:          -1,
		pins:         make(map[uint64]pin),
		wakeWriter:   make(chan struct{}, 1),
		wakePrealloc: make(chan struct{}, 1),
		wakeSync:     make(chan struct{}, 1),
		wakeCompact:  make(chan struct{}, 1),
		stop:         make(chan struct{}),
		writerDone:   make(chan struct{}),
	}
	l.cond.L = &l.mu
	imported, err := importUpstream(opts, log, false)
	if err != nil {
		lockF.Close()
		return nil, nil, unusable(err)
	}
	rec, err := l.recover()
	if err != nil {
		l.closeFiles()
		lockF.Close()
		return nil, nil, unusable(err)
	}
	rec.Imported = imported
	if maxSize < opts.SegmentSize {
		log.Warn().Int64("size", maxSize).Int64("using", opts.SegmentSize).Msg("binlog: segment size too small, raised")
	}
	// The recovered jobs owe deletes like any others: make room for them.
	l.mu.Lock()
	for !l.reserveOKLocked(0, int64(len(l.pins))) {
		if l.growLocked() != nil {
			break
		}
	}
	l.mu.Unlock()

	go l.writerLoop()
	l.bg.Add(2)
	go l.preallocLoop()
	go l.compactLoop()
	if opts.WantSync && opts.SyncEvery > 0 {
		l.bg.Add(1)
		go l.syncLoop()
	}
	l.reclaim()
	kick(l.wakePrealloc)
	return l, rec, nil
}

// Put queues the full record of a new job. Put, Delete, Release, Bury,
// Kick and Rewrite each encode their record with package record and
// return at once.
//
// If one returns an error the record was not queued and ack is never
// called: ErrNoSpace (answer a put with OUT_OF_MEMORY), ErrFailed or
// ErrClosed. Otherwise ack, if not nil, is called exactly once from the
// log's writer goroutine (see record.Ack). Acks are called in the order
// their records were appended.
//
// Records of one job must be appended in the order its changes happen;
// the simple way is to append while holding the lock that guards the job.
// Appending never blocks on I/O except in the rare case that the next
// segment must be created on the spot (the background preallocator fell
// behind).
func (l *Log) Put(j *record.Job, ack record.Ack) error {
	b := getScratch()
	*b = record.AppendFull((*b)[:0], j)
	err := l.place(*b, record.KindFull, j.ID, ack)
	putScratch(b)
	return err
}

// Rewrite queues a fresh full record of a live job (Options.Rewrite): it
// moves the job's pin to the new record and counts as migrated.
func (l *Log) Rewrite(j *record.Job) error { return l.Put(j, nil) }

// Delete queues a delete record.
func (l *Log) Delete(id uint64, ack record.Ack) error {
	var b [16]byte
	return l.place(record.AppendDelete(b[:0], id), record.KindDelete, id, ack)
}

// Release queues a release record (see record.AppendRelease).
func (l *Log) Release(id uint64, pri uint32, delay time.Duration, deadline int64, c record.Counters, ack record.Ack) error {
	var b [64]byte
	return l.place(record.AppendRelease(b[:0], id, pri, delay, deadline, c), record.KindRelease, id, ack)
}

// Bury queues a bury record (see record.AppendBury).
func (l *Log) Bury(id uint64, pri uint32, buriedSeq uint64, c record.Counters, ack record.Ack) error {
	var b [64]byte
	return l.place(record.AppendBury(b[:0], id, pri, buriedSeq, c), record.KindBury, id, ack)
}

// Kick queues a kick record (see record.AppendKick).
func (l *Log) Kick(id uint64, c record.Counters, ack record.Ack) error {
	var b [64]byte
	return l.place(record.AppendKick(b[:0], id, c), record.KindKick, id, ack)
}

// scratch holds encoded full records on their way into a batch: bodies
// make them large, so they are pooled rather than allocated per put.
var scratch = sync.Pool{New: func() any { return new([]byte) }}

func getScratch() *[]byte { return scratch.Get().(*[]byte) }

func putScratch(b *[]byte) {
	if cap(*b) <= maxIdleBuf {
		scratch.Put(b)
	}
}

// place queues an encoded record of kind k for job id.
func (l *Log) place(rec []byte, k record.Kind, id uint64, ack record.Ack) error {
	crc := checksum(rec) // outside the lock: the body can be large
	n := int64(frameHeaderSize + len(rec))

	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	if l.failed != nil {
		err := l.failed
		l.mu.Unlock()
		return err
	}
	p, live := l.pins[id]
	owe, keep := int64(len(l.pins)), true
	switch {
	case k == record.KindFull && !live:
		owe++ // a new job: it will owe a delete too
	case k == record.KindDelete && live:
		owe, keep = owe-1, false // its room was reserved by the put
	}
	s, err := l.placeLocked(n, owe, keep)
	if err != nil {
		l.mu.Unlock()
		return err
	}
	lsn := l.nextLSN
	l.nextLSN++
	frame := l.pending.add(s, s.used, int(n))
	s.used += n
	putFrameHeader(frame, frameHeader{n: uint32(len(rec)), lsn: lsn, crc: crc})
	copy(frame[frameHeaderSize:], rec)
	l.pending.lastLSN = lsn
	l.pending.records++
	if ack != nil {
		l.pending.acks = append(l.pending.acks, ack)
	}
	l.maxID = max(l.maxID, id)
	switch k {
	case record.KindFull:
		if live {
			l.unpinLocked(p, lsn)
			l.pending.migrated++
		}
		s.refs++
		s.liveBytes += n
		l.pins[id] = pin{seq: s.seq, bytes: uint32(n)}
	case record.KindDelete:
		if live {
			l.unpinLocked(p, lsn)
			delete(l.pins, id)
		}
	}
	l.mu.Unlock()
	kick(l.wakeWriter)
	return nil
}

// unpinLocked drops a job's hold on the segment of its previous full
// record. lsn is the record that superseded it: the segment may only be
// reclaimed once that record is durable.
func (l *Log) unpinLocked(p pin, lsn uint64) {
	if s := l.segBySeqLocked(p.seq); s != nil {
		s.refs--
		s.liveBytes -= int64(p.bytes)
		s.lastUnpin = max(s.lastUnpin, lsn)
	}
}

func (l *Log) segBySeqLocked(seq uint64) *segment {
	lo, hi := 0, len(l.segs)
	for lo < hi {
		m := (lo + hi) / 2
		switch s := l.segs[m]; {
		case s.seq == seq:
			return s
		case s.seq < seq:
			lo = m + 1
		default:
			hi = m
		}
	}
	return nil
}

// FileOf is the N of the binlog.N holding job id's latest full record, or
// 0 if the log has no live job id (stats-job `file`).
func (l *Log) FileOf(id uint64) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pins[id].seq
}

// MaxID is the highest job id the log has seen, recovered or appended.
func (l *Log) MaxID() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.maxID
}

// Close writes everything queued, fsyncs (whatever WantSync says: this is
// the graceful shutdown), stops the log's goroutines, closes its files and
// releases the directory lock. Appends after Close get ErrClosed. Close
// must not be called from an Ack or from Rewrite.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	l.cond.Broadcast()
	l.mu.Unlock()
	kick(l.wakeWriter)
	<-l.writerDone
	close(l.stop)
	l.bg.Wait()
	l.closeFiles()
	l.mu.Lock()
	err := l.failed
	l.mu.Unlock()
	if cerr := l.lockF.Close(); err == nil {
		err = cerr
	}
	return err
}

func (l *Log) closeFiles() {
	l.mu.Lock()
	segs := l.segs
	l.mu.Unlock()
	for _, s := range segs {
		_ = s.closeFile(0, false)
	}
}

// failLocked makes the log refuse everything from now on: after a failed
// write or fsync nothing later can be promised durable (the kernel may
// have dropped the dirty pages, so retrying the fsync would lie).
func (l *Log) failLocked(err error) {
	if l.failed != nil {
		return
	}
	if !errors.Is(err, ErrFailed) {
		err = fmt.Errorf("%w: %v", ErrFailed, err)
	}
	l.failed = err
	l.cond.Broadcast()
	l.log.Error().Err(err).Msg("binlog: write failed; from now on every change is refused (INTERNAL_ERROR) and nothing unwritten is acknowledged; restart the server to recover from the log")
}

// kick wakes a goroutine waiting on a one-slot channel without blocking.
func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// sleepOrStop waits d, or less if the log is stopping.
func (l *Log) sleepOrStop(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.stop:
		return false
	}
}
