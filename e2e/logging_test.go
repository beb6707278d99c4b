package e2e

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// --log-json writes one JSON object a line (for log shippers), with the
// level, the time to the millisecond and the message, instead of the
// console format.
func TestLogJSONWritesOneObjectALine(t *testing.T) {
	skipUnlessBeanpole(t, "--log-json is beanpole's")
	t.Parallel()
	s := startServer(t, "--log-json", "-V")
	roundTrip(t, s.dial(t), defaultTimeout)
	s.signal(t, syscall.SIGTERM)
	<-s.exited
	out := strings.TrimSpace(s.out.String())
	if out == "" {
		t.Fatal("no log lines with -V")
	}
	for _, line := range strings.Split(out, "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON object: %q (%v)", line, err)
		}
		for _, k := range []string{"level", "time", "message"} {
			if _, ok := m[k]; !ok {
				t.Fatalf("%q lacks %q", line, k)
			}
		}
		if ts, _ := m["time"].(string); !logTimeRE.MatchString(ts) {
			t.Fatalf("%q: time %q is not RFC 3339 with milliseconds", line, ts)
		}
	}
}

// logTimeRE is the time of every log line, the server's and beanpole
// import's, console and JSON: RFC 3339 with milliseconds.
var logTimeRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)$`)

// consoleLineRE is one line of the console format: time, level, message
// and fields.
var consoleLineRE = regexp.MustCompile(`^(\S+) ([A-Z]{3}) (.*)$`)

// consoleLines splits console log output into lines, failing on a line
// whose time is not logTimeRE's.
func consoleLines(t *testing.T, out string) (levels, texts []string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		m := consoleLineRE.FindStringSubmatch(line)
		if m == nil || !logTimeRE.MatchString(m[1]) {
			t.Fatalf("not a console log line with a millisecond time: %q\nall output:\n%s", line, out)
		}
		levels, texts = append(levels, m[2]), append(texts, m[3])
	}
	return levels, texts
}

// cBinlogOf has C beanstalkd leave a binlog of n jobs in dir.
func cBinlogOf(t *testing.T, dir string, n int) {
	t.Helper()
	if _, err := os.Stat(referenceBin); err != nil {
		t.Skipf("C beanstalkd not installed (apt-get install beanstalkd): %v", err)
	}
	c, err := startProcRetry(referenceBin, "tcp", "", []string{"-b", dir})
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop()
	cc := c.dial(t)
	for i := 1; i <= n; i++ {
		put(t, cc, 0, 0, 60, "job", uint64(i))
	}
	c.signal(t, syscall.SIGTERM)
	<-c.exited
}

// At the default verbosity the server says, once each and nothing else:
// where it listens (every address), the upstream binlog imported (jobs,
// files, where they went), the binlog replayed (jobs, time taken), drain
// (SIGUSR1) and stop (SIGTERM).
func TestDefaultLogSaysEachStepOnce(t *testing.T) {
	skipUnlessBeanpole(t, "beanpole's log")
	t.Parallel()
	dir := t.TempDir()
	cBinlogOf(t, dir, 2)
	hp, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(hp))
	s := startServer(t, "-b", dir, "--http", httpAddr)
	waitFor(t, 10*time.Second, "the replay's log line", func() bool { return strings.Contains(s.out.String(), "binlog replayed") })
	s.signal(t, syscall.SIGUSR1)
	waitFor(t, 10*time.Second, "the drain's log line", func() bool { return strings.Contains(s.out.String(), "drain mode") })
	s.signal(t, syscall.SIGTERM)
	<-s.exited

	levels, texts := consoleLines(t, s.out.String())
	want := []*regexp.Regexp{
		regexp.MustCompile(`^listening addr=` + regexp.QuoteMeta(s.addr) + ` pid=\d+$`),
		regexp.MustCompile(`^listening: the dashboard, /metrics, /healthz and /readyz actions=false addr=http://` + regexp.QuoteMeta(httpAddr) + `$`),
		regexp.MustCompile(`^imported upstream beanstalkd's binlog files=1 jobs=2 moved-to=` + regexp.QuoteMeta(filepath.Join(dir, "beanstalkd-import")) + `$`),
		regexp.MustCompile(`^binlog replayed jobs=2 max-id=2 problems=0 records=\d+ segments=\d+ took=[0-9.]+[µm]?s$`),
		regexp.MustCompile(`^drain mode \(SIGUSR1\): puts are refused from now on$`),
		regexp.MustCompile(`^stopping: no new connections after the grace, the binlog is flushed signal=terminated stop-grace=1s$`),
	}
	if len(texts) != len(want) {
		t.Fatalf("%d log lines, want %d:\n%s", len(texts), len(want), s.out.String())
	}
	for i, re := range want {
		if levels[i] != "INF" || !re.MatchString(texts[i]) {
			t.Errorf("line %d: %s %q, want INF and %s", i+1, levels[i], texts[i], re)
		}
	}
}

// gnet's own lines (its event loops starting and stopping) come only at
// -VV and above; -V has the details of beanpole's own.
func TestGnetLogsOnlyAtVV(t *testing.T) {
	skipUnlessBeanpole(t, "beanpole's log")
	t.Parallel()
	for _, v := range []string{"-V", "-VV"} {
		s := startServer(t, v)
		roundTrip(t, s.dial(t), defaultTimeout)
		s.signal(t, syscall.SIGTERM)
		<-s.exited
		out := s.out.String()
		consoleLines(t, out)
		if got, want := strings.Contains(out, "component=gnet"), v == "-VV"; got != want {
			t.Errorf("%s: gnet's lines present %v, want %v:\n%s", v, got, want, out)
		}
		if !strings.Contains(out, "open-file limit raised") {
			t.Errorf("%s: no details:\n%s", v, out)
		}
	}
}

// beanpole import logs in the server's format: its warning when it
// finishes an import a crash interrupted has the same millisecond time.
func TestImportLogsInTheServersFormat(t *testing.T) {
	skipUnlessBeanpole(t, "beanpole import is beanpole's")
	t.Parallel()
	dir := t.TempDir()
	cBinlogOf(t, dir, 1)
	if out, code := runBeanpole(t, "BEANPOLE_IMPORT_CRASH_AFTER=marked", "import", "-b", dir); code != 70 {
		t.Fatalf("beanpole import did not stop after marked: exit %d\n%s", code, out)
	}
	cmd := serverCommand("import", "-b", dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	expectNoRace(t, cmd, stderr.String())
	if err != nil || !strings.Contains(string(stdout), "finished an import that a crash had interrupted") {
		t.Fatalf("beanpole import: %v\n%s%s", err, stdout, stderr.String())
	}
	levels, texts := consoleLines(t, stderr.String())
	if len(levels) != 1 || levels[0] != "WRN" || !strings.Contains(texts[0], "an import of upstream beanstalkd's binlog that a crash interrupted") {
		t.Fatalf("stderr, want one warning:\n%s", stderr.String())
	}
}
