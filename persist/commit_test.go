package persist

import (
	"github.com/beanpole/beanpole/record"

	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSyncBeforeAck: with WantSync and SyncEvery 0 no done callback runs
// before an fsync has covered its write.
func TestSyncBeforeAck(t *testing.T) {
	fs := &faultFS{record: true}
	l, _ := mustOpen(t, Options{Dir: t.TempDir(), WantSync: true, FS: fs})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				id := uint64(g*1000 + i + 1)
				ch := make(chan error, 1)
				rec := record.AppendFull(nil, &record.Job{ID: id, Tube: "t", State: record.StateReady, Body: []byte("x")})
				if err := l.Append(rec, record.AckFunc(func(err error) { fs.event("done"); ch <- err })); err != nil {
					t.Error(err)
					return
				}
				if err := <-ch; err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	l.Close()
	synced := true
	for i, e := range fs.events {
		switch e {
		case "write":
			synced = false
		case "sync":
			synced = true
		case "done":
			if !synced {
				t.Fatalf("event %d: done before fsync: %v", i, fs.events[max(0, i-5):i+1])
			}
		}
	}
}

// TestTimerSync: with SyncEvery > 0 a record is acknowledged once written,
// and a timer fsyncs it within SyncEvery even though no further write
// comes (upstream only synced on the next write).
func TestTimerSync(t *testing.T) {
	fs := &faultFS{}
	every := 40 * time.Millisecond
	l, _ := mustOpen(t, Options{Dir: t.TempDir(), WantSync: true, SyncEvery: every, FS: fs})
	defer l.Close()
	m := newModel(t, l)
	opened := fs.syncs.Load()
	m.mustPut("t", 0, 0, []byte("first"))
	awaitSyncs(t, fs, opened+1) // the first record's fsync: the next write starts idle
	before := fs.syncs.Load()
	m.mustPut("t", 0, 0, []byte("second")) // acknowledged after write(2)...
	awaitSyncs(t, fs, before+1)            // ...and fsynced with no further write
	// A burst of writes costs one fsync per window, not one each: counted
	// over the windows the burst and its last fsync actually took.
	before = fs.syncs.Load()
	start := time.Now()
	for range 20 {
		m.mustPut("t", 0, 0, []byte("burst"))
	}
	awaitSyncs(t, fs, before+1)
	time.Sleep(2 * every) // a trailing fsync would come within one window
	windows := int64(time.Since(start)/every) + 1
	if n := fs.syncs.Load() - before; n > windows+1 {
		t.Fatalf("%d fsyncs for a burst of 20 writes over %d windows of %v", n, windows, every)
	}
}

// awaitSyncs waits until fs has seen n fsyncs. The timer that does them
// fires within SyncEvery; 10 s is for a loaded machine.
func awaitSyncs(t *testing.T, fs *faultFS, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for fs.syncs.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d fsyncs after 10 s, want %d", fs.syncs.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestNoSyncWithoutWantSync(t *testing.T) {
	fs := &faultFS{}
	l, _ := mustOpen(t, Options{Dir: t.TempDir(), SegmentSize: 1024, FS: fs})
	m := newModel(t, l)
	for range 50 {
		m.mustPut("t", 0, 0, []byte("payload payload"))
	}
	if n := fs.syncs.Load(); n != 0 {
		t.Fatalf("%d fsyncs with -F", n)
	}
	l.Close()
	if n := fs.syncs.Load(); n != 1 {
		t.Fatalf("Close did %d fsyncs, want 1", n)
	}
}

// TestConcurrentAppenders: many goroutines append at once (run it with
// -race); every record is acknowledged once, in a consistent log.
func TestConcurrentAppenders(t *testing.T) {
	dir := scratchDir(t)
	opts := Options{Dir: dir, WantSync: true, SegmentSize: 8192}
	l, _ := mustOpen(t, opts)
	const goroutines, each = 8, 150
	var acks atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			inflight := make(chan error, 4)
			pending := 0
			wait := func() {
				if err := <-inflight; err != nil {
					t.Error(err)
				}
				pending--
			}
			for i := range each {
				id := uint64(g*each + i + 1)
				buf = record.AppendFull(buf[:0], &record.Job{ID: id, Tube: "t", State: record.StateReady, Body: []byte("concurrent")})
				if pending == cap(inflight) {
					wait()
				}
				if err := l.Append(buf, record.AckFunc(func(err error) { acks.Add(1); inflight <- err })); err != nil {
					t.Error(err)
					return
				}
				pending++
				if i%2 == 1 {
					buf = record.AppendDelete(buf[:0], id-1)
					if pending == cap(inflight) {
						wait()
					}
					if err := l.Append(buf, record.AckFunc(func(err error) { acks.Add(1); inflight <- err })); err != nil {
						t.Error(err)
						return
					}
					pending++
				}
			}
			for pending > 0 {
				wait()
			}
		}()
	}
	wg.Wait()
	st := l.Stats()
	total := int64(goroutines * each * 3 / 2)
	if acks.Load() != total || st.RecordsWritten != uint64(total) {
		t.Fatalf("acks %d, written %d, want %d", acks.Load(), st.RecordsWritten, total)
	}
	t.Logf("%d records in %d writes, %d fsyncs", st.RecordsWritten, st.Batches, st.Fsyncs)
	l.Close()
	l, rec := mustOpen(t, opts)
	defer l.Close()
	if len(rec.Jobs) != goroutines*each/2 || rec.MaxID != goroutines*each {
		t.Fatalf("recovered %d jobs, max id %d", len(rec.Jobs), rec.MaxID)
	}
	for _, j := range rec.Jobs {
		if (j.ID-1)%each%2 != 1 {
			t.Fatalf("job %d should have been deleted", j.ID)
		}
	}
}

