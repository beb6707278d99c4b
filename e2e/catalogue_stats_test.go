package e2e

// stats, stats-tube and stats-job: exact key order and every deterministic
// value, the counters, and the masked fields' formats.

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// statsKeys is the exact key order of `stats`.
var statsKeys = []string{
	"current-jobs-urgent", "current-jobs-ready", "current-jobs-reserved", "current-jobs-delayed",
	"current-jobs-buried", "cmd-put", "cmd-peek", "cmd-peek-ready", "cmd-peek-delayed", "cmd-peek-buried",
	"cmd-reserve", "cmd-reserve-with-timeout", "cmd-delete", "cmd-release", "cmd-use", "cmd-watch",
	"cmd-ignore", "cmd-bury", "cmd-kick", "cmd-touch", "cmd-stats", "cmd-stats-job", "cmd-stats-tube",
	"cmd-list-tubes", "cmd-list-tube-used", "cmd-list-tubes-watched", "cmd-pause-tube", "job-timeouts",
	"total-jobs", "max-job-size", "current-tubes", "current-connections", "current-producers",
	"current-workers", "current-waiting", "total-connections", "pid", "version", "rusage-utime",
	"rusage-stime", "uptime", "binlog-oldest-index", "binlog-current-index", "binlog-records-migrated",
	"binlog-records-written", "binlog-max-size", "draining", "id", "hostname", "os", "platform",
	"job-memory-bytes", "job-memory-limit",
}

// statsBeanpoleKeys are the keys of statsKeys that beanpole adds after
// upstream's (the memory charged to jobs and its ceiling): a 1.12 target
// has none of them, and the differential test drops them before comparing.
var statsBeanpoleKeys = []string{"job-memory-bytes", "job-memory-limit"}

func isBeanpoleStatsKey(k string) bool {
	for _, b := range statsBeanpoleKeys {
		if k == b {
			return true
		}
	}
	return false
}

// statsVolatile are the stats keys whose values are masked in exact
// comparisons; checkStatsVolatile checks their format instead.
var statsVolatile = []string{"pid", "version", "rusage-utime", "rusage-stime", "uptime", "id", "hostname", "os", "platform",
	"job-memory-bytes", "job-memory-limit"}

// statsBody builds the expected masked stats body: every key of statsKeys
// in order, the volatile ones as "*", the others from vals (default "0").
func statsBody(vals map[string]string) string {
	var b strings.Builder
	b.WriteString("---\n")
	volatile := map[string]bool{}
	for _, k := range statsVolatile {
		volatile[k] = true
	}
	defaults := map[string]string{"max-job-size": "65535", "current-tubes": "1", "binlog-max-size": "10485760", "draining": "false"}
	for _, k := range statsKeys {
		if target.legacy && isBeanpoleStatsKey(k) {
			continue
		}
		v := "0"
		if d, ok := defaults[k]; ok {
			v = d
		}
		if x, ok := vals[k]; ok {
			v = x
		}
		if volatile[k] {
			v = "*"
		}
		b.WriteString(k + ": " + v + "\n")
	}
	return b.String()
}

var (
	rusageRE   = regexp.MustCompile(`^[0-9]+\.[0-9]{6}$`)
	serverIDRE = regexp.MustCompile(`^[0-9a-f]{16}$`)
	quotedRE   = regexp.MustCompile(`^"[^"\n]*"$`)
	unquotedRE = regexp.MustCompile(`^[^"\n]*$`)
)

// expectStats sends stats and compares the whole body exactly, with the
// volatile values masked and format-checked.
func expectStats(t *testing.T, s *server, c *conn, vals map[string]string) map[string]string {
	t.Helper()
	mustSend(t, c, "stats\r\n")
	body := readYAML(t, c)
	if got, want := maskYAML(body, statsVolatile...), statsBody(vals); got != want {
		t.Fatalf("stats body (volatile values masked):%s", diffMsg(want, got))
	}
	m := yamlMap(t, body)
	checkStatsVolatile(t, s, m)
	return m
}

