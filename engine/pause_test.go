package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/beanpole/beanpole/codec"
	"github.com/beanpole/beanpole/record"
)

// pauseJournal is a fakeJournal that logs pauses too, as the cluster's.
type pauseJournal struct {
	fakeJournal
	pauses []record.Pause
}

func (f *pauseJournal) Pause(p *record.Pause, ack record.Ack) error {
	if err := f.add("pause", 0, ack); err != nil {
		return err
	}
	f.mu.Lock()
	f.pauses = append(f.pauses, *p)
	f.mu.Unlock()
	return nil
}

// tubeFound is stats-tube of name, and whether the tube exists.
func tubeFound(e *Engine, name string) (codec.TubeStats, bool) {
	var st codec.TubeStats
	ok := e.StatsTube([]byte(name), &st)
	return st, ok
}

// TestPauseTubeIsJournaled: with a journal that logs pauses, pause-tube
// logs the tube, the delay and the pause's wall-clock end, and the reply
// waits for it like any change's; a refused record pauses nothing; when
// a paused tube is freed, its pause's end is logged, with nobody waiting.
func TestPauseTubeIsJournaled(t *testing.T) {
	e, mc := newManualEngine(1)
	f := &pauseJournal{}
	e.SetJournal(f)
	c, _ := newTestClient(e, 1)
	if !c.Use([]byte("p")) {
		t.Fatal("use p")
	}
	mc.Advance(3 * time.Second)
	if ok, err := c.PauseTube([]byte("p"), time.Minute); !ok || err != nil {
		t.Fatalf("pause-tube: %v %v", ok, err)
	}
	want := record.Pause{Tube: "p", Delay: time.Minute, Until: e.wall(int64(3*time.Second + time.Minute))}
	if len(f.pauses) != 1 || f.pauses[0] != want {
		t.Fatalf("logged %+v, want %+v", f.pauses, want)
	}
	if a, k, _ := c.Durability(); a != 1 || k != 0 {
		t.Fatalf("durability %d appended, %d acked; want 1, 0 (the reply waits for the record)", a, k)
	}
	f.ackNext(1, nil)

	if ok, err := c.PauseTube([]byte("p"), 0); !ok || err != nil {
		t.Fatalf("unpause: %v %v", ok, err)
	}
	if got := f.pauses[1]; got != (record.Pause{Tube: "p"}) {
		t.Fatalf("unpause logged %+v", got)
	}
	f.ackNext(1, nil)

	f.refuse = errors.New("not the leader")
	if ok, err := c.PauseTube([]byte("p"), time.Hour); !ok || !errors.Is(err, ErrLogFailed) {
		t.Fatalf("a refused pause: %v %v", ok, err)
	}
	if st, _ := tubeFound(e, "p"); st.Pause != 0 || st.CmdPauseTube != 2 {
		t.Fatalf("a refused pause changed the tube: pause %d, cmd-pause-tube %d", st.Pause, st.CmdPauseTube)
	}
	f.refuse = nil

	if ok, err := c.PauseTube([]byte("p"), time.Hour); !ok || err != nil {
		t.Fatalf("pause-tube: %v %v", ok, err)
	}
	f.ackNext(1, nil)
	c.Use([]byte("default")) // p has no job and no client left: it goes
	if _, ok := tubeFound(e, "p"); ok {
		t.Fatal("p outlived its last client")
	}
	if n := len(f.pauses); n != 4 || f.pauses[3] != (record.Pause{Tube: "p"}) {
		t.Fatalf("freeing a paused tube logged %+v, want its pause's end last", f.pauses)
	}
	if f.recs[len(f.recs)-1].ack != nil {
		t.Fatal("the end of a freed tube's pause has an ack: nobody waits for it")
	}
	f.ackNext(1, nil)
}

// TestRestorePauses: a new leader pauses each tube for what is left of its
// pause on its own wall clock, makes a paused tube that has no job, frees
// it once the pause ends, and drops a pause whose end has passed.
func TestRestorePauses(t *testing.T) {
	e, mc := newManualEngine(1)
	e.Restore([]*record.Job{{ID: 7, Tube: "jobs", State: record.StateReady, TTR: time.Second, Body: []byte("x\r\n")}}, 7)
	now := e.wall(0)
	e.RestorePauses([]record.Pause{
		{Tube: "jobs", Delay: time.Minute, Until: now + int64(10*time.Second)},
		{Tube: "empty", Delay: time.Hour, Until: now + int64(20*time.Second)},
		{Tube: "over", Delay: time.Second, Until: now},
	})
	if st, ok := tubeFound(e, "jobs"); !ok || st.Pause != 60 || st.PauseTimeLeft != 10 {
		t.Fatalf("jobs: pause %d, pause-time-left %d; want 60, 10", st.Pause, st.PauseTimeLeft)
	}
	if st, ok := tubeFound(e, "empty"); !ok || st.Pause != 3600 || st.PauseTimeLeft != 20 {
		t.Fatalf("empty: pause %d, pause-time-left %d (found %v); want 3600, 20", st.Pause, st.PauseTimeLeft, ok)
	}
	if _, ok := tubeFound(e, "over"); ok {
		t.Fatal("a pause whose end has passed made its tube")
	}
	w, _ := newTestClient(e, 1)
	w.Watch([]byte("jobs"))
	w.Ignore([]byte("default"))
	if _, o := w.Reserve(e.Now(), 0); o == GotJob {
		t.Fatal("a reserve got a job of a paused tube")
	}
	mc.Advance(10 * time.Second)
	if j, o := w.Reserve(e.Now(), 0); o != GotJob || j.ID != 7 {
		t.Fatalf("after the pause: %v %v, want job 7", j, o)
	}
	mc.Advance(10 * time.Second)
	if _, ok := tubeFound(e, "empty"); ok {
		t.Fatal("a tube made for a pause alone outlived it")
	}
}
