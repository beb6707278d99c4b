package e2e

// End to end through the real Go client, github.com/beanstalkd/go-beanstalk
// v0.2.0: an existing client must work unchanged.

import (
	"errors"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/beanstalkd/go-beanstalk"
)

func dialClient(t *testing.T, s *server) *beanstalk.Conn {
	t.Helper()
	c, err := beanstalk.DialTimeout(s.network, s.addr, defaultTimeout)
	if err != nil {
		t.Fatalf("beanstalk.Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
	var ce beanstalk.ConnError
	if !errors.As(err, &ce) {
		t.Fatalf("%s: %v is not a beanstalk.ConnError", what, err)
	}
}

func TestGoBeanstalkLifecycle(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := dialClient(t, s)

	id, err := c.Put([]byte("hello"), 10, 0, 30*time.Second)
	must(t, err)
	if id != 1 {
		t.Fatalf("first id %d", id)
	}
	body, err := c.Peek(id)
	must(t, err)
	if string(body) != "hello" {
		t.Fatalf("peek: %q", body)
	}
	rid, body, err := c.Reserve(time.Second)
	must(t, err)
	if rid != id || string(body) != "hello" {
		t.Fatalf("reserve: %d %q", rid, body)
	}
	must(t, c.Touch(id))
	sj, err := c.StatsJob(id)
	must(t, err)
	if sj["state"] != "reserved" || unquote(sj["tube"]) != "default" || sj["pri"] != "10" || sj["ttr"] != "30" || sj["reserves"] != "1" {
		t.Fatalf("stats-job: %v", sj)
	}
	if sj["tube"] != q("default") {
		t.Fatalf("tube value on the wire: %s, want %s", sj["tube"], q("default"))
	}
	must(t, c.Release(id, 20, 0))
	rid, _, err = c.Reserve(time.Second)
	must(t, err)
	if rid != id {
		t.Fatalf("reserve after release: %d", rid)
	}
	must(t, c.Bury(id, 30))
	bid, body, err := c.PeekBuried()
	must(t, err)
	if bid != id || string(body) != "hello" {
		t.Fatalf("peek-buried: %d %q", bid, body)
	}
	n, err := c.Kick(10)
	must(t, err)
	if n != 1 {
		t.Fatalf("kick: %d", n)
	}
	rid, body, err = c.PeekReady()
	must(t, err)
	if rid != id {
		t.Fatalf("peek-ready: %d %q", rid, body)
	}
	body, err = c.ReserveJob(id)
	must(t, err)
	if string(body) != "hello" {
		t.Fatalf("reserve-job: %q", body)
	}
	must(t, c.Bury(id, 0))
	must(t, c.KickJob(id))
	must(t, c.Delete(id))
	wantErr(t, "delete again", c.Delete(id), beanstalk.ErrNotFound)

	did, err := c.Put([]byte("later"), 0, 100*time.Second, time.Minute)
	must(t, err)
	pid, body, err := c.PeekDelayed()
	must(t, err)
	if pid != did || string(body) != "later" {
		t.Fatalf("peek-delayed: %d %q", pid, body)
	}
	must(t, c.KickJob(did))
	must(t, c.Delete(did))

	st, err := c.Stats()
	must(t, err)
	if st["cmd-put"] != "2" || st["cmd-delete"] != "3" || st["current-connections"] != "1" || st["total-jobs"] != "2" {
		t.Fatalf("stats: cmd-put %s cmd-delete %s current-connections %s total-jobs %s",
			st["cmd-put"], st["cmd-delete"], st["current-connections"], st["total-jobs"])
	}
	tubes, err := c.ListTubes()
	must(t, err)
	if !slices.Equal(tubes, []string{"default"}) {
		t.Fatalf("list-tubes: %v", tubes)
	}
}

func TestGoBeanstalkErrors(t *testing.T) {
	t.Parallel()
	s := startServer(t, "-z", "100")
	c := dialClient(t, s)

	_, _, err := c.Reserve(0)
	wantErr(t, "reserve on an empty tube", err, beanstalk.ErrTimeout)
	wantErr(t, "delete", c.Delete(42), beanstalk.ErrNotFound)
	wantErr(t, "release", c.Release(42, 0, 0), beanstalk.ErrNotFound)
	wantErr(t, "bury", c.Bury(42, 0), beanstalk.ErrNotFound)
	wantErr(t, "touch", c.Touch(42), beanstalk.ErrNotFound)
	wantErr(t, "kick-job", c.KickJob(42), beanstalk.ErrNotFound)
	_, err = c.Peek(42)
	wantErr(t, "peek", err, beanstalk.ErrNotFound)
	_, err = c.ReserveJob(42)
	wantErr(t, "reserve-job", err, beanstalk.ErrNotFound)
	_, err = c.StatsJob(42)
	wantErr(t, "stats-job", err, beanstalk.ErrNotFound)
	_, _, err = c.PeekReady()
	wantErr(t, "peek-ready", err, beanstalk.ErrNotFound)
	_, _, err = c.PeekDelayed()
	wantErr(t, "peek-delayed", err, beanstalk.ErrNotFound)
	_, _, err = c.PeekBuried()
	wantErr(t, "peek-buried", err, beanstalk.ErrNotFound)
	_, err = beanstalk.NewTube(c, "nosuch").Stats()
	wantErr(t, "stats-tube", err, beanstalk.ErrNotFound)
	wantErr(t, "pause-tube", beanstalk.NewTube(c, "nosuch").Pause(time.Second), beanstalk.ErrNotFound)
	_, err = c.Put(make([]byte, 101), 0, 0, time.Minute)
	wantErr(t, "put over -z", err, beanstalk.ErrJobTooBig)

	// DEADLINE_SOON: a job with ttr 1 is inside its safety margin at once.
	id, err := c.Put([]byte("x"), 0, 0, time.Second)
	must(t, err)
	rid, _, err := c.Reserve(time.Second)
	must(t, err)
	if rid != id {
		t.Fatalf("reserve: %d", rid)
	}
	_, _, err = c.Reserve(5 * time.Second)
	wantErr(t, "reserve inside the margin", err, beanstalk.ErrDeadline)
	must(t, c.Delete(id))

	// Drain mode.
	s.signal(t, syscall.SIGUSR1)
	waitFor(t, defaultTimeout, "draining", func() bool {
		st, err := c.Stats()
		return err == nil && st["draining"] == "true"
	})
	_, err = c.Put([]byte("y"), 0, 0, time.Minute)
	wantErr(t, "put while draining", err, beanstalk.ErrDraining)
}

func TestGoBeanstalkTubesAndTubeSet(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := dialClient(t, s)
	worker := dialClient(t, s)

	emails := beanstalk.NewTube(c, "emails")
	reports := beanstalk.NewTube(c, "reports")
	e1, err := emails.Put([]byte("e1"), 100, 0, time.Minute)
	must(t, err)
	r1, err := reports.Put([]byte("r1"), 1, 0, time.Minute)
	must(t, err)
	_, err = emails.Put([]byte("e2"), 100, 0, time.Minute)
	must(t, err)

	ts := beanstalk.NewTubeSet(worker, "emails", "reports")
	id, body, err := ts.Reserve(time.Second)
	must(t, err)
	if id != r1 || string(body) != "r1" {
		t.Fatalf("first reserve from the set: %d %q (want the pri-1 report)", id, body)
	}
	id, body, err = ts.Reserve(time.Second)
	must(t, err)
	if id != e1 || string(body) != "e1" {
		t.Fatalf("second reserve: %d %q", id, body)
	}
	only := beanstalk.NewTubeSet(worker, "reports")
	_, _, err = only.Reserve(0)
	wantErr(t, "reserve from reports only", err, beanstalk.ErrTimeout)

	st, err := emails.Stats()
	must(t, err)
	if st["name"] != q("emails") || st["current-jobs-ready"] != "1" || st["current-jobs-reserved"] != "1" || st["total-jobs"] != "2" || st["current-watching"] != "0" {
		t.Fatalf("stats-tube emails: %v", st)
	}
	tubes, err := c.ListTubes()
	must(t, err)
	if !slices.Equal(tubes, []string{"default", "emails", "reports"}) {
		t.Fatalf("list-tubes: %v", tubes)
	}

	// A waiting TubeSet.Reserve is woken by a put on another connection.
	done := make(chan error, 1)
	var got []byte
	go func() {
		var err error
		_, got, err = only.Reserve(10 * time.Second)
		done <- err
	}()
	ctl := s.dial(t)
	waitWaiting(t, ctl, 1)
	_, err = reports.Put([]byte("r2"), 0, 0, time.Minute)
	must(t, err)
	select {
	case err := <-done:
		must(t, err)
		if string(got) != "r2" {
			t.Fatalf("woken reserve got %q", got)
		}
	case <-time.After(defaultTimeout):
		t.Fatal("the waiting Reserve was not woken by the put")
	}
}

func TestGoBeanstalkPause(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := dialClient(t, s)
	tube := beanstalk.NewTube(c, "paused")
	id, err := tube.Put([]byte("p"), 0, 0, time.Minute)
	must(t, err)
	start := time.Now() // before the pause starts its clock
	must(t, tube.Pause(time.Second))
	st, err := tube.Stats()
	must(t, err)
	if st["pause"] != "1" {
		t.Fatalf("pause: %s", st["pause"])
	}
	ts := beanstalk.NewTubeSet(c, "paused")
	_, _, err = ts.Reserve(0)
	wantErr(t, "reserve from a paused tube", err, beanstalk.ErrTimeout)
	rid, _, err := ts.Reserve(5 * time.Second)
	must(t, err)
	if rid != id {
		t.Fatalf("reserve: %d", rid)
	}
	checkElapsed(t, "reserve after the pause", start, time.Second)
}

func TestGoBeanstalkUnixSocket(t *testing.T) {
	t.Parallel()
	s := startUnixServer(t, shortTempDir(t)+"/sock")
	c := dialClient(t, s)
	id, err := c.Put([]byte("u"), 0, 0, time.Minute)
	must(t, err)
	rid, body, err := c.Reserve(time.Second)
	must(t, err)
	if rid != id || string(body) != "u" {
		t.Fatalf("reserve: %d %q", rid, body)
	}
	must(t, c.Delete(id))
}
