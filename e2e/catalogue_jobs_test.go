package e2e

// The job lifecycle on one connection: put, peek*, delete, release, bury,
// kick, kick-job, touch and reserve-job, and EXPECTED_CRLF.

import (
	"fmt"
	"testing"
)

// Upstream's cttest_peek_ok.
func TestPeekOK(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	mustSend(t, c, "put 0 0 1 1\r\na\r\n")
	expect(t, c, "INSERTED 1\r\n")
	mustSend(t, c, "peek 1\r\n")
	expect(t, c, "FOUND 1 1\r\n")
	expect(t, c, "a\r\n")
}

// Upstream's cttest_peek_not_found.
func TestPeekNotFound(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	mustSend(t, c, "put 0 0 1 1\r\na\r\n")
	expect(t, c, "INSERTED 1\r\n")
	mustSend(t, c, "peek 2\r\n")
	expect(t, c, "NOT_FOUND\r\n")
	mustSend(t, c, "peek 18446744073709551615\r\n")
	expect(t, c, "NOT_FOUND\r\n")
}

// Upstream's cttest_peek_delayed.
func TestPeekDelayed(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	runSteps(t, c, []step{
		{"peek-delayed\r\n", "NOT_FOUND\r\n"},
		{"put 0 0 1 1\r\nA\r\n", "INSERTED 1\r\n"},
		{"put 0 99 1 1\r\nB\r\n", "INSERTED 2\r\n"},
		{"put 0 1 1 1\r\nC\r\n", "INSERTED 3\r\n"},
		{"peek-delayed\r\n", "FOUND 3 1\r\nC\r\n"},
		{"delete 3\r\n", "DELETED\r\n"},
		{"peek-delayed\r\n", "FOUND 2 1\r\nB\r\n"},
		{"delete 2\r\n", "DELETED\r\n"},
		{"peek-delayed\r\n", "NOT_FOUND\r\n"},
	})
}

// Upstream's cttest_peek_buried_kick.
func TestPeekBuriedKick(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	runSteps(t, c, []step{
		{"put 0 0 1 1\r\nA\r\n", "INSERTED 1\r\n"},
		{"bury 1 0\r\n", "NOT_FOUND\r\n"}, // not reserved
		{"peek-buried\r\n", "NOT_FOUND\r\n"},
		{"reserve-with-timeout 0\r\n", "RESERVED 1 1\r\nA\r\n"},
		{"bury 1 0\r\n", "BURIED\r\n"},
		{"peek-buried\r\n", "FOUND 1 1\r\nA\r\n"},
		{"kick 1\r\n", "KICKED 1\r\n"},
		{"peek-buried\r\n", "NOT_FOUND\r\n"},
		{"peek-ready\r\n", "FOUND 1 1\r\nA\r\n"},
		{"kick 1\r\n", "KICKED 0\r\n"},
	})
}

// Upstream's cttest_touch_not_found.
func TestTouchNotFound(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	runSteps(t, c, []step{
		{"touch 1\r\n", "NOT_FOUND\r\n"},
		{"touch 100000000000000\r\n", "NOT_FOUND\r\n"},
	})
}

// Upstream's cttest_kickjob_buried.
func TestKickJobBuried(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	runSteps(t, c, []step{
		{"put 0 0 1 1\r\nA\r\n", "INSERTED 1\r\n"},
		{"reserve\r\n", "RESERVED 1 1\r\nA\r\n"},
		{"bury 1 0\r\n", "BURIED\r\n"},
		{"kick-job 100\r\n", "NOT_FOUND\r\n"},
		{"kick-job 1\r\n", "KICKED\r\n"},
		{"kick-job 1\r\n", "NOT_FOUND\r\n"},
	})
}

// Upstream's cttest_kickjob_delayed.
func TestKickJobDelayed(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	runSteps(t, c, []step{
		{"put 0 0 1 1\r\nA\r\n", "INSERTED 1\r\n"},
		{"put 0 10 1 1\r\nB\r\n", "INSERTED 2\r\n"},
		{"kick-job 1\r\n", "NOT_FOUND\r\n"}, // ready
		{"kick-job 2\r\n", "KICKED\r\n"},
		{"kick-job 2\r\n", "NOT_FOUND\r\n"},
	})
}

