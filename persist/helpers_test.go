package persist

import (
	"github.com/beanpole/beanpole/record"

	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/beanpole/beanpole/persist/internal/zeros"
	"github.com/rs/zerolog"
)

// faultFS wraps OSFS to inject failures and observe calls.
type faultFS struct {
	OSFS
	mu       sync.Mutex
	allocErr error // returned by Allocate while set
	writeErr error // returned by the next WriteAt (once)
	syncErr  error // returned by the next Sync (once)
	events   []string
	record   bool
	allocs   atomic.Int64
	syncs    atomic.Int64
}

func (f *faultFS) event(e string) {
	f.mu.Lock()
	if f.record {
		f.events = append(f.events, e)
	}
	f.mu.Unlock()
}

func (f *faultFS) setAllocErr(err error) { f.mu.Lock(); f.allocErr = err; f.mu.Unlock() }

func (f *faultFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	file, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f}, nil
}

type faultFile struct {
	File
	fs *faultFS
}

func (f *faultFile) Allocate(size int64) error {
	f.fs.mu.Lock()
	err := f.fs.allocErr
	f.fs.mu.Unlock()
	f.fs.allocs.Add(1)
	if err != nil {
		return err
	}
	return f.File.Allocate(size)
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	err := f.fs.writeErr
	f.fs.writeErr = nil
	f.fs.mu.Unlock()
	if err != nil {
		return 0, err
	}
	f.fs.event("write")
	return f.File.WriteAt(p, off)
}

func (f *faultFile) Sync() error {
	f.fs.mu.Lock()
	err := f.fs.syncErr
	f.fs.syncErr = nil
	f.fs.mu.Unlock()
	if err != nil {
		return err
	}
	f.fs.syncs.Add(1)
	f.fs.event("sync")
	return f.File.Sync()
}

// logBuf collects zerolog output for assertions.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *logBuf) Write(p []byte) (int, error) { w.mu.Lock(); defer w.mu.Unlock(); return w.b.Write(p) }
func (w *logBuf) count(s string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Count(w.b.Bytes(), []byte(s))
}

func testLogger(t testing.TB) zerolog.Logger {
	if t != nil && testing.Verbose() {
		return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
	}
	return zerolog.Nop()
}

func fastOpts(dir string) Options {
	return Options{Dir: dir, SegmentSize: 4096}
}

