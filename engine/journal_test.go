package engine

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/beanpole/beanpole/codec"
	"github.com/beanpole/beanpole/record"
)

// fakeJournal is a log whose acknowledgements the test hands out: it keeps
// every record's kind, id and ack until ackNext (or an async acker) tells
// the ack how it ended. refuse makes the next appends fail at once.
type fakeJournal struct {
	mu      sync.Mutex
	recs    []fakeRecord
	acked   int
	refuse  error
	rewrote []uint64
}

type fakeRecord struct {
	kind string
	id   uint64
	ack  record.Ack
}

func (f *fakeJournal) add(kind string, id uint64, ack record.Ack) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse != nil {
		return f.refuse
	}
	f.recs = append(f.recs, fakeRecord{kind, id, ack})
	return nil
}

func (f *fakeJournal) Put(j *record.Job, ack record.Ack) error { return f.add("put", j.ID, ack) }
func (f *fakeJournal) Delete(id uint64, ack record.Ack) error  { return f.add("delete", id, ack) }
func (f *fakeJournal) Release(id uint64, _ uint32, _ time.Duration, _ int64, _ record.Counters, ack record.Ack) error {
	return f.add("release", id, ack)
}
func (f *fakeJournal) Bury(id uint64, _ uint32, _ uint64, _ record.Counters, ack record.Ack) error {
	return f.add("bury", id, ack)
}
func (f *fakeJournal) Kick(id uint64, _ record.Counters, ack record.Ack) error {
	return f.add("kick", id, ack)
}
func (f *fakeJournal) Rewrite(j *record.Job) error {
	f.mu.Lock()
	f.rewrote = append(f.rewrote, j.ID)
	f.mu.Unlock()
	return nil
}
func (f *fakeJournal) FileOf(uint64) uint64 { return 1 }

// ackNext acknowledges the n oldest unacknowledged records with err, in
// order, as the log's writer would.
func (f *fakeJournal) ackNext(n int, err error) {
	f.mu.Lock()
	recs := f.recs[f.acked : f.acked+n]
	f.acked += n
	f.mu.Unlock()
	for _, r := range recs {
		if r.ack != nil {
			r.ack.Durable(err)
		}
	}
}

func (f *fakeJournal) unacked() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.recs) - f.acked
}

func newJournaled(loops int) (*Engine, *fakeJournal) {
	e := New(loops)
	f := &fakeJournal{}
	e.SetJournal(f)
	return e, f
}

func readyCount(e *Engine) uint64 {
	var st codec.ServerStats
	e.Stats(&st)
	return st.CurrentJobsReady
}

func TestJournaledPutIsInvisibleUntilDurable(t *testing.T) {
	e, f := newJournaled(2)
	p, pch := newTestClient(e, 1)
	w, wch := newTestClient(e, 2)
	if _, o := w.Reserve(w.e.Now(), -1); o != Parked {
		t.Fatal("the worker should park: nothing is ready")
	}
	j := put(t, p, 0, 0, "x")
	if e.Peek(j.ID) != nil || p.PeekReady() != nil || readyCount(e) != 0 {
		t.Fatal("a put whose record is not durable is visible")
	}
	select {
	case <-wch:
		t.Fatal("a parked reserver was handed a job whose record is not durable")
	default:
	}
	if a, k, _ := p.Durability(); a != 1 || k != 0 {
		t.Fatalf("durability %d appended, %d acked; want 1, 0", a, k)
	}
	if !p.WakeWhenAcked(1) {
		t.Fatal("WakeWhenAcked(1) before the ack should wait")
	}
	f.ackNext(1, nil)
	<-wch // the worker is served by the publication
	got, o := w.TakeWakeup()
	if o != GotJob || got != j {
		t.Fatalf("worker got %v %v, want job %d", got, o, j.ID)
	}
	select {
	case <-pch: // the putter asked to be woken at seq 1
	default:
		t.Fatal("the putter was not woken by its ack")
	}
	if a, k, failed := p.Durability(); a != 1 || k != 1 || failed != 0 {
		t.Fatalf("durability %d/%d/%d, want 1/1/0", a, k, failed)
	}
}

