package persist

// Stats is a snapshot of the log for `stats` (the binlog-* keys) and for
// operators.
type Stats struct {
	// OldestIndex is the N of the oldest binlog.N kept (binlog-oldest-index).
	OldestIndex uint64
	// CurrentIndex is the N of the binlog.N being written
	// (binlog-current-index).
	CurrentIndex uint64
	// RecordsWritten counts records written since Open
	// (binlog-records-written); RecordsMigrated those of them that were
	// compaction rewrites (binlog-records-migrated).
	RecordsWritten, RecordsMigrated uint64
	// MaxSize is the segment size asked for with -s (binlog-max-size).
	MaxSize uint64

	Segments  int   // segment files, spares included
	DiskBytes int64 // their total size
	LiveJobs  int
	LiveBytes int64 // bytes of the live jobs' latest full records
	Fsyncs    uint64
	Batches   uint64 // group commits (write calls)
	// The time the group commits' writes and the fsyncs took, in all, and
	// the bytes written.
	WriteNanos, FsyncNanos, BytesWritten uint64
	DiskFull                             bool  // the last attempt to create a segment failed
	Failed                               error // non-nil once a write or fsync failed
}

// Stats returns the current statistics.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := Stats{
		RecordsWritten:  l.written.Load(),
		RecordsMigrated: l.migrated.Load(),
		MaxSize:         uint64(l.maxSize),
		Segments:        len(l.segs),
		LiveJobs:        len(l.pins),
		Fsyncs:          l.fsyncs.Load(),
		Batches:         l.batches.Load(),
		WriteNanos:      l.writeNanos.Load(),
		FsyncNanos:      l.fsyncNanos.Load(),
		BytesWritten:    l.bytesWritten.Load(),
		DiskFull:        l.space.full,
		Failed:          l.failed,
	}
	if len(l.segs) > 0 {
		st.OldestIndex = l.segs[0].seq
	}
	if l.cur >= 0 {
		st.CurrentIndex = l.segs[l.cur].seq
	} else if len(l.segs) > 0 {
		// Nothing written yet: the first record goes to the first spare,
		// which upstream already reports as current (1 and 1 at start).
		st.CurrentIndex = l.segs[0].seq
	}
	for _, s := range l.segs {
		st.DiskBytes += s.size
		st.LiveBytes += s.liveBytes
	}
	return st
}