// Upstream's cttest_delete_ready.
func TestDeleteReady(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	runSteps(t, c, []step{
		{"put 0 0 0 0\r\n\r\n", "INSERTED 1\r\n"},
		{"delete 1\r\n", "DELETED\r\n"},
		{"delete 1\r\n", "NOT_FOUND\r\n"},
	})
}

// Upstream's cttest_max_priority.
func TestMaxPriority(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	runSteps(t, c, []step{
		{"put 4294967295 0 100 1\r\na\r\n", "INSERTED 1\r\n"},
		{"reserve\r\n", "RESERVED 1 1\r\na\r\n"},
	})
	if got := statsJob(t, c, 1)["pri"]; got != "4294967295" {
		t.Fatalf("pri: %s", got)
	}
}

// Upstream's cttest_reserve_job_already_reserved.
func TestReserveJobAlreadyReserved(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	runSteps(t, c, []step{
		{"put 0 0 1 1\r\nA\r\n", "INSERTED 1\r\n"},
		{"reserve-job 1\r\n", "RESERVED 1 1\r\nA\r\n"},
		{"reserve-job 1\r\n", "NOT_FOUND\r\n"},
	})
}

// Upstream's cttest_reserve_job_ready.
func TestReserveJobReady(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	runSteps(t, c, []step{
		{"put 0 0 1 1\r\nA\r\n", "INSERTED 1\r\n"},
		{"put 0 0 1 1\r\nB\r\n", "INSERTED 2\r\n"},
		{"reserve-job 2\r\n", "RESERVED 2 1\r\nB\r\n"},
		{"reserve-job 3\r\n", "NOT_FOUND\r\n"},
		{"release 1 1 0\r\n", "NOT_FOUND\r\n"},
		{"release 2 1 0\r\n", "RELEASED\r\n"},
	})
}

// Upstream's cttest_reserve_job_delayed.
func TestReserveJobDelayed(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	runSteps(t, c, []step{
		{"put 0 100 1 1\r\nA\r\n", "INSERTED 1\r\n"},
		{"put 0 100 1 1\r\nB\r\n", "INSERTED 2\r\n"},
		{"put 0 100 1 1\r\nC\r\n", "INSERTED 3\r\n"},
		{"reserve-job 2\r\n", "RESERVED 2 1\r\nB\r\n"},
		{"release 2 1 0\r\n", "RELEASED\r\n"},
	})
	if got := statsJob(t, c, 2)["state"]; got != "ready" {
		t.Fatalf("state: %s", got)
	}
}

// Upstream's cttest_reserve_job_buried.
func TestReserveJobBuried(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	runSteps(t, c, []step{
		{"put 0 0 1 1\r\nA\r\n", "INSERTED 1\r\n"},
		{"reserve-job 1\r\n", "RESERVED 1 1\r\nA\r\n"},
		{"bury 1 1\r\n", "BURIED\r\n"},
		{"put 0 0 1 1\r\nB\r\n", "INSERTED 2\r\n"},
		{"reserve-job 2\r\n", "RESERVED 2 1\r\nB\r\n"},
		{"bury 2 1\r\n", "BURIED\r\n"},
		{"reserve-job 2\r\n", "RESERVED 2 1\r\nB\r\n"},
		{"reserve-job 1\r\n", "RESERVED 1 1\r\nA\r\n"},
		{"release 1 1 0\r\n", "RELEASED\r\n"},
		{"release 2 1 0\r\n", "RELEASED\r\n"},
	})
	for _, id := range []uint64{1, 2} {
		if got := statsJob(t, c, id)["state"]; got != "ready" {
			t.Fatalf("job %d state: %s", id, got)
		}
	}
}

// Upstream's cttest_release_not_found.
func TestReleaseNotFound(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	mustSend(t, c, "release 1 1 1\r\n")
	expect(t, c, "NOT_FOUND\r\n")
}