func TestFailedPutIsNeverPublishedAndTheLogRefusesChanges(t *testing.T) {
	e, f := newJournaled(1)
	c, _ := newTestClient(e, 1)
	j1 := put(t, c, 0, 0, "kept")
	f.ackNext(1, nil)
	j2 := put(t, c, 0, 0, "lost")
	f.ackNext(1, errors.New("EIO"))
	if e.Peek(j2.ID) != nil {
		t.Fatal("a put whose record failed was published")
	}
	if _, _, failed := c.Durability(); failed != 2 {
		t.Fatalf("failedAt %d, want 2 (the second record)", failed)
	}
	if e.LogFailure() == "" {
		t.Fatal("the failure is not reported")
	}
	// From now on the log refuses everything, as persist does after a
	// failed write: nothing may change.
	f.refuse = errors.New("binlog: write failed")
	if _, err := c.Put(e.Now(), e.NextID(), 0, 0, time.Second, []byte("x\r\n")); !errors.Is(err, ErrLogFailed) {
		t.Fatalf("put after the failure: %v, want ErrLogFailed", err)
	}
	if ok, err := c.Delete(c.e.Now(), j1.ID); !ok || !errors.Is(err, ErrLogFailed) {
		t.Fatalf("delete after the failure: %v %v, want true, ErrLogFailed", ok, err)
	}
	if e.Peek(j1.ID) == nil {
		t.Fatal("a delete the log refused deleted the job")
	}
}

func TestFullDiskRefusesPutWithNoRoom(t *testing.T) {
	e, f := newJournaled(1)
	c, _ := newTestClient(e, 1)
	f.refuse = record.ErrNoSpace
	if _, err := c.Put(e.Now(), e.NextID(), 0, 0, time.Second, []byte("x\r\n")); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("put on a full disk: %v, want ErrNoRoom", err)
	}
	if a, _, _ := c.Durability(); a != 0 {
		t.Fatalf("%d records counted as appended after a refusal", a)
	}
	if e.LogFailure() != "" {
		t.Fatal("a full disk is reported as a failed log")
	}
}

func TestRefusedChangesLeaveTheJobAsItWas(t *testing.T) {
	e, f := newJournaled(1)
	c, _ := newTestClient(e, 1)
	j := put(t, c, 5, 0, "x")
	f.ackNext(1, nil)
	if got, o := c.Reserve(c.e.Now(), 0); o != GotJob || got != j {
		t.Fatal("reserve")
	}
	f.refuse = record.ErrNoSpace
	if ok, err := c.Release(j.ID, 1, 0); !ok || !errors.Is(err, ErrNoRoom) {
		t.Fatalf("release: %v %v", ok, err)
	}
	if ok, err := c.Bury(j.ID, 1); !ok || !errors.Is(err, ErrNoRoom) {
		t.Fatalf("bury: %v %v", ok, err)
	}
	if j.State() != Reserved || j.Pri != 5 {
		t.Fatalf("job is %v pri %d after refused changes, want reserved pri 5", j.State(), j.Pri)
	}
	f.refuse = nil
	if ok, err := c.Bury(j.ID, 1); !ok || err != nil {
		t.Fatal("bury")
	}
	f.refuse = errors.New("binlog: write failed")
	if k, err := c.Kick(10); k != 0 || !errors.Is(err, ErrLogFailed) {
		t.Fatalf("kick: %d %v, want 0, ErrLogFailed", k, err)
	}
	if j.State() != Buried {
		t.Fatalf("job is %v after a refused kick", j.State())
	}
}

func TestWakeWhenAckedWakesOnceAtItsSeq(t *testing.T) {
	e, f := newJournaled(1)
	c, ch := newTestClient(e, 1)
	for range 3 {
		put(t, c, 0, 0, "x")
	}
	if !c.WakeWhenAcked(2) {
		t.Fatal("seq 2 is not acknowledged yet")
	}
	f.ackNext(1, nil)
	select {
	case <-ch:
		t.Fatal("woken at seq 1 for a request at seq 2")
	default:
	}
	f.ackNext(2, nil)
	if len(ch) != 1 {
		t.Fatalf("%d wake-ups for one request, want 1", len(ch))
	}
	if c.WakeWhenAcked(3) {
		t.Fatal("seq 3 is acknowledged: no wake-up should be needed")
	}
}

func TestRewriteAppendsLiveJobsOnly(t *testing.T) {
	e, f := newJournaled(1)
	c, _ := newTestClient(e, 1)
	a, b := put(t, c, 0, 0, "a"), put(t, c, 0, 0, "b")
	f.ackNext(2, nil)
	if ok, _ := c.Delete(c.e.Now(), a.ID); !ok {
		t.Fatal("delete")
	}
	f.ackNext(1, nil)
	e.Rewrite([]uint64{a.ID, b.ID, 999})
	if len(f.rewrote) != 1 || f.rewrote[0] != b.ID {
		t.Fatalf("rewrote %v, want [%d]", f.rewrote, b.ID)
	}
}

