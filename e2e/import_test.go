package e2e

// Switching from beanstalkd: beanpole started on a directory where C
// beanstalkd kept its binlog carries every live job over (id, tube, state,
// priority, delay, TTR, counters, age, body), never reuses an id, moves the
// upstream files to DIR/beanstalkd-import/, and does all of it once, even
// when killed half-way. The binlogs are real: C beanstalkd writes them in
// the test.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const cBeanstalkd = "/usr/bin/beanstalkd"

// upstreamJob is what C reported about a job before it stopped.
type upstreamJob struct {
	stats map[string]string
	body  string
}

// makeUpstreamBinlog has C beanstalkd leave jobs in every state in dir
// over several tubes and rotated files (put, delete, release with a delay,
// bury, kick, kick-job, touch, pause-tube), then kills it with sig. It returns
// the live jobs as C reported them, the ids it deleted, and the highest id.
func makeUpstreamBinlog(t *testing.T, dir string, sig syscall.Signal) (map[uint64]upstreamJob, []uint64, uint64) {
	t.Helper()
	if _, err := os.Stat(cBeanstalkd); err != nil {
		t.Skipf("C beanstalkd not installed (apt-get install beanstalkd): %v", err)
	}
	s, err := startProcRetry(cBeanstalkd, "tcp", "", []string{"-b", dir, "-s", "10000"})
	if err != nil {
		t.Fatal(err)
	}
	c := s.dial(t)
	id := uint64(0)
	putIn := func(tube string, pri, delay, ttr int, body string) uint64 {
		mustSend(t, c, "use "+tube+"\r\n")
		expect(t, c, "USING "+tube+"\r\n")
		id++
		put(t, c, pri, delay, ttr, body, id)
		return id
	}
	reserve := func(_ string, want uint64) {
		mustSend(t, c, fmt.Sprintf("reserve-job %d\r\n", want))
		if line := readLine(t, c); !strings.HasPrefix(line, fmt.Sprintf("RESERVED %d ", want)) {
			t.Fatalf("reserve-job %d: %s", want, show(line))
		}
		readLine(t, c) // the body
	}
	var deleted []uint64
	del := func(id uint64) {
		mustSend(t, c, fmt.Sprintf("delete %d\r\n", id))
		expect(t, c, "DELETED\r\n")
		deleted = append(deleted, id)
	}
	// default: ready, delayed, buried, released with a delay, reserved.
	putIn("default", 100, 0, 60, "ready")
	putIn("default", 5, 3600, 30, "delayed")
	b := putIn("default", 7, 0, 60, "buried")
	r := putIn("default", 0, 0, 60, "to release")
	reserve("default", r)
	mustSend(t, c, fmt.Sprintf("release %d 9 600\r\n", r))
	expect(t, c, "RELEASED\r\n")
	reserve("default", b)
	mustSend(t, c, fmt.Sprintf("bury %d 8\r\n", b))
	expect(t, c, "BURIED\r\n")
	held := putIn("default", 1, 0, 120, "reserved when C stopped")
	reserve("default", held)
	// Neither is logged by C: they must not disturb the import.
	mustSend(t, c, fmt.Sprintf("touch %d\r\npause-tube default 1\r\n", held))
	expect(t, c, "TOUCHED\r\nPAUSED\r\n")
	// mail: deleted, kicked, kicked by id, two buried in order.
	del(putIn("mail", 0, 0, 60, "deleted"))
	k := putIn("mail", 3, 0, 60, "kicked")
	kj := putIn("mail", 4, 0, 60, "kick-job")
	reserve("mail", k)
	mustSend(t, c, fmt.Sprintf("bury %d 3\r\n", k))
	expect(t, c, "BURIED\r\n")
	mustSend(t, c, "use mail\r\nkick 1\r\n")
	expect(t, c, "USING mail\r\nKICKED 1\r\n")
	reserve("mail", kj)
	mustSend(t, c, fmt.Sprintf("bury %d 4\r\nkick-job %d\r\n", kj, kj))
	expect(t, c, "BURIED\r\nKICKED\r\n")
	b1, b2 := putIn("mail", 50, 0, 60, "buried first"), putIn("mail", 40, 0, 60, "buried second")
	for _, x := range []uint64{b1, b2} {
		reserve("mail", x)
		mustSend(t, c, fmt.Sprintf("bury %d 50\r\n", x))
		expect(t, c, "BURIED\r\n")
	}
	// big: enough bytes to rotate C's 10 kB files many times; half deleted.
	body := strings.Repeat("b", 700)
	for i := 0; i < 40; i++ {
		x := putIn("big", i, 0, 60, fmt.Sprintf("%03d%s", i, body))
		if i%2 == 0 {
			del(x)
		}
	}
	del(putIn("default", 0, 0, 60, "the highest id, deleted"))

	live := map[uint64]upstreamJob{}
	for x := uint64(1); x <= id; x++ {
		mustSend(t, c, fmt.Sprintf("peek %d\r\n", x))
		line := readLine(t, c)
		if line == "NOT_FOUND" {
			continue
		}
		var n int
		fmt.Sscanf(line, "FOUND %d %d", new(uint64), &n)
		body := readN(t, c, n+2, defaultTimeout)
		live[x] = upstreamJob{stats: statsJob(t, c, x), body: body}
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	<-s.exited
	return live, deleted, id
}

// checkImported compares beanpole's view of every job with C's.
func checkImported(t *testing.T, c *conn, live map[uint64]upstreamJob, deleted []uint64, maxID uint64, sinceC time.Duration) {
	t.Helper()
	for id, want := range live {
		got := statsJob(t, c, id)
		state := want.stats["state"]
		if state == "reserved" {
			state = "ready" // as upstream restarts it
		}
		if got["state"] != state {
			t.Errorf("job %d: state %s, C had %s", id, got["state"], want.stats["state"])
		}
		keys := []string{"tube", "pri", "delay", "ttr", "timeouts", "releases", "buries", "kicks"}
		if want.stats["state"] != "reserved" {
			keys = append(keys, "reserves") // a reservation is not logged by C
		}
		for _, k := range keys {
			if strings.Trim(got[k], `"`) != strings.Trim(want.stats[k], `"`) {
				t.Errorf("job %d: %s %s, C had %s", id, k, got[k], want.stats[k])
			}
		}
		age, _ := strconv.Atoi(got["age"])
		cAge, _ := strconv.Atoi(want.stats["age"])
		if slack := int(sinceC/time.Second) + 2; age < cAge || age > cAge+slack {
			t.Errorf("job %d: age %d, C had %d (%v ago)", id, age, cAge, sinceC)
		}
		if state == "delayed" {
			left, _ := strconv.Atoi(got["time-left"])
			cLeft, _ := strconv.Atoi(want.stats["time-left"])
			if left > cLeft || left < cLeft-int(sinceC/time.Second)-2 {
				t.Errorf("job %d: time-left %d, C had %d", id, left, cLeft)
			}
		}
		mustSend(t, c, fmt.Sprintf("peek %d\r\n", id))
		expect(t, c, fmt.Sprintf("FOUND %d %d\r\n%s", id, len(want.body)-2, want.body))
	}
	for _, id := range deleted {
		mustSend(t, c, fmt.Sprintf("peek %d\r\n", id))
		expect(t, c, "NOT_FOUND\r\n")
	}
	// Buried jobs come out of a kick in the order C buried them.
	mustSend(t, c, "use mail\r\npeek-buried\r\n")
	expect(t, c, "USING mail\r\n")
	if line := readLine(t, c); !strings.HasPrefix(line, "FOUND ") {
		t.Fatalf("peek-buried in mail: %s", show(line))
	} else {
		var first uint64
		fmt.Sscanf(line, "FOUND %d", &first)
		readLine(t, c)
		if live[first].body != "buried first\r\n" {
			t.Errorf("the first buried job in mail is %d (%q)", first, live[first].body)
		}
	}
	// Ids go on after the highest C handed out, deleted or not.
	put(t, c, 0, 0, 60, "after the import", maxID+1)
}

func TestImportUpstreamBinlog(t *testing.T) {
	skipUnlessBeanpole(t, "the import of an upstream binlog is beanpole's")
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			live, deleted, maxID := makeUpstreamBinlog(t, dir, sig)
			stopped := time.Now()
			files, _ := filepath.Glob(filepath.Join(dir, "binlog.*"))
			if len(files) < 3 {
				t.Fatalf("C left %d binlog files, want several (rotation)", len(files))
			}
			out, err := exec.Command(target.bin, "import", "-b", dir, "--dry-run").CombinedOutput()
			if err != nil || !strings.Contains(string(out), fmt.Sprintf("%d jobs to carry over", len(live))) ||
				!strings.Contains(string(out), `tube "mail": 2 ready, 0 delayed, 2 buried`) {
				t.Fatalf("dry run: %v\n%s", err, out)
			}
			if after, _ := filepath.Glob(filepath.Join(dir, "binlog.*")); len(after) != len(files) {
				t.Fatalf("the dry run changed the directory: %d files, then %d", len(files), len(after))
			}

			s := startServer(t, "-b", dir)
			checkImported(t, s.dial(t), live, deleted, maxID, time.Since(stopped))
			moved, _ := filepath.Glob(filepath.Join(dir, "beanstalkd-import", "binlog.*"))
			if len(moved) != len(files) {
				t.Errorf("%d upstream files in beanstalkd-import/, want %d", len(moved), len(files))
			}
			s.signal(t, syscall.SIGTERM)
			<-s.exited

			// A second start reads beanpole's own log: nothing twice.
			s = startServer(t, "-b", dir)
			c := s.dial(t)
			st := stats(t, c)
			if want := strconv.Itoa(len(live) + 1); st["current-jobs-ready"]+st["current-jobs-buried"]+st["current-jobs-delayed"] == "" ||
				atoi(t, st["current-jobs-ready"])+atoi(t, st["current-jobs-buried"])+atoi(t, st["current-jobs-delayed"]) != len(live)+1 {
				t.Fatalf("after a restart: %s ready, %s buried, %s delayed; want %s jobs in all",
					st["current-jobs-ready"], st["current-jobs-buried"], st["current-jobs-delayed"], want)
			}
		})
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}