// BenchmarkGroupCommit: -f0 (fsync before every acknowledgement). With one
// appender every record pays a whole fsync; with many concurrent appenders
// (as many event loops and clients would be) group commit shares each
// fsync among all records that arrived meanwhile.
func BenchmarkGroupCommit(b *testing.B) {
	for _, appenders := range []int{1, 32} {
		b.Run(fmt.Sprintf("appenders=%d", appenders), func(b *testing.B) {
			l, _, err := Open(Options{Dir: b.TempDir(), WantSync: true, SyncEvery: 0}, testLogger(b))
			if err != nil {
				b.Fatal(err)
			}
			var next, left atomic.Int64
			left.Store(int64(b.N))
			body := make([]byte, 100)
			var wg sync.WaitGroup
			b.ResetTimer()
			for range appenders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var buf []byte
					ch := make(chan error, 1)
					done := record.AckFunc(func(err error) { ch <- err })
					for left.Add(-1) >= 0 {
						buf = record.AppendFull(buf[:0], &record.Job{ID: uint64(next.Add(1)), Tube: "default", State: record.StateReady, Body: body})
						if err := l.Append(buf, done); err != nil {
							b.Error(err)
							return
						}
						if err := <-ch; err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			st := l.Stats()
			b.ReportMetric(float64(st.RecordsWritten)/float64(max(st.Fsyncs, 1)), "records/fsync")
			l.Close()
		})
	}
}

// BenchmarkAppend measures the appender's hot path (-F: acknowledged after
// write(2)): a put and its delete per iteration, with pipelining.
func BenchmarkAppend(b *testing.B) {
	l, _, err := Open(Options{Dir: b.TempDir()}, testLogger(b))
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	done := record.AckFunc(func(error) { wg.Done() })
	job := &record.Job{Tube: "default", State: record.StateReady, Body: make([]byte, 100)}
	var buf []byte
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		job.ID = uint64(i + 1)
		buf = record.AppendFull(buf[:0], job)
		wg.Add(2)
		if err := l.Append(buf, done); err != nil {
			b.Fatal(err)
		}
		buf = record.AppendDelete(buf[:0], job.ID)
		if err := l.Append(buf, done); err != nil {
			b.Fatal(err)
		}
		if i%64 == 63 {
			wg.Wait()
		}
	}
	wg.Wait()
	b.StopTimer()
	st := l.Stats()
	b.ReportMetric(float64(st.RecordsWritten)/float64(max(st.Batches, 1)), "records/write")
	l.Close()
}
