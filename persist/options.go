package persist

import (
	"fmt"
	"os"
	"time"
)

const (
	// DefaultSegmentSize is upstream's -s default.
	DefaultSegmentSize = 10 << 20
	// MinSegmentSize keeps a segment able to hold its header, its id mark
	// and a few records; smaller -s values are raised to it.
	MinSegmentSize = 512
	// DefaultCompactRatio is upstream's: compact when the bytes of closed
	// segments that no live job needs are at least twice the bytes it does.
	DefaultCompactRatio = 2
)

// Options configure a Log. The flags map onto them directly:
// -b DIR → Dir; -f MS → WantSync=true, SyncEvery=MS ms; -F → WantSync=false;
// -s BYTES → SegmentSize.
type Options struct {
	// Dir must already exist; it is not created (as upstream).
	Dir string

	// WantSync enables fsync. With SyncEvery == 0 every record is fsynced
	// before its done callback runs (group commit batches many records per
	// fsync). With SyncEvery > 0 records are acknowledged once written and a
	// timer fsyncs at most every SyncEvery, and at the latest SyncEvery
	// after any write, even if no further write comes.
	WantSync  bool
	SyncEvery time.Duration

	// SegmentSize is the size of each binlog.N file; 0 means
	// DefaultSegmentSize. A record larger than a segment gets a segment of
	// its own, sized to fit.
	SegmentSize int64

	// Rewrite is the compaction hook. The log calls it, from its own
	// compaction goroutine and without holding any of its locks, with ids
	// of live jobs whose full record pins an old segment. For each id that
	// still exists, Rewrite must queue a fresh full record (Log.Rewrite of
	// the job as it is now) before returning, in the same way and under the
	// same lock as the job's other records so that they stay in order; ids
	// that no longer exist are skipped. Errors (ErrNoSpace) may be ignored:
	// the log tries again later. nil disables compaction (segments are
	// still reclaimed once no live job needs them).
	Rewrite func(ids []uint64)

	// CompactRatio: compaction starts when the closed segments hold at least
	// CompactRatio bytes not needed by live jobs for each byte that is.
	// 0 means DefaultCompactRatio; negative disables compaction.
	CompactRatio float64

	// FS is the filesystem; nil means OSFS. Tests inject faults here.
	FS FS
}

func (o *Options) normalize() error {
	if o.Dir == "" {
		return fmt.Errorf("binlog: no directory given")
	}
	st, err := os.Stat(o.Dir)
	if err != nil {
		return fmt.Errorf("binlog: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("binlog: %s is not a directory", o.Dir)
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	if o.SegmentSize < MinSegmentSize {
		o.SegmentSize = MinSegmentSize
	}
	if o.SyncEvery < 0 {
		o.SyncEvery = 0
	}
	if o.CompactRatio == 0 {
		o.CompactRatio = DefaultCompactRatio
	}
	if o.FS == nil {
		o.FS = OSFS{}
	}
	return nil
}
