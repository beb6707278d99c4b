package e2e

// Timers: delays, TTR, touch, DEADLINE_SOON, pause-tube and
// reserve-with-timeout. Durations are the shortest the
// protocol allows (1-2 s); lower bounds are checked closely, upper bounds
// generously, so that a loaded machine does not make them flaky. A check of
// the state before a timer fires is judged by the time that actually
// passed: see timed.

import (
	"strings"
	"testing"
	"time"
)

// early is how much sooner than nominal a timer may fire: upstream's epoll
// timeout has millisecond granularity.
const early = 10 * time.Millisecond

// slack is how much later than nominal a timer may fire on a loaded machine.
const slack = 3 * time.Second

func checkElapsed(t *testing.T, what string, start time.Time, nominal time.Duration) {
	t.Helper()
	el := time.Since(start)
	if el < nominal-early {
		t.Fatalf("%s after %v, expected no sooner than %v", what, el, nominal)
	}
	if el > nominal+slack {
		t.Fatalf("%s after %v, expected about %v", what, el, nominal)
	}
}

// timed is a timer a test's checks must beat: armed by a command sent after
// start, it fires no sooner than start+d-early. A check whose reply is
// wrong fails the test if the reply arrived before then; after it, the
// timer may have fired first (the machine was slow), so the round proves
// nothing and untilConclusive runs it again on a new server.
type timed struct {
	t     *testing.T
	start time.Time
	d     time.Duration
}

func timer(t *testing.T, d time.Duration) timed { return timed{t, time.Now(), d} }

// beaten reports whether a reply that has just arrived was made before the
// timer could fire.
func (tm timed) beaten() bool { return time.Since(tm.start) < tm.d-early }

// timerWon ends a round whose checks a timer may have overtaken.
type timerWon struct{}

func (tm timed) check(ok bool, format string, args ...any) {
	tm.t.Helper()
	if ok {
		return
	}
	if !tm.beaten() {
		panic(timerWon{})
	}
	tm.t.Fatalf(format, args...)
}

// steps is runSteps with the replies judged by check, line by line.
func (tm timed) steps(c *conn, steps []step) {
	tm.t.Helper()
	for _, s := range steps {
		mustSend(tm.t, c, s.send)
		for _, want := range strings.SplitAfter(s.want, "\r\n") {
			if want == "" {
				continue
			}
			got := readLine(tm.t, c) + "\r\n"
			tm.check(got == want, "%s: reply line %s, want %s", show(s.send), show(got), show(want))
		}
	}
}

// slowRounds is how many rounds a timer may overtake before the test fails.
const slowRounds = 5

// untilConclusive runs round on a new server until no timer overtakes its
// checks.
func untilConclusive(t *testing.T, round func(s *server)) {
	t.Helper()
	for i := 1; ; i++ {
		overtaken := func() (won bool) {
			defer func() {
				if r := recover(); r != nil {
					if _, ok := r.(timerWon); !ok {
						panic(r)
					}
					won = true
				}
			}()
			round(startServer(t))
			return false
		}()
		if !overtaken {
			return
		}
		if i == slowRounds {
			t.Fatalf("a timer overtook the checks in %d rounds out of %d", i, i)
		}
		t.Logf("round %d: a timer may have fired before the checks ran; running again", i)
	}
}

// Upstream's cttest_pause.
func TestPause(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	mustSend(t, c, "put 0 0 0 1\r\nx\r\n")
	expect(t, c, "INSERTED 1\r\n")
	start := time.Now()
	mustSend(t, c, "pause-tube default 1\r\n")
	expect(t, c, "PAUSED\r\n")
	mustSend(t, c, "reserve\r\n")
	expectWithin(t, c, "RESERVED 1 1\r\nx\r\n", defaultTimeout)
	checkElapsed(t, "RESERVED", start, time.Second)
}

// Upstream's cttest_small_delay.
func TestSmallDelay(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	mustSend(t, c, "put 0 1 1 0\r\n\r\n")
	expect(t, c, "INSERTED 1\r\n")
}

