package persist

import (
	"testing"
	"time"
)

// TestCompactionBoundsDisk: one job stays alive (buried) while thousands
// of others come and go. Without compaction it pins every segment written
// since; with it the directory stays a handful of segments, and the job
// survives the moves and a restart intact.
func TestCompactionBoundsDisk(t *testing.T) {
	run := func(t *testing.T, opts Options, pairs int, compact bool) (maxFiles, settled int, m *model) {
		m = newModel(t, nil)
		if compact {
			opts.Rewrite = m.rewrite
		}
		l, _ := mustOpen(t, opts)
		m.l = l
		old := m.mustPut("t", 0, 0, []byte("I am old and stay"))
		m.bury(old, 5)
		for i := range pairs {
			id := m.mustPut("t", 1, 0, []byte("short-lived job body xxxxxxxxxxxxxxxxxxxxxxxx"))
			if err := m.del(id); err != nil {
				t.Fatal(err)
			}
			if i%100 == 99 && compact {
				// A quiescent point: the background compactor may trail
				// a tight loop by a sync interval or a scheduling delay;
				// a synchronous pass catches up. The bound must hold here.
				l.Compact()
				maxFiles = max(maxFiles, len(segFiles(t, opts.Dir)))
			}
		}
		if compact {
			// Once writes pause, compaction and reclaiming catch up.
			time.Sleep(10 * opts.SyncEvery)
			l.Compact()
			time.Sleep(10 * opts.SyncEvery)
		}
		settled = len(segFiles(t, opts.Dir))
		st := l.Stats()
		t.Logf("max %d files, settled at %d; "+"segments %d..%d on disk %d bytes, migrated %d, job in binlog.%d",
			maxFiles, settled, st.OldestIndex, st.CurrentIndex, st.DiskBytes, st.RecordsMigrated, l.FileOf(old))
		if compact && (st.RecordsMigrated == 0 || l.FileOf(old) <= 2) {
			t.Fatalf("the old job was never moved (migrated %d, file %d)", st.RecordsMigrated, l.FileOf(old))
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		opts.Rewrite = nil
		l, rec := mustOpen(t, opts)
		m.check(rec)
		if len(rec.Problems) != 0 {
			t.Fatalf("problems %v", rec.Problems)
		}
		l.Close()
		return maxFiles, settled, m
	}

	t.Run("without compaction the old job pins everything", func(t *testing.T) {
		_, n, _ := run(t, Options{Dir: t.TempDir(), SegmentSize: 1024, CompactRatio: -1}, 300, false)
		// (60 segments written, all kept.)
		if n < 30 {
			t.Fatalf("only %d segments: the test would not show anything", n)
		}
	})
	t.Run("compaction", func(t *testing.T) {
		most, settled, _ := run(t, Options{Dir: t.TempDir(), SegmentSize: 1024}, 3000, true)
		if most > 6 || settled > 4 {
			t.Fatalf("%d segment files at most, %d settled (of 600 written)", most, settled)
		}
	})
	t.Run("compaction with timer fsync", func(t *testing.T) {
		// The rewrite must be durable before the old segment goes, so
		// the compactor and reclaiming wait for the timer's fsync: under a
		// tight loop they trail by about one sync interval of writes.
		most, settled, _ := run(t, Options{Dir: scratchDir(t), SegmentSize: 1024, WantSync: true, SyncEvery: time.Millisecond}, 1500, true)
		if most > 6 || settled > 4 {
			t.Fatalf("%d segment files at most, %d settled (of 300 written)", most, settled)
		}
	})
}

// TestCompactLiveData: when most data is live, compaction leaves it alone.
func TestCompactLiveData(t *testing.T) {
	m := newModel(t, nil)
	rewrites := 0
	opts := Options{Dir: t.TempDir(), SegmentSize: 1024, Rewrite: func(ids []uint64) { rewrites += len(ids); m.rewrite(ids) }}
	l, _ := mustOpen(t, opts)
	m.l = l
	for range 200 {
		m.mustPut("t", 0, 0, []byte("everything stays alive"))
	}
	l.Compact()
	l.Close()
	if rewrites != 0 {
		t.Fatalf("%d rewrites of live data with nothing to reclaim", rewrites)
	}
}