func checkStatsVolatile(t *testing.T, s *server, m map[string]string) {
	t.Helper()
	if m["pid"] != strconv.Itoa(s.cmd.Process.Pid) {
		t.Errorf("pid: %s, the process is %d", m["pid"], s.cmd.Process.Pid)
	}
	if !quotedRE.MatchString(m["version"]) || m["version"] == `""` {
		t.Errorf("version must be a quoted string: %s", m["version"])
	}
	for _, k := range []string{"rusage-utime", "rusage-stime"} {
		if !rusageRE.MatchString(m[k]) {
			t.Errorf("%s: %q, want seconds with 6 decimals", k, m[k])
		}
	}
	if up, err := strconv.Atoi(m["uptime"]); err != nil || up < 0 || up > 600 {
		t.Errorf("uptime: %q", m["uptime"])
	}
	if !serverIDRE.MatchString(m["id"]) {
		t.Errorf("id: %q, want 16 lowercase hex digits", m["id"])
	}
	if !target.legacy {
		// Both depend on the machine (the ceiling's default) and on the
		// per-job overhead; e2e/memory_test.go checks their values.
		for _, k := range statsBeanpoleKeys {
			if _, err := strconv.ParseUint(m[k], 10, 64); err != nil {
				t.Errorf("%s: %q, want a byte count", k, m[k])
			}
		}
	}
	strRE := quotedRE
	if target.legacy {
		strRE = unquotedRE
	}
	for _, k := range []string{"hostname", "os", "platform"} {
		if !strRE.MatchString(m[k]) {
			t.Errorf("%s: %s is not a %s string", k, m[k], map[bool]string{true: "bare (1.12)", false: "double-quoted"}[target.legacy])
		}
	}
}

// Stats on a fresh server, the exact body.
func TestStatsFresh(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := s.dial(t)
	expectStats(t, s, c, map[string]string{
		"cmd-stats": "1", "current-connections": "1", "total-connections": "1",
	})
	expectStats(t, s, c, map[string]string{
		"cmd-stats": "2", "current-connections": "1", "total-connections": "1",
	})
}

// Hostname, os and platform are uname's nodename, version and machine.
func TestStatsUnameFields(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	m := stats(t, s.dial(t))
	node, version, machine := uname(t)
	for k, want := range map[string]string{"hostname": node, "os": version, "platform": machine} {
		if m[k] != q(want) {
			t.Errorf("%s: %s, want %s", k, m[k], q(want))
		}
	}
}

// Every counter of stats after one pass over all commands; commands
// that fail to parse are not counted; reserve-job and kick-job are not shown.
func TestStatsCounters(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := s.dial(t)
	runSteps(t, c, []step{
		{"put 0 0 100 1\r\na\r\n", "INSERTED 1\r\n"},
		{"put 2000 0 100 1\r\nb\r\n", "INSERTED 2\r\n"},
		{"put 0 100 100 1\r\nc\r\n", "INSERTED 3\r\n"},
		{"peek 1\r\n", "FOUND 1 1\r\na\r\n"},
		{"peek x\r\n", "BAD_FORMAT\r\n"},
		{"peek-ready\r\n", "FOUND 1 1\r\na\r\n"},
		{"peek-delayed\r\n", "FOUND 3 1\r\nc\r\n"},
		{"peek-buried\r\n", "NOT_FOUND\r\n"},
		{"reserve\r\n", "RESERVED 1 1\r\na\r\n"},
		{"bury 1 5\r\n", "BURIED\r\n"},
		{"reserve-with-timeout 0\r\n", "RESERVED 2 1\r\nb\r\n"},
		{"release 2 2000 0\r\n", "RELEASED\r\n"},
		{"touch 2\r\n", "NOT_FOUND\r\n"},
		{"kick 1\r\n", "KICKED 1\r\n"},
		{"reserve-job 99\r\n", "NOT_FOUND\r\n"},
		{"kick-job 99\r\n", "NOT_FOUND\r\n"},
		{"use foo\r\n", "USING foo\r\n"},
		{"watch bar\r\n", "WATCHING 2\r\n"},
		{"ignore bar\r\n", "WATCHING 1\r\n"},
		{"list-tubes\r\n", tubeList("default", "foo")},
		{"list-tube-used\r\n", "USING foo\r\n"},
		{"list-tubes-watched\r\n", tubeList("default")},
		{"stats-tube nosuch\r\n", "NOT_FOUND\r\n"},
		{"stats-job 99\r\n", "NOT_FOUND\r\n"},
		{"pause-tube foo 0\r\n", "PAUSED\r\n"},
		{"delete 3\r\n", "DELETED\r\n"},
		{"delete 3\r\n", "NOT_FOUND\r\n"},
	})
	expectStats(t, s, c, map[string]string{
		"current-jobs-urgent": "1", "current-jobs-ready": "2",
		"cmd-put": "3", "cmd-peek": "1", "cmd-peek-ready": "1", "cmd-peek-delayed": "1", "cmd-peek-buried": "1",
		"cmd-reserve": "1", "cmd-reserve-with-timeout": "1", "cmd-delete": "2", "cmd-release": "1",
		"cmd-use": "1", "cmd-watch": "1", "cmd-ignore": "1", "cmd-bury": "1", "cmd-kick": "1", "cmd-touch": "1",
		"cmd-stats": "1", "cmd-stats-job": "1", "cmd-stats-tube": "1", "cmd-list-tubes": "1",
		"cmd-list-tube-used": "1", "cmd-list-tubes-watched": "1", "cmd-pause-tube": "1",
		"total-jobs": "3", "current-tubes": "2", "current-connections": "1",
		"current-producers": "1", "current-workers": "1", "total-connections": "1",
	})
}

