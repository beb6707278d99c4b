package persist

import (
	"github.com/beanpole/beanpole/record"

	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestDiskFull injects ENOSPC into preallocation. Puts start failing with
// ErrNoSpace (OUT_OF_MEMORY), the condition is logged once per episode, every delete of
// an inserted job still succeeds, and puts work again once space returns.
func TestDiskFull(t *testing.T) {
	defer func(d time.Duration) { growRetry = d }(growRetry)
	growRetry = 20 * time.Millisecond

	dir := t.TempDir()
	fs := &faultFS{}
	lb := &logBuf{}
	opts := Options{Dir: dir, SegmentSize: 1024, FS: fs}
	l, _, err := Open(opts, zerolog.New(lb))
	if err != nil {
		t.Fatal(err)
	}
	m := newModel(t, l)
	m.mustPut("t", 0, 0, []byte("before"))
	fs.setAllocErr(syscall.ENOSPC)

	var inserted []uint64
	failures := 0
	for i := 0; failures < 20; i++ {
		if i > 10000 {
			t.Fatal("puts never ran out of space")
		}
		id, err := m.put("t", 0, 0, []byte("0123456789abcdef"))
		if err != nil {
			if !errors.Is(err, ErrNoSpace) {
				t.Fatalf("put: %v, want ErrNoSpace", err)
			}
			failures++
			continue
		}
		inserted = append(inserted, id)
	}
	if len(inserted) == 0 {
		t.Fatal("no put succeeded before the disk filled")
	}
	// The condition is logged once per episode, never per put. A spare
	// the preallocator began before the disk filled may still be
	// installed, which ends the first episode: at most two.
	starts, ends := lb.count("cannot allocate a new segment"), lb.count("space available again")
	if starts != ends+1 || starts > 2 {
		t.Fatalf("disk-full condition logged %d times and its end %d times on a full disk, want once per episode", starts, ends)
	}
	if !l.Stats().DiskFull {
		t.Fatal("Stats.DiskFull not set")
	}
	// Deletes were paid for by their puts.
	for _, id := range inserted {
		if err := m.del(id); err != nil {
			t.Fatalf("delete %d on a full disk: %v", id, err)
		}
	}
	// Other updates may be refused, but only with ErrNoSpace.
	if err := m.bury(1, 3); err != nil && !errors.Is(err, ErrNoSpace) {
		t.Fatal(err)
	}

	fs.setAllocErr(nil)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := m.put("t", 0, 0, []byte("after")); err == nil {
			break
		} else if !errors.Is(err, ErrNoSpace) || time.Now().After(deadline) {
			t.Fatalf("put after space returned: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := lb.count("space available again"); n != ends+1 {
		t.Fatalf("recovery logged %d times, want once more than the %d before", n, ends)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, rec := mustOpen(t, Options{Dir: dir, SegmentSize: 1024})
	defer l.Close()
	m.check(rec)
}

// TestWriteError: a failed write fails the records it carried and disables
// the log (nothing later could be promised durable); the process keeps
// running, and a restart recovers everything acknowledged before it.
func TestWriteError(t *testing.T) {
	dir := t.TempDir()
	fs := &faultFS{}
	l, _ := mustOpen(t, Options{Dir: dir, SegmentSize: 4096, FS: fs})
	m := newModel(t, l)
	m.mustPut("t", 1, 0, []byte("kept"))
	fs.mu.Lock()
	fs.writeErr = syscall.EIO
	fs.mu.Unlock()
	if _, err := m.put("t", 2, 0, []byte("lost")); !errors.Is(err, ErrFailed) {
		t.Fatalf("put during EIO: %v, want ErrFailed", err)
	}
	// That id was never acknowledged to anyone, and never reached the disk.
	m.next--
	if err := l.Append(record.AppendDelete(nil, 1), nil); !errors.Is(err, ErrFailed) {
		t.Fatalf("Append after failure: %v, want ErrFailed", err)
	}
	if err := l.Close(); !errors.Is(err, ErrFailed) {
		t.Fatalf("Close: %v", err)
	}
	l, rec := mustOpen(t, Options{Dir: dir, SegmentSize: 4096})
	defer l.Close()
	m.check(rec)
}

func TestFsyncError(t *testing.T) {
	dir := t.TempDir()
	fs := &faultFS{}
	l, _ := mustOpen(t, Options{Dir: dir, WantSync: true, FS: fs})
	defer l.Close()
	m := newModel(t, l)
	m.mustPut("t", 1, 0, []byte("kept"))
	fs.mu.Lock()
	fs.syncErr = syscall.EIO
	fs.mu.Unlock()
	if _, err := m.put("t", 2, 0, []byte("x")); !errors.Is(err, ErrFailed) {
		t.Fatalf("put with failing fsync: %v, want ErrFailed", err)
	}
	if st := l.Stats(); st.Failed == nil {
		t.Fatal("Stats.Failed not set")
	}
}