// A body without its CRLF gives EXPECTED_CRLF after exactly bytes+2
// bytes; the leftover bytes are parsed as commands and the id is burned.
func TestExpectedCRLF(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	// "ab\r" is consumed as the 1-byte body plus its (wrong) terminator; the
	// stray "\n" then corrupts the next command line.
	mustSend(t, c, "put 0 0 10 1\r\nab\r\nlist-tube-used\r\n")
	expect(t, c, "EXPECTED_CRLF\r\nUNKNOWN_COMMAND\r\n")
	mustSend(t, c, "list-tube-used\r\n")
	expect(t, c, "USING default\r\n")
	// The id of the failed put is burned.
	mustSend(t, c, "put 0 0 10 1\r\na\r\n")
	expect(t, c, "INSERTED 2\r\n")
	// A wrong terminator of the right length leaves nothing behind.
	mustSend(t, c, "put 0 0 10 3\r\nabcXY")
	expect(t, c, "EXPECTED_CRLF\r\n")
	mustSend(t, c, "peek 3\r\n")
	expect(t, c, "NOT_FOUND\r\n")
	mustSend(t, c, "put 0 0 10 1\r\nz\r\n")
	expect(t, c, "INSERTED 4\r\n")
	st := stats(t, c)
	if st["cmd-put"] != "4" || st["total-jobs"] != "2" || st["current-jobs-ready"] != "2" {
		t.Fatalf("cmd-put %s total-jobs %s current-jobs-ready %s", st["cmd-put"], st["total-jobs"], st["current-jobs-ready"])
	}
}

// Bodies are opaque bytes: CRLF and NUL inside, and empty bodies.
func TestBinaryBodies(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	body := "a\r\nb\x00c\r\n\xff"
	runSteps(t, c, []step{
		{fmt.Sprintf("put 0 0 10 %d\r\n%s\r\n", len(body), body), "INSERTED 1\r\n"},
		{"put 0 0 0 0\r\n\r\n", "INSERTED 2\r\n"},
		{"peek 1\r\n", fmt.Sprintf("FOUND 1 %d\r\n%s\r\n", len(body), body)},
		{"peek 2\r\n", "FOUND 2 0\r\n\r\n"},
		{"reserve\r\n", fmt.Sprintf("RESERVED 1 %d\r\n%s\r\n", len(body), body)},
		{"reserve\r\n", "RESERVED 2 0\r\n\r\n"},
	})
}

// Ready jobs are served by (pri, id): pri 5,1,5,1,0 (ids 1..5) is
// reserved as 5,2,4,1,3; a released job keeps its place by id.
func TestPriorityOrder(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	for i, pri := range []int{5, 1, 5, 1, 0} {
		put(t, c, pri, 0, 100, fmt.Sprint(i+1), uint64(i+1))
	}
	mustSend(t, c, "peek-ready\r\n")
	expect(t, c, "FOUND 5 1\r\n5\r\n")
	for _, id := range []int{5, 2, 4, 1, 3} {
		mustSend(t, c, "reserve\r\n")
		expect(t, c, fmt.Sprintf("RESERVED %d 1\r\n%d\r\n", id, id))
	}
	// Release 3 and 1 with equal pri: the older id comes first again.
	runSteps(t, c, []step{
		{"release 3 7 0\r\n", "RELEASED\r\n"},
		{"release 1 7 0\r\n", "RELEASED\r\n"},
		{"reserve\r\n", "RESERVED 1 1\r\n1\r\n"},
		{"release 1 8 0\r\n", "RELEASED\r\n"},
		{"reserve\r\n", "RESERVED 3 1\r\n3\r\n"},
		{"reserve\r\n", "RESERVED 1 1\r\n1\r\n"},
	})
}

// Kick kicks buried jobs first (oldest first), and delayed jobs only
// when nothing is buried.
func TestKickBuriedBeforeDelayed(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	runSteps(t, c, []step{
		{"put 0 100 10 1\r\nD\r\n", "INSERTED 1\r\n"},
		{"put 0 0 10 1\r\nA\r\n", "INSERTED 2\r\n"},
		{"put 0 0 10 1\r\nB\r\n", "INSERTED 3\r\n"},
		{"reserve-job 3\r\n", "RESERVED 3 1\r\nB\r\n"},
		{"bury 3 5\r\n", "BURIED\r\n"},
		{"reserve\r\n", "RESERVED 2 1\r\nA\r\n"},
		{"bury 2 5\r\n", "BURIED\r\n"},
		{"peek-buried\r\n", "FOUND 3 1\r\nB\r\n"}, // oldest buried, not lowest id
		{"kick 1\r\n", "KICKED 1\r\n"},
		{"peek-buried\r\n", "FOUND 2 1\r\nA\r\n"},
		{"kick 10\r\n", "KICKED 1\r\n"}, // the buried one only
		{"peek-delayed\r\n", "FOUND 1 1\r\nD\r\n"},
		{"kick 10\r\n", "KICKED 1\r\n"},
		{"peek-delayed\r\n", "NOT_FOUND\r\n"},
		{"peek-ready\r\n", "FOUND 1 1\r\nD\r\n"},
	})
	j := statsJob(t, c, 3)
	if j["state"] != "ready" || j["pri"] != "5" || j["buries"] != "1" || j["kicks"] != "1" || j["reserves"] != "1" {
		t.Fatalf("stats-job 3: %v", j)
	}
}