// current-jobs-* for every state, urgency (pri < 1024 and ready).
func TestStatsJobStates(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := s.dial(t)
	runSteps(t, c, []step{
		{"put 1023 0 100 1\r\na\r\n", "INSERTED 1\r\n"}, // urgent
		{"put 1024 0 100 1\r\nb\r\n", "INSERTED 2\r\n"}, // not urgent
		{"put 0 100 100 1\r\nc\r\n", "INSERTED 3\r\n"},  // delayed
		{"put 0 0 100 1\r\nd\r\n", "INSERTED 4\r\n"},
		{"reserve-job 4\r\n", "RESERVED 4 1\r\nd\r\n"},
		{"put 0 0 100 1\r\ne\r\n", "INSERTED 5\r\n"},
		{"reserve-job 5\r\n", "RESERVED 5 1\r\ne\r\n"},
		{"bury 5 0\r\n", "BURIED\r\n"},
	})
	want := map[string]string{
		"current-jobs-urgent": "1", "current-jobs-ready": "2", "current-jobs-reserved": "1",
		"current-jobs-delayed": "1", "current-jobs-buried": "1",
	}
	st := stats(t, c)
	tb := statsTube(t, c, "default")
	for k, v := range want {
		if st[k] != v {
			t.Errorf("stats %s: %s, want %s", k, st[k], v)
		}
		if tb[k] != v {
			t.Errorf("stats-tube %s: %s, want %s", k, tb[k], v)
		}
	}
}

// current-producers and current-workers count connections that ever
// put (past the size and trailing-garbage checks) or reserved (reserve and
// reserve-with-timeout always; reserve-job only when it reserves a job).
func TestStatsProducersWorkers(t *testing.T) {
	t.Parallel()
	s := startServer(t, "-z", "10")
	a, b, c, d, e := s.dial(t), s.dial(t), s.dial(t), s.dial(t), s.dial(t)
	mustSend(t, a, "put x 0 0 1\r\n")
	expect(t, a, "BAD_FORMAT\r\n")
	mustSend(t, a, "put 0 0 0 11\r\n01234567890\r\n")
	expect(t, a, "JOB_TOO_BIG\r\n")
	put(t, b, 0, 0, 10, "x", 1)
	mustSend(t, c, "reserve-with-timeout 0\r\n")
	expect(t, c, "RESERVED 1 1\r\nx\r\n")
	mustSend(t, d, "reserve-job 99\r\n")
	expect(t, d, "NOT_FOUND\r\n")
	mustSend(t, e, "put 0 0 0 1\r\nxyz")
	expect(t, e, "EXPECTED_CRLF\r\n")
	mustSend(t, e, "put 0 0 0 1 junk\r\n")
	expect(t, e, "BAD_FORMAT\r\n")
	st := stats(t, a)
	if st["current-producers"] != "2" || st["current-workers"] != "1" || st["current-connections"] != "5" || st["total-connections"] != "5" {
		t.Fatalf("producers %s workers %s connections %s total %s; want 2 1 5 5",
			st["current-producers"], st["current-workers"], st["current-connections"], st["total-connections"])
	}
	if st["cmd-put"] != "4" {
		t.Fatalf("cmd-put %s, want 4 (JOB_TOO_BIG, EXPECTED_CRLF and trailing garbage count, a bad number does not)", st["cmd-put"])
	}
	put(t, d, 0, 0, 10, "y", 3)
	mustSend(t, a, "reserve-job 3\r\n")
	expect(t, a, "RESERVED 3 1\r\ny\r\n")
	st = stats(t, a)
	if st["current-producers"] != "3" || st["current-workers"] != "2" {
		t.Fatalf("producers %s workers %s; want 3 2", st["current-producers"], st["current-workers"])
	}
}