// TestParkedReserveNeverSeesAClaimWithoutItsJob is the -b crash: a put
// published from the log's writer claims a parked waiter while the
// waiter's loop, woken for its own records, looks at its wait. The loop
// must see either "still waiting" or the job, never a claim without it.
// Run under -race, it also checks that the job is handed over safely.
func TestParkedReserveNeverSeesAClaimWithoutItsJob(t *testing.T) {
	e, f := newJournaled(2)
	var stop atomic.Bool
	var acker sync.WaitGroup
	acker.Add(1)
	go func() { // the log's writer: acknowledges whatever is queued
		defer acker.Done()
		for !stop.Load() {
			if n := f.unacked(); n > 0 {
				f.ackNext(n, nil)
			}
		}
		if n := f.unacked(); n > 0 {
			f.ackNext(n, nil)
		}
	}()
	p, _ := newTestClient(e, 2)
	w, wch := newTestClient(e, 1)
	for range 3000 {
		if _, o := w.Reserve(w.e.Now(), -1); o != Parked {
			t.Fatal("the worker should park")
		}
		put(t, p, 0, 0, "y")
		for {
			select {
			case <-wch: // the put's claim, or the ack of w's last delete
			case <-time.After(5 * time.Second):
				stop.Store(true)
				acker.Wait()
				t.Fatal("the parked worker was never woken with its job")
			}
			j, o := w.TakeWakeup()
			if o == Parked {
				continue
			}
			if o != GotJob || j == nil {
				stop.Store(true)
				acker.Wait()
				t.Fatalf("wake-up answered %v with job %v", o, j)
			}
			// As the loop does: delete it, and ask to be woken when the
			// delete is durable, while the next reserve waits.
			if ok, _ := w.Delete(w.e.Now(), j.ID); !ok {
				t.Fatal("delete")
			}
			a, _, _ := w.Durability()
			w.WakeWhenAcked(a)
			break
		}
	}
	stop.Store(true)
	acker.Wait()
}

// TestCrossTubeReserveTakesTheBestJob: a reserve watching two tubes must
// take the most urgent ready job across both, even while other reserves
// empty one of them: it must never end up with a worse job while a
// better one stays ready in the other tube (it compared the tubes one lock
// at a time, then took whatever the chosen tube's top had become). The
// race detector's scheduling makes the old bug show within 3,000 rounds.
func TestCrossTubeReserveTakesTheBestJob(t *testing.T) {
	e := New(4)
	ta, tb := []byte("ta"), []byte("tb")
	p, _ := newTestClient(e, 1)
	w, _ := newTestClient(e, 2)
	w.Watch(ta)
	w.Watch(tb)
	w.Ignore([]byte("default"))
	xs := make([]*Client, 3)
	for i := range xs {
		xs[i], _ = newTestClient(e, 3)
		xs[i].Watch(ta)
		xs[i].Ignore([]byte("default"))
	}
	for round := range 3000 {
		p.Use(ta)
		for range 3 {
			put(t, p, 0, 0, "a0")
		}
		worse := put(t, p, 1, 0, "a1")
		p.Use(tb)
		put(t, p, 0, 0, "b0")
		var wg sync.WaitGroup
		var got *Job
		for _, x := range xs {
			wg.Add(1)
			go func() { defer wg.Done(); x.Reserve(x.e.Now(), 0) }()
		}
		wg.Add(1)
		go func() { defer wg.Done(); got, _ = w.Reserve(w.e.Now(), 0) }()
		wg.Wait()
		if got == worse {
			t.Fatalf("round %d: the reserve watching both tubes took the pri-1 job while tb held a pri-0 one", round)
		}
		// Clean up: delete every job, whoever holds it.
		for _, c := range append(xs, w, p) {
			for {
				c.mu.Lock()
				j := c.reserved
				c.mu.Unlock()
				if j == nil {
					break
				}
				c.Delete(c.e.Now(), j.ID)
			}
		}
		for _, name := range [][]byte{ta, tb} {
			p.Use(name)
			for j := p.PeekReady(); j != nil; j = p.PeekReady() {
				p.Delete(p.e.Now(), j.ID)
			}
		}
	}
}

// deadlineJournal keeps the wall-clock deadline of each put's record.
type deadlineJournal struct {
	fakeJournal
	deadlines []int64
}

func (d *deadlineJournal) Put(j *record.Job, ack record.Ack) error {
	d.deadlines = append(d.deadlines, j.Deadline)
	return d.fakeJournal.Put(j, ack)
}