// Upstream's cttest_zero_delay.
func TestZeroDelay(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	mustSend(t, c, "put 0 0 1 0\r\n\r\n")
	expect(t, c, "INSERTED 1\r\n")
}

// Upstream's cttest_delayed_to_ready.
func TestDelayedToReady(t *testing.T) {
	t.Parallel()
	untilConclusive(t, func(s *server) {
		c := s.dial(t)
		delay := timer(t, time.Second)
		delay.steps(c, []step{{"put 0 1 1 0\r\n\r\n", "INSERTED 1\r\n"}})
		st := statsTube(t, c, "default")
		delay.check(st["current-jobs-ready"] == "0" && st["current-jobs-delayed"] == "1" && st["total-jobs"] == "1",
			"stats-tube while delayed: %v", st)
		j := statsJob(t, c, 1)
		delay.check(j["state"] == "delayed" && j["time-left"] == "0", "stats-job while delayed: %v", j)
		waitFor(t, defaultTimeout, "the delayed job to become ready", func() bool {
			return statsTube(t, c, "default")["current-jobs-ready"] == "1"
		})
		checkElapsed(t, "ready", delay.start, time.Second)
		mustSend(t, c, "stats-tube default\r\n")
		expectYAMLContains(t, c, "\ncurrent-jobs-ready: 1\n", "\ncurrent-jobs-delayed: 0\n", "\ntotal-jobs: 1\n")
	})
}

// A delayed put is served once its delay has passed.
func TestDelayedPutIsReserved(t *testing.T) {
	t.Parallel()
	untilConclusive(t, func(s *server) {
		c := s.dial(t)
		delay := timer(t, time.Second)
		delay.steps(c, []step{
			{"put 0 1 10 1\r\nd\r\n", "INSERTED 1\r\n"},
			{"reserve-with-timeout 0\r\n", "TIMED_OUT\r\n"},
		})
		mustSend(t, c, "reserve-with-timeout 10\r\n")
		expectWithin(t, c, "RESERVED 1 1\r\nd\r\n", defaultTimeout)
		checkElapsed(t, "RESERVED", delay.start, time.Second)
	})
}

// Release with a delay: the job is delayed, then ready again.
func TestReleaseWithDelay(t *testing.T) {
	t.Parallel()
	untilConclusive(t, func(s *server) {
		c := s.dial(t)
		runSteps(t, c, []step{
			{"put 0 0 10 1\r\nd\r\n", "INSERTED 1\r\n"},
			{"reserve\r\n", "RESERVED 1 1\r\nd\r\n"},
		})
		delay := timer(t, time.Second)
		delay.steps(c, []step{
			{"release 1 3 1\r\n", "RELEASED\r\n"},
			{"peek-delayed\r\n", "FOUND 1 1\r\nd\r\n"},
			{"reserve-with-timeout 0\r\n", "TIMED_OUT\r\n"},
		})
		mustSend(t, c, "reserve-with-timeout 10\r\n")
		expectWithin(t, c, "RESERVED 1 1\r\nd\r\n", defaultTimeout)
		checkElapsed(t, "RESERVED", delay.start, time.Second)
	})
}

// reserve-with-timeout 1 with nothing to reserve times out after 1s.
func TestReserveWithTimeoutTimesOut(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	start := time.Now()
	mustSend(t, c, "reserve-with-timeout 1\r\n")
	expectWithin(t, c, "TIMED_OUT\r\n", defaultTimeout)
	checkElapsed(t, "TIMED_OUT", start, time.Second)
	mustSend(t, c, "list-tube-used\r\n")
	expect(t, c, "USING default\r\n")
}