// stjob is the masked stats-job body.
func stjob(id int, tube, state string, pri, delay, ttr int, timeLeft string, reserves, timeouts, releases, buries, kicks int) string {
	return fmt.Sprintf("---\nid: %d\ntube: %s\nstate: %s\npri: %d\nage: *\ndelay: %d\nttr: %d\ntime-left: %s\nfile: 0\n"+
		"reserves: %d\ntimeouts: %d\nreleases: %d\nburies: %d\nkicks: %d\n",
		id, q(tube), state, pri, delay, ttr, timeLeft, reserves, timeouts, releases, buries, kicks)
}

func expectStatsJob(t *testing.T, c *conn, id int, want string) map[string]string {
	t.Helper()
	mustSend(t, c, fmt.Sprintf("stats-job %d\r\n", id))
	body := readYAML(t, c)
	if got := maskYAML(body, "age", "time-left"); got != want && maskYAML(body, "age") != want {
		t.Fatalf("stats-job %d:%s", id, diffMsg(want, maskYAML(body, "age")))
	}
	m := yamlMap(t, body)
	if age, err := strconv.Atoi(m["age"]); err != nil || age < 0 || age > 3 {
		t.Fatalf("stats-job %d age: %q", id, m["age"])
	}
	return m
}

// timeLeftNear checks a truncated time-left against its ideal value, allowing
// one second of slack for a slow machine.
func timeLeftNear(t *testing.T, m map[string]string, ideal int) {
	t.Helper()
	tl, err := strconv.Atoi(m["time-left"])
	if err != nil || tl > ideal || tl < ideal-1 {
		t.Fatalf("time-left %q, want %d (or %d)", m["time-left"], ideal, ideal-1)
	}
}

// stats-job, the exact body in each state.
func TestStatsJobExact(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	put(t, c, 7, 0, 100, "abc", 1)
	expectStatsJob(t, c, 1, stjob(1, "default", "ready", 7, 0, 100, "0", 0, 0, 0, 0, 0))
	mustSend(t, c, "reserve\r\n")
	expect(t, c, "RESERVED 1 3\r\nabc\r\n")
	m := expectStatsJob(t, c, 1, stjob(1, "default", "reserved", 7, 0, 100, "*", 1, 0, 0, 0, 0))
	timeLeftNear(t, m, 99)
	runSteps(t, c, []step{{"release 1 9 50\r\n", "RELEASED\r\n"}})
	m = expectStatsJob(t, c, 1, stjob(1, "default", "delayed", 9, 50, 100, "*", 1, 0, 1, 0, 0))
	timeLeftNear(t, m, 49)
	runSteps(t, c, []step{
		{"kick 1\r\n", "KICKED 1\r\n"},
		{"reserve\r\n", "RESERVED 1 3\r\nabc\r\n"},
		{"bury 1 11\r\n", "BURIED\r\n"},
	})
	expectStatsJob(t, c, 1, stjob(1, "default", "buried", 11, 50, 100, "0", 2, 0, 1, 1, 1))
	runSteps(t, c, []step{
		{"use other.tube\r\n", "USING other.tube\r\n"},
		{"put 4294967295 5 0 0\r\n\r\n", "INSERTED 2\r\n"},
	})
	m = expectStatsJob(t, c, 2, stjob(2, "other.tube", "delayed", 4294967295, 5, 1, "*", 0, 0, 0, 0, 0))
	timeLeftNear(t, m, 4)
}

// Upstream's cttest_omit_time_left.
func TestOmitTimeLeft(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	put(t, c, 0, 0, 5, "a", 1)
	mustSend(t, c, "stats-job 1\r\n")
	expectYAMLContains(t, c, "\ntime-left: 0\n")
}

// Upstream's cttest_stats_tube.
func TestStatsTube(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	runSteps(t, c, []step{
		{"use tubea\r\n", "USING tubea\r\n"},
		{"put 0 0 0 1\r\nx\r\n", "INSERTED 1\r\n"},
		{"delete 1\r\n", "DELETED\r\n"},
	})
	tube := func(name string, totalJobs, using, watching, cmdDelete int) string {
		return yamlReply(fmt.Sprintf("---\nname: %s\ncurrent-jobs-urgent: 0\ncurrent-jobs-ready: 0\n"+
			"current-jobs-reserved: 0\ncurrent-jobs-delayed: 0\ncurrent-jobs-buried: 0\ntotal-jobs: %d\n"+
			"current-using: %d\ncurrent-watching: %d\ncurrent-waiting: 0\ncmd-delete: %d\ncmd-pause-tube: 0\n"+
			"pause: 0\npause-time-left: 0\n", q(name), totalJobs, using, watching, cmdDelete))
	}
	runSteps(t, c, []step{
		{"stats-tube tubea\r\n", tube("tubea", 1, 1, 0, 1)},
		{"stats-tube default\r\n", tube("default", 0, 0, 1, 0)},
	})
}