// Killed at each step of the import, the next start finishes it: every
// job once, the upstream files moved, nothing left of the staging.
func TestImportSurvivesACrashAtEveryStep(t *testing.T) {
	skipUnlessBeanpole(t, "the import of an upstream binlog is beanpole's")
	dir := t.TempDir()
	live, deleted, maxID := makeUpstreamBinlog(t, dir, syscall.SIGKILL)
	stopped := time.Now()
	for _, step := range []string{"staged", "marked", "archived"} {
		t.Run(step, func(t *testing.T) {
			d := filepath.Join(t.TempDir(), "binlog")
			if out, err := exec.Command("cp", "-a", dir, d).CombinedOutput(); err != nil {
				t.Fatalf("cp: %v %s", err, out)
			}
			port, _ := freePort()
			cmd := serverCommand("-l", "127.0.0.1", "-p", strconv.Itoa(port), "-b", d)
			cmd.Env = append(cmd.Env, "BEANPOLE_IMPORT_CRASH_AFTER="+step)
			out, _ := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != 70 {
				t.Fatalf("the import did not stop after %s: exit %d\n%s", step, code, out)
			}
			s := startServer(t, "-b", d)
			checkImported(t, s.dial(t), live, deleted, maxID, time.Since(stopped))
			if _, err := os.Stat(filepath.Join(d, ".beanstalkd-import.tmp")); !os.IsNotExist(err) {
				t.Errorf("the staging directory is still there: %v", err)
			}
		})
	}
}