// A record's wall-clock deadline is the engine's wall clock (the host's
// wall clock when the engine started, plus monotonic time since) plus the
// delay, and the wall offset moves it by exactly the offset: what a node
// whose clock is off stamps in the records others replay. The engine runs
// on a clock the test drives, so the deadline is exact and a step of the
// host's wall clock while the test runs cannot move it.
func TestWallOffsetMovesRecordedDeadlinesByTheOffset(t *testing.T) {
	const delay, elapsed = time.Minute, 3 * time.Second
	for _, off := range []time.Duration{0, time.Hour, -time.Hour} {
		e, mc := newManualEngine(1)
		e.SetWallOffset(off)
		d := &deadlineJournal{}
		e.SetJournal(d)
		c, _ := newTestClient(e, 1)
		mc.Advance(elapsed)
		put(t, c, 0, delay, "x")
		want := e.base.UnixNano() + int64(elapsed+delay+off)
		if got := d.deadlines[0]; got != want {
			t.Fatalf("offset %v: deadline %d, want %d (%v off)", off, got, want, time.Duration(got-want))
		}
	}
}

// releaseJournal is a fakeJournal that also keeps what each release record
// says.
type releaseJournal struct {
	*fakeJournal
	releases []releaseRecord
}

type releaseRecord struct {
	id       uint64
	pri      uint32
	delay    time.Duration
	deadline int64
	cnt      record.Counters
}

func (r *releaseJournal) Release(id uint64, pri uint32, delay time.Duration, deadline int64, c record.Counters, ack record.Ack) error {
	r.releases = append(r.releases, releaseRecord{id, pri, delay, deadline, c})
	return r.fakeJournal.Release(id, pri, delay, deadline, c, ack)
}

// Unreserve gives a job back to ready with its priority, serving a waiting
// reserver, and counts no release: not in the job, not in its record,
// which is what a release with the job's priority and no delay writes.
func TestUnreserveCountsNeitherTheReserveNorARelease(t *testing.T) {
	e := New(1)
	rj := &releaseJournal{fakeJournal: &fakeJournal{}}
	e.SetJournal(rj)
	c, _ := newTestClient(e, 1)
	other, _ := newTestClient(e, 1)
	j := put(t, c, 7, 0, "x")
	rj.ackNext(1, nil)
	if got, o := c.Reserve(e.Now(), 0); o != GotJob || got != j {
		t.Fatalf("reserve: %v %v", got, o)
	}
	if ok, err := other.Unreserve(j.ID); ok || err != nil {
		t.Fatalf("another client's Unreserve = %v, %v; want false, nil", ok, err)
	}
	if ok, err := c.Unreserve(j.ID + 1); ok || err != nil {
		t.Fatalf("Unreserve of a job nobody holds = %v, %v; want false, nil", ok, err)
	}
	if ok, err := c.Unreserve(j.ID); !ok || err != nil {
		t.Fatalf("Unreserve = %v, %v", ok, err)
	}
	want := releaseRecord{id: j.ID, pri: 7, cnt: record.Counters{}}
	if len(rj.releases) != 1 || rj.releases[0] != want {
		t.Fatalf("records %+v, want one release %+v", rj.releases, want)
	}
	var st codec.JobStats
	if !e.StatsJob(j.ID, &st) || st.State != "ready" || st.Releases != 0 || st.Reserves != 0 || st.Pri != 7 {
		t.Fatalf("stats-job after Unreserve: %+v", st)
	}
	if ok, _ := c.Unreserve(j.ID); ok {
		t.Fatal("a second Unreserve found the job reserved")
	}

	// A release of the same job counts one, in the job and in its record:
	// the two share their code, not their counting.
	w, wch := newTestClient(e, 1)
	if _, o := w.Reserve(e.Now(), -1); o != GotJob {
		t.Fatal("the unreserved job is not ready")
	}
	if ok, err := w.Release(j.ID, 7, 0); !ok || err != nil {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	if !e.StatsJob(j.ID, &st) || st.Releases != 1 || rj.releases[1].cnt.Releases != 1 {
		t.Fatalf("after a release: stats %+v, record %+v", st, rj.releases[1])
	}

	// A reserver that waits is served by an Unreserve.
	if _, o := c.Reserve(e.Now(), 0); o != GotJob {
		t.Fatal("reserve again")
	}
	if _, o := w.Reserve(e.Now(), -1); o != Parked {
		t.Fatal("the worker should park")
	}
	if ok, _ := c.Unreserve(j.ID); !ok {
		t.Fatal("Unreserve of the job reserved again")
	}
	<-wch
	if got, o := w.TakeWakeup(); o != GotJob || got != j {
		t.Fatalf("waiting worker got %v %v", got, o)
	}
}