func mustOpen(t testing.TB, opts Options) (*Log, *Recovered) {
	t.Helper()
	l, rec, err := Open(opts, testLogger(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l, rec
}

// model is a minimal engine: it keeps the expected state of every job and
// logs each change the way the real engine must, appending under the same
// lock that guards the job.
type model struct {
	t     testing.TB
	mu    sync.Mutex
	l     *Log
	jobs  map[uint64]*record.Job
	next  uint64
	bseq  uint64
	clock int64
	wg    sync.WaitGroup
	errs  atomic.Int64
	async bool
	// hist keeps every state each job has been in, to check that recovery
	// never invents one.
	hist map[uint64][]record.Job
}

func newModel(t testing.TB, l *Log) *model {
	return &model{t: t, l: l, jobs: map[uint64]*record.Job{}, hist: map[uint64][]record.Job{}, clock: 1_700_000_000_000_000_000}
}

// adopt takes over a recovered state (after a restart).
func (m *model) adopt(l *Log, rec *Recovered) {
	m.l = l
	if rec.MaxID > m.next {
		m.next = rec.MaxID
	}
	for _, j := range rec.Jobs {
		m.bseq = max(m.bseq, j.BuriedSeq)
	}
}

func (m *model) snapshot(j *record.Job) {
	c := *j
	c.Body = slices.Clone(j.Body)
	m.hist[j.ID] = append(m.hist[j.ID], c)
}

// appendLocked logs rec while the caller holds m.mu, as the engine appends
// under the job's lock. If Append refuses the record (ErrNoSpace...) the
// change must not happen: the caller undoes it, as the engine answers
// OUT_OF_MEMORY. Otherwise, unless async, the caller waits on the result
// after unlocking, as the engine hops back to its event loop.
func (m *model) appendLocked(rec []byte) (wait func() error, err error) {
	if m.async {
		m.wg.Add(1)
		err := m.l.Append(rec, record.AckFunc(func(err error) {
			if err != nil {
				m.errs.Add(1)
			}
			m.wg.Done()
		}))
		if err != nil {
			m.wg.Done()
		}
		return func() error { return err }, err
	}
	ch := make(chan error, 1)
	if err := m.l.Append(rec, record.AckFunc(func(err error) { ch <- err })); err != nil {
		return func() error { return err }, err
	}
	return func() error { return <-ch }, nil
}

func (m *model) flush() {
	m.wg.Wait()
	if n := m.errs.Load(); n != 0 {
		m.t.Fatalf("%d appends failed", n)
	}
}

func (m *model) put(tube string, pri uint32, delay time.Duration, body []byte) (uint64, error) {
	m.mu.Lock()
	m.next++
	m.clock += 1000
	j := &record.Job{ID: m.next, Tube: tube, Pri: pri, State: record.StateReady, Delay: delay, TTR: time.Second,
		CreatedAt: m.clock, Body: slices.Clone(body)}
	if delay > 0 {
		j.State, j.Deadline = record.StateDelayed, m.clock+int64(delay)
	}
	wait, err := m.appendLocked(record.AppendFull(nil, j))
	if err != nil {
		m.mu.Unlock()
		return j.ID, err // the id is burned, as upstream
	}
	// The engine makes the job visible before it is durable (the reply
	// waits, not the job).
	m.jobs[j.ID] = j
	m.snapshot(j)
	m.mu.Unlock()
	if err := wait(); err != nil {
		m.mu.Lock()
		delete(m.jobs, j.ID)
		m.mu.Unlock()
		return j.ID, err
	}
	return j.ID, nil
}

func (m *model) mustPut(tube string, pri uint32, delay time.Duration, body []byte) uint64 {
	m.t.Helper()
	id, err := m.put(tube, pri, delay, body)
	if err != nil {
		m.t.Fatalf("put: %v", err)
	}
	return id
}

func (m *model) del(id uint64) error {
	m.mu.Lock()
	if m.jobs[id] == nil {
		m.mu.Unlock()
		return fmt.Errorf("no job %d", id)
	}
	delete(m.jobs, id) // deleted in memory even if the log fails, as upstream
	wait, _ := m.appendLocked(record.AppendDelete(nil, id))
	m.mu.Unlock()
	return wait()
}

func (m *model) bury(id uint64, pri uint32) error {
	m.mu.Lock()
	j := m.jobs[id]
	saved := *j
	j.Counters.Reserves++
	j.Counters.Buries++
	m.bseq++
	j.State, j.Pri, j.BuriedSeq, j.Deadline = record.StateBuried, pri, m.bseq, 0
	m.snapshot(j)
	wait, err := m.appendLocked(record.AppendBury(nil, id, pri, m.bseq, j.Counters))
	if err != nil {
		*j = saved
		m.hist[id] = m.hist[id][:len(m.hist[id])-1]
	}
	m.mu.Unlock()
	return wait()
}

func (m *model) kick(id uint64) error {
	m.mu.Lock()
	j := m.jobs[id]
	saved := *j
	j.Counters.Kicks++
	j.State, j.Deadline = record.StateReady, 0
	m.snapshot(j)
	wait, err := m.appendLocked(record.AppendKick(nil, id, j.Counters))
	if err != nil {
		*j = saved
		m.hist[id] = m.hist[id][:len(m.hist[id])-1]
	}
	m.mu.Unlock()
	return wait()
}

func (m *model) release(id uint64, pri uint32, delay time.Duration) error {
	m.mu.Lock()
	j := m.jobs[id]
	saved := *j
	j.Counters.Reserves++
	j.Counters.Releases++
	m.clock += 1000
	j.Pri, j.Delay, j.State, j.Deadline = pri, delay, record.StateReady, 0
	if delay > 0 {
		j.State, j.Deadline = record.StateDelayed, m.clock+int64(delay)
	}
	m.snapshot(j)
	wait, err := m.appendLocked(record.AppendRelease(nil, id, pri, delay, j.Deadline, j.Counters))
	if err != nil {
		*j = saved
		m.hist[id] = m.hist[id][:len(m.hist[id])-1]
	}
	m.mu.Unlock()
	return wait()
}

// rewrite is Options.Rewrite.
func (m *model) rewrite(ids []uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		if j := m.jobs[id]; j != nil {
			_ = m.l.Append(record.AppendFull(nil, j), nil)
		}
	}
}

// check compares recovered jobs with the model.
func (m *model) check(rec *Recovered) {
	m.t.Helper()
	want := make([]*record.Job, 0, len(m.jobs))
	for _, j := range m.jobs {
		want = append(want, j)
	}
	sort.Slice(want, func(a, b int) bool { return want[a].ID < want[b].ID })
	if len(rec.Jobs) != len(want) {
		m.t.Fatalf("recovered %d jobs, want %d (%v vs %v)", len(rec.Jobs), len(want), ids(rec.Jobs), ids(want))
	}
	for i, g := range rec.Jobs {
		if !sameJob(g, want[i]) {
			m.t.Fatalf("job %d:\n got %+v\nwant %+v", want[i].ID, *g, *want[i])
		}
	}
	if rec.MaxID < m.next {
		m.t.Fatalf("MaxID %d < highest id handed out %d", rec.MaxID, m.next)
	}
}

// historical reports whether j equals some state its job has been in.
func (m *model) historical(j *record.Job) bool {
	for i := range m.hist[j.ID] {
		if sameJob(j, &m.hist[j.ID][i]) {
			return true
		}
	}
	return false
}

func sameJob(a, b *record.Job) bool {
	ys := b.State
	if ys == record.StateReserved {
		ys = record.StateReady
	}
	return bytes.Equal(a.Body, b.Body) && a.ID == b.ID && a.Tube == b.Tube && a.Pri == b.Pri &&
		a.State == ys && a.Delay == b.Delay && a.TTR == b.TTR && a.CreatedAt == b.CreatedAt &&
		a.Deadline == b.Deadline && a.BuriedSeq == b.BuriedSeq && a.Counters == b.Counters
}

func ids(js []*record.Job) []uint64 {
	var out []uint64
	for _, j := range js {
		out = append(out, j.ID)
	}
	return out
}

func segFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "binlog.*"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range m {
		if _, ok := parseSegName(filepath.Base(p)); ok {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, _ := parseSegName(filepath.Base(out[i]))
		b, _ := parseSegName(filepath.Base(out[j]))
		return a < b
	})
	return out
}