// Delete works on ready, delayed and buried jobs in any tube;
// peek works on every state; peek-* and kick look at the used tube only.
func TestDeleteAndPeekAcrossStatesAndTubes(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	runSteps(t, c, []step{
		{"use other\r\n", "USING other\r\n"},
		{"put 0 0 10 1\r\nR\r\n", "INSERTED 1\r\n"},
		{"put 0 100 10 1\r\nD\r\n", "INSERTED 2\r\n"},
		{"put 0 0 10 1\r\nB\r\n", "INSERTED 3\r\n"},
		{"reserve-job 3\r\n", "RESERVED 3 1\r\nB\r\n"},
		{"bury 3 0\r\n", "BURIED\r\n"},
		{"put 0 0 10 1\r\nX\r\n", "INSERTED 4\r\n"},
		{"reserve-job 4\r\n", "RESERVED 4 1\r\nX\r\n"},
		{"use default\r\n", "USING default\r\n"},
		{"peek-ready\r\n", "NOT_FOUND\r\n"},
		{"peek-delayed\r\n", "NOT_FOUND\r\n"},
		{"peek-buried\r\n", "NOT_FOUND\r\n"},
		{"kick 10\r\n", "KICKED 0\r\n"},
		{"peek 1\r\n", "FOUND 1 1\r\nR\r\n"},
		{"peek 2\r\n", "FOUND 2 1\r\nD\r\n"},
		{"peek 3\r\n", "FOUND 3 1\r\nB\r\n"},
		{"peek 4\r\n", "FOUND 4 1\r\nX\r\n"}, // reserved
		{"kick-job 2\r\n", "KICKED\r\n"},     // any tube
		{"kick-job 4\r\n", "NOT_FOUND\r\n"},  // reserved
		{"delete 1\r\n", "DELETED\r\n"},
		{"delete 2\r\n", "DELETED\r\n"},
		{"delete 3\r\n", "DELETED\r\n"},
		{"delete 4\r\n", "DELETED\r\n"},
		{"peek 4\r\n", "NOT_FOUND\r\n"},
	})
}

// Release with a delay makes the job delayed; bury/touch/release need
// the job reserved by this connection.
func TestReleaseBuryTouchStates(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	runSteps(t, c, []step{
		{"put 10 0 100 1\r\nA\r\n", "INSERTED 1\r\n"},
		{"touch 1\r\n", "NOT_FOUND\r\n"},
		{"release 1 0 0\r\n", "NOT_FOUND\r\n"},
		{"reserve\r\n", "RESERVED 1 1\r\nA\r\n"},
		{"touch 1\r\n", "TOUCHED\r\n"},
		{"release 1 20 100\r\n", "RELEASED\r\n"},
		{"peek-delayed\r\n", "FOUND 1 1\r\nA\r\n"},
		{"touch 1\r\n", "NOT_FOUND\r\n"},
		{"bury 1 0\r\n", "NOT_FOUND\r\n"},
		{"reserve-with-timeout 0\r\n", "TIMED_OUT\r\n"},
	})
	j := statsJob(t, c, 1)
	if j["state"] != "delayed" || j["pri"] != "20" || j["delay"] != "100" || j["releases"] != "1" || j["reserves"] != "1" {
		t.Fatalf("stats-job 1: %v", j)
	}
	if tl := j["time-left"]; tl != "99" && tl != "98" {
		t.Fatalf("time-left %s, want 99 (or 98 on a slow machine)", tl)
	}
}