// A job whose TTR expires goes back to ready (never delayed or
// buried) and is given to the next reserver; timeouts are counted.
func TestTTRExpiry(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	a, b := s.dial(t), s.dial(t)
	runSteps(t, a, []step{{"put 0 0 1 1\r\nj\r\n", "INSERTED 1\r\n"}})
	start := time.Now() // before the reserve that starts the TTR
	runSteps(t, a, []step{{"reserve\r\n", "RESERVED 1 1\r\nj\r\n"}})
	mustSend(t, b, "reserve-with-timeout 10\r\n")
	expectWithin(t, b, "RESERVED 1 1\r\nj\r\n", defaultTimeout)
	checkElapsed(t, "RESERVED by the second worker", start, time.Second)
	runSteps(t, a, []step{
		{"delete 1\r\n", "NOT_FOUND\r\n"}, // reserved by b now
		{"touch 1\r\n", "NOT_FOUND\r\n"},
	})
	j := statsJob(t, a, 1)
	if j["state"] != "reserved" || j["reserves"] != "2" || j["timeouts"] != "1" || j["releases"] != "0" {
		t.Fatalf("stats-job 1: %v", j)
	}
	if st := stats(t, a); st["job-timeouts"] != "1" {
		t.Fatalf("job-timeouts %s", st["job-timeouts"])
	}
	mustSend(t, b, "delete 1\r\n")
	expect(t, b, "DELETED\r\n")
}

// Touch restarts the TTR: the job is still reserved after the TTR
// the touch replaced has run out.
func TestTouchExtendsTTR(t *testing.T) {
	t.Parallel()
	const ttr = 2 * time.Second
	untilConclusive(t, func(s *server) {
		c := s.dial(t)
		put(t, c, 0, 0, 2, "t", 1)
		first := timer(t, ttr)
		first.steps(c, []step{{"reserve\r\n", "RESERVED 1 1\r\nt\r\n"}})
		firstEnd := time.Now().Add(ttr) // the first TTR runs out no later than this
		time.Sleep(ttr * 6 / 10)
		touched := timer(t, ttr)
		first.steps(c, []step{{"touch 1\r\n", "TOUCHED\r\n"}})
		j := statsJob(t, c, 1)
		touched.check(j["time-left"] == "1" || j["time-left"] == "0", "time-left right after touch: %s", j["time-left"])
		time.Sleep(time.Until(firstEnd.Add(100 * time.Millisecond)))
		j = statsJob(t, c, 1)
		touched.check(j["state"] == "reserved" && j["timeouts"] == "0",
			"after the first TTR: state %s timeouts %s", j["state"], j["timeouts"])
		touched.steps(c, []step{{"delete 1\r\n", "DELETED\r\n"}})
	})
}

// Upstream's cttest_reserve_ttr_deadline_soon: inside the 1 s safety margin
// with nothing else ready, reserve answers DEADLINE_SOON at once.
func TestReserveTTRDeadlineSoon(t *testing.T) {
	t.Parallel()
	untilConclusive(t, func(s *server) {
		c := s.dial(t)
		runSteps(t, c, []step{{"put 0 0 1 1\r\na\r\n", "INSERTED 1\r\n"}})
		ttr := timer(t, time.Second)
		ttr.steps(c, []step{{"reserve-with-timeout 1\r\n", "RESERVED 1 1\r\na\r\n"}})
		j := statsJob(t, c, 1)
		ttr.check(j["state"] == "reserved", "state %s after the reserve", j["state"])
		asked := timer(t, time.Second) // the reserve's own timeout
		ttr.steps(c, []step{{"reserve-with-timeout 1\r\n", "DEADLINE_SOON\r\n"}})
		asked.check(asked.beaten(), "DEADLINE_SOON took %v, want immediate", time.Since(asked.start))
		j = statsJob(t, c, 1)
		ttr.check(j["state"] == "reserved", "state %s after DEADLINE_SOON", j["state"])
		ttr.steps(c, []step{{"release 1 0 0\r\n", "RELEASED\r\n"}})
		mustSend(t, c, "stats-job 1\r\n")
		expectYAMLContains(t, c, "\nstate: ready\n")
	})
}