// stats-tube with jobs, waiters and a pause, exact.
func TestStatsTubeExact(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := s.dial(t)
	w := s.dial(t)
	runSteps(t, c, []step{
		{"use t\r\n", "USING t\r\n"},
		{"put 5 0 100 1\r\na\r\n", "INSERTED 1\r\n"},
		{"put 5000 0 100 1\r\nb\r\n", "INSERTED 2\r\n"},
		{"put 5 100 100 1\r\nc\r\n", "INSERTED 3\r\n"},
		{"put 5 0 100 1\r\nd\r\n", "INSERTED 4\r\n"},
		{"reserve-job 4\r\n", "RESERVED 4 1\r\nd\r\n"},
		{"bury 4 5\r\n", "BURIED\r\n"},
		{"put 5 0 100 1\r\ne\r\n", "INSERTED 5\r\n"},
		{"reserve-job 5\r\n", "RESERVED 5 1\r\ne\r\n"},
		{"pause-tube t 10\r\n", "PAUSED\r\n"},
	})
	runSteps(t, w, []step{{"watch t\r\n", "WATCHING 2\r\n"}})
	mustSend(t, w, "reserve-with-timeout 100\r\n")
	waitWaiting(t, c, 1)
	mustSend(t, c, "stats-tube t\r\n")
	body := readYAML(t, c)
	want := "---\nname: " + q("t") + "\ncurrent-jobs-urgent: 1\ncurrent-jobs-ready: 2\ncurrent-jobs-reserved: 1\n" +
		"current-jobs-delayed: 1\ncurrent-jobs-buried: 1\ntotal-jobs: 5\ncurrent-using: 1\ncurrent-watching: 1\n" +
		"current-waiting: 1\ncmd-delete: 0\ncmd-pause-tube: 1\npause: 10\npause-time-left: *\n"
	if got := maskYAML(body, "pause-time-left"); got != want {
		t.Fatalf("stats-tube t:%s", diffMsg(want, got))
	}
	timeLeftNear(t, map[string]string{"time-left": yamlMap(t, body)["pause-time-left"]}, 9)
}

// Upstream's cttest_ttrlarge: large ttr values survive (no 32-bit
// microsecond overflow).
func TestTTRLarge(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	ttrs := []int{120, 4294, 4295, 4296, 4297, 5000, 21600}
	for i, ttr := range ttrs {
		put(t, c, 0, 0, ttr, "a", uint64(i+1))
	}
	for i, ttr := range ttrs {
		mustSend(t, c, fmt.Sprintf("stats-job %d\r\n", i+1))
		expectYAMLContains(t, c, fmt.Sprintf("\nttr: %d\n", ttr))
	}
}

// Upstream's cttest_ttr_small: ttr 0 becomes 1.
func TestTTRSmall(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	put(t, c, 0, 0, 0, "a", 1)
	mustSend(t, c, "stats-job 1\r\n")
	expectYAMLContains(t, c, "\nttr: 1\n")
}

// A failed pause-tube with a leading '-' is still counted in the
// global cmd-pause-tube.
func TestPauseTubeCountedBeforeNameCheck(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	runSteps(t, c, []step{
		{"pause-tube -foo 1\r\n", "BAD_FORMAT\r\n"},
		{"pause-tube x\r\n", "BAD_FORMAT\r\n"},
		{"pause-tube default 0\r\n", "PAUSED\r\n"},
	})
	st := stats(t, c)
	if st["cmd-pause-tube"] != "2" {
		t.Fatalf("cmd-pause-tube: %s, want 2", st["cmd-pause-tube"])
	}
}

// A connection counts in total-connections (and current-connections) from
// the moment the kernel hands it over, as in C: stats on the second of two
// connections just opened counts both, though the first may still be on
// its way to another event loop. Many rounds, as the race is brief.
func TestStatsCountsConnectionsOnceAccepted(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for i := 1; i <= 500; i++ {
		a, b := s.dial(t), s.dial(t)
		st := stats(t, b)
		if st["total-connections"] != itoa(2*i) {
			t.Fatalf("round %d: total-connections %s right after two connections opened, want %d",
				i, st["total-connections"], 2*i)
		}
		if cur, _ := strconv.Atoi(st["current-connections"]); cur < 2 {
			t.Fatalf("round %d: current-connections %d with two open", i, cur)
		}
		a.nc.Close()
		b.nc.Close()
	}
}