// noSyncFS skips fsync: for tests that reopen a log thousands of times and
// check recovery logic, not durability.
type noSyncFS struct{ OSFS }

func (noSyncFS) SyncDir(string) error { return nil }
func (f noSyncFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	file, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return noSyncFile{file}, nil
}

type noSyncFile struct{ File }

func (noSyncFile) Sync() error { return nil }

// scratchDir is a temp dir for tests that rewrite a log thousands of
// times to check recovery logic: on tmpfs when there is one, since what
// they measure is not the disk.
func scratchDir(t testing.TB) string {
	t.Helper()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "persist-test-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

// copyDir copies the regular files of src into a fresh temp dir.
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	fillDir(t, src, dst)
	return dst
}

// fillDir empties dst and copies the regular files of src into it.
func fillDir(t testing.TB, src, dst string) {
	t.Helper()
	old, err := os.ReadDir(dst)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range old {
		if err := os.Remove(filepath.Join(dst, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// frames lists the frame offsets in a segment file (as written).
func frames(t testing.TB, path string) (offs []int64, ends []int64) {
	t.Helper()
	buf, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off := int64(segHeaderSize)
	for off+frameHeaderSize <= int64(len(buf)) {
		h, ok := parseFrameHeader(buf[off : off+frameHeaderSize])
		if !ok || zeros.All(buf[off:off+frameHeaderSize]) {
			break
		}
		offs = append(offs, off)
		off += frameHeaderSize + int64(h.n)
		ends = append(ends, off)
	}
	return offs, ends
}

// Append queues one record already encoded by package record's
// Append* functions, as the typed appenders (Put, Delete, ...) queue the
// records they encode, so tests can hand the log any kind of record, a
// rewrite (a full record of a live job) included, or bytes that are none
// (ErrBadRecord). rec is copied.
func (l *Log) Append(rec []byte, ack record.Ack) error {
	// Refuse what recovery would not accept.
	var r record.Record
	if err := record.Decode(rec, &r); err != nil {
		return err
	}
	if r.Kind == record.KindHighWater || r.ID == 0 {
		return fmt.Errorf("%w: %v record for job %d", ErrBadRecord, r.Kind, r.ID)
	}
	return l.place(rec, r.Kind, r.ID, ack)
}