// Upstream's cttest_reserve_job_ttr_deadline_soon: a job reserved from the
// delayed state goes back to ready, not delayed, when its TTR expires.
func TestReserveJobTTRDeadlineSoon(t *testing.T) {
	t.Parallel()
	untilConclusive(t, func(s *server) {
		c := s.dial(t)
		runSteps(t, c, []step{{"put 0 5 1 1\r\nA\r\n", "INSERTED 1\r\n"}})
		// The TTR starts when the server reads reserve-job, which is after
		// this: elapsed can only overstate it, however slow the reply is.
		ttr := timer(t, time.Second)
		ttr.steps(c, []step{
			{"reserve-job 1\r\n", "RESERVED 1 1\r\nA\r\n"},
			{"reserve-with-timeout 1\r\n", "DEADLINE_SOON\r\n"},
		})
		mustSend(t, c, "put 0 0 1 1\r\nB\r\n")
		expect(t, c, "INSERTED 2\r\n")
		var state string
		waitFor(t, defaultTimeout, "job 1 to leave the reserved state", func() bool {
			state = statsJob(t, c, 1)["state"]
			return state != "reserved"
		})
		checkElapsed(t, "TTR expiry", ttr.start, time.Second)
		if state != "ready" {
			t.Fatalf("state after TTR: %s, want ready", state)
		}
	})
}

// Extra (issue #646): inside the safety margin, reserve still returns a
// ready job when one exists; DEADLINE_SOON only when none does.
func TestDeadlineSoonVersusReadyJobs(t *testing.T) {
	t.Parallel()
	untilConclusive(t, func(s *server) {
		c := s.dial(t)
		runSteps(t, c, []step{
			{"put 0 0 1 1\r\nA\r\n", "INSERTED 1\r\n"},
			{"put 0 0 100 1\r\nB\r\n", "INSERTED 2\r\n"},
		})
		timer(t, time.Second).steps(c, []step{ // job 1's TTR
			{"reserve\r\n", "RESERVED 1 1\r\nA\r\n"},
			{"reserve\r\n", "RESERVED 2 1\r\nB\r\n"}, // job 1 is in its margin, but 2 is ready
			{"reserve-with-timeout 5\r\n", "DEADLINE_SOON\r\n"},
			{"reserve-job 1\r\n", "NOT_FOUND\r\n"}, // reserve-job never says DEADLINE_SOON
		})
	})
}

// A waiting reserve is ended by DEADLINE_SOON when a job the
// connection holds enters its safety margin.
func TestDeadlineSoonWhileWaiting(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	runSteps(t, c, []step{{"put 0 0 2 1\r\nA\r\n", "INSERTED 1\r\n"}})
	start := time.Now() // before the reserve that starts the 2 s TTR
	runSteps(t, c, []step{{"reserve\r\n", "RESERVED 1 1\r\nA\r\n"}})
	mustSend(t, c, "reserve\r\n")
	expectWithin(t, c, "DEADLINE_SOON\r\n", defaultTimeout)
	checkElapsed(t, "DEADLINE_SOON", start, time.Second)
	mustSend(t, c, "delete 1\r\n")
	expect(t, c, "DELETED\r\n")
}

// reserve-with-timeout 0 on a paused tube with a ready job times out;
// put, peek-ready, kick and reserve-job still work on a paused tube.
func TestReserveWithTimeoutZeroOnPausedTube(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	runSteps(t, c, []step{
		{"put 0 0 10 1\r\na\r\n", "INSERTED 1\r\n"},
		{"pause-tube default 10\r\n", "PAUSED\r\n"},
		{"reserve-with-timeout 0\r\n", "TIMED_OUT\r\n"},
		{"put 0 100 10 1\r\nb\r\n", "INSERTED 2\r\n"},
		{"peek-ready\r\n", "FOUND 1 1\r\na\r\n"},
		{"kick 1\r\n", "KICKED 1\r\n"},
		{"reserve-with-timeout 0\r\n", "TIMED_OUT\r\n"},
		{"reserve-job 2\r\n", "RESERVED 2 1\r\nb\r\n"},
	})
}

// Pause and pause-time-left in stats-tube; the pause ends by itself
// and re-pausing can shorten it.
func TestPauseStatsAndExpiry(t *testing.T) {
	t.Parallel()
	untilConclusive(t, func(s *server) { pauseStatsAndExpiry(t, s) })
}

func pauseStatsAndExpiry(t *testing.T, s *server) {
	c := s.dial(t)
	runSteps(t, c, []step{{"put 0 0 10 1\r\na\r\n", "INSERTED 1\r\n"}})
	// pause-time-left is 1 until a second of the 2 s pause has passed.
	second := timer(t, time.Second)
	runSteps(t, c, []step{{"pause-tube default 2\r\n", "PAUSED\r\n"}})
	st := statsTube(t, c, "default")
	second.check(st["pause"] == "2" && st["pause-time-left"] == "1" && st["cmd-pause-tube"] == "1",
		"right after pause-tube default 2: pause %s pause-time-left %s cmd-pause-tube %s (want 2 1 1)",
		st["pause"], st["pause-time-left"], st["cmd-pause-tube"])
	// Re-pausing overrides: 100 s, then 1 s.
	w := s.dial(t)
	mustSend(t, w, "reserve\r\n")
	runSteps(t, c, []step{{"pause-tube default 100\r\n", "PAUSED\r\n"}})
	expectNothing(t, w, 100*time.Millisecond)
	start := time.Now()
	runSteps(t, c, []step{{"pause-tube default 1\r\n", "PAUSED\r\n"}})
	expectWithin(t, w, "RESERVED 1 1\r\na\r\n", defaultTimeout)
	checkElapsed(t, "RESERVED", start, time.Second)
	waitFor(t, defaultTimeout, "pause to reset", func() bool {
		st = statsTube(t, c, "default")
		return st["pause"] == "0"
	})
	if st["pause-time-left"] != "0" || st["cmd-pause-tube"] != "3" {
		t.Fatalf("after the pause: pause-time-left %s cmd-pause-tube %s", st["pause-time-left"], st["cmd-pause-tube"])
	}
}

// Upstream's cttest_unpause_tube (upstream issue #113): pause-tube 0 wakes
// a waiting reserver at once.
func TestUnpauseTube(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c0, c1 := s.dial(t), s.dial(t)
	runSteps(t, c0, []step{
		{"put 0 0 0 0\r\n\r\n", "INSERTED 1\r\n"},
		{"pause-tube default 86400\r\n", "PAUSED\r\n"},
	})
	mustSend(t, c1, "reserve\r\n")
	waitWaiting(t, c0, 1)
	runSteps(t, c0, []step{{"pause-tube default 0\r\n", "PAUSED\r\n"}})
	// At once: expect waits 5 s, the pause was for a day.
	expect(t, c1, "RESERVED 1 0\r\n\r\n")
}

// A job put into a paused tube while another watched tube is not
// paused: the waiter gets the unpaused tube's job.
func TestPausedTubeSkippedForOtherTube(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c, w := s.dial(t), s.dial(t)
	runSteps(t, w, []step{{"watch other\r\n", "WATCHING 2\r\n"}})
	runSteps(t, c, []step{
		{"put 0 0 10 1\r\np\r\n", "INSERTED 1\r\n"}, // pri 0 but paused
		{"pause-tube default 100\r\n", "PAUSED\r\n"},
		{"use other\r\n", "USING other\r\n"},
		{"put 9 0 10 1\r\nq\r\n", "INSERTED 2\r\n"},
	})
	runSteps(t, w, []step{{"reserve\r\n", "RESERVED 2 1\r\nq\r\n"}})
	mustSend(t, w, "reserve-with-timeout 0\r\n")
	expect(t, w, "TIMED_OUT\r\n")
	// A second put into the paused tube still does not wake a waiter.
	mustSend(t, w, "reserve\r\n")
	runSteps(t, c, []step{{"use default\r\n", "USING default\r\n"}, {"put 0 0 10 1\r\nr\r\n", "INSERTED 3\r\n"}})
	expectNothing(t, w, 200*time.Millisecond)
	runSteps(t, c, []step{{"pause-tube default 0\r\n", "PAUSED\r\n"}})
	expect(t, w, "RESERVED 1 1\r\np\r\n")
}
