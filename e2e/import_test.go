package e2e

// Switching from beanstalkd: beanpole started on a directory where C
// beanstalkd kept its binlog carries every live job over (id, tube, state,
// priority, delay, TTR, counters, age, body, buried order), never reuses an
// id, moves the upstream files to DIR/beanstalkd-import/, does it once,
// finishes it when killed half-way, and refuses a damaged binlog naming the
// file, the offset and the jobs. The binlogs are real: C beanstalkd writes
// them in the tests.

import (
	"encoding/binary"
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

// cJob is what C reported about a live job just before it stopped.
type cJob struct {
	stats map[string]string
	body  string // CRLF included
}

// cBinlog is what C left behind: its live jobs, the ids it deleted, the
// highest id it handed out, and when the reading of its job stats began.
type cBinlog struct {
	live    map[uint64]cJob
	deleted []uint64
	maxID   uint64
	held    uint64 // reserved when C stopped
	// read is when the reading of C's job stats began: every age and
	// time-left C reported was read after it.
	read time.Time
}

// cClient drives C beanstalkd over one connection.
type cClient struct {
	t       *testing.T
	c       *conn
	id      uint64
	deleted []uint64
}

func (k *cClient) cmd(line, reply string) {
	k.t.Helper()
	mustSend(k.t, k.c, line+"\r\n")
	expect(k.t, k.c, reply+"\r\n")
}

func (k *cClient) put(tube string, pri, delay, ttr int, body string) uint64 {
	k.t.Helper()
	k.cmd("use "+tube, "USING "+tube)
	k.id++
	put(k.t, k.c, pri, delay, ttr, body, k.id)
	return k.id
}

func (k *cClient) reserve(id uint64) {
	k.t.Helper()
	mustSend(k.t, k.c, fmt.Sprintf("reserve-job %d\r\n", id))
	if line := readLine(k.t, k.c); !strings.HasPrefix(line, fmt.Sprintf("RESERVED %d ", id)) {
		k.t.Fatalf("reserve-job %d: %s", id, show(line))
	}
	readLine(k.t, k.c)
}

func (k *cClient) bury(id uint64, pri int) {
	k.t.Helper()
	k.reserve(id)
	k.cmd(fmt.Sprintf("bury %d %d", id, pri), "BURIED")
}

func (k *cClient) del(id uint64) {
	k.t.Helper()
	k.cmd(fmt.Sprintf("delete %d", id), "DELETED")
	k.deleted = append(k.deleted, id)
}

// makeCBinlog has C beanstalkd (-s 10000: many small files) leave jobs in
// every state, over several tubes, through put, delete, release with and
// without a delay, bury, kick, kick-job, touch, pause-tube, a TTR timeout
// and enough churn to rotate and compact its files, then stops it with
// sig. It takes a little over a second: a TTR and a delay must run out.
func makeCBinlog(t *testing.T, dir string, sig syscall.Signal) cBinlog {
	t.Helper()
	if _, err := os.Stat(referenceBin); err != nil {
		t.Skipf("C beanstalkd not installed (apt-get install beanstalkd): %v", err)
	}
	s, err := startProcRetry(referenceBin, "tcp", "", []string{"-b", dir, "-s", "10000"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	k := &cClient{t: t, c: s.dial(t)}
	start := time.Now()

	// default: these records end up in files that compaction empties, so
	// the jobs are moved forward (full records again, in their state).
	k.put("default", 100, 0, 60, "ready")
	k.put("default", 5, 3600, 30, "delayed")
	k.bury(k.put("default", 7, 0, 60, "buried"), 8)
	released := k.put("default", 0, 0, 60, "released with a delay")
	k.reserve(released)
	k.cmd(fmt.Sprintf("release %d 9 600", released), "RELEASED")
	timedOut := k.put("default", 2, 0, 1, "its TTR ran out")
	k.reserve(timedOut)
	ranOut := k.put("default", 3, 1, 60, "its delay ran out")
	held := k.put("default", 1, 0, 3600, "reserved when C stopped")
	k.reserve(held)
	// Neither is logged by C: they must not disturb the import.
	k.cmd(fmt.Sprintf("touch %d", held), "TOUCHED")
	k.cmd("pause-tube default 1", "PAUSED")

	// churn: rotates C's 10 kB files many times; big keeps some.
	for i := 0; i < 120; i++ {
		id := k.put("churn", i, 0, 60, fmt.Sprintf("%03d%s", i, strings.Repeat("c", 700)))
		k.del(id)
		if i%10 == 0 {
			k.put("big", i, 0, 60, fmt.Sprintf("%03d%s", i, strings.Repeat("b", 700)))
		}
	}

	// mail: after the churn, so that the bury records stay.
	k.del(k.put("mail", 0, 0, 60, "deleted"))
	kicked := k.put("mail", 3, 0, 60, "kicked")
	k.bury(kicked, 3)
	k.cmd("use mail", "USING mail")
	k.cmd("kick 1", "KICKED 1")
	kj := k.put("mail", 4, 0, 60, "kick-job")
	k.bury(kj, 4)
	k.cmd(fmt.Sprintf("kick-job %d", kj), "KICKED")
	first, second := k.put("mail", 50, 0, 60, "buried second"), k.put("mail", 40, 0, 60, "buried first")
	k.bury(second, 40)
	k.bury(first, 50)
	k.cmd(fmt.Sprintf("kick-job %d", k.put("mail", 6, 3600, 60, "kicked while delayed")), "KICKED")
	rel0 := k.put("mail", 9, 0, 60, "released without a delay, then buried")
	k.reserve(rel0)
	k.cmd(fmt.Sprintf("release %d 2 0", rel0), "RELEASED") // not logged by C
	k.bury(rel0, 2)

	// The TTR and the delay of one second run out: waited for, not slept
	// for, so that a loaded machine cannot outrun C's timers.
	for statsJob(t, k.c, timedOut)["state"] != "ready" || statsJob(t, k.c, ranOut)["state"] != "ready" {
		if time.Since(start) > 30*time.Second {
			t.Fatal("C's TTR and delay of one second did not run out in 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	k.bury(timedOut, 2)
	k.del(k.put("default", 0, 0, 60, "the highest id, deleted"))

	b := cBinlog{live: map[uint64]cJob{}, deleted: k.deleted, maxID: k.id, held: held, read: time.Now()}
	for id := uint64(1); id <= k.id; id++ {
		mustSend(t, k.c, fmt.Sprintf("peek %d\r\n", id))
		line := readLine(t, k.c)
		if line == "NOT_FOUND" {
			continue
		}
		var n int
		fmt.Sscanf(line, "FOUND %d %d", new(uint64), &n)
		body := readN(t, k.c, n+2, defaultTimeout)
		b.live[id] = cJob{stats: statsJob(t, k.c, id), body: body}
	}
	st := stats(t, k.c)
	if st["binlog-records-migrated"] == "0" || st["binlog-oldest-index"] == st["binlog-current-index"] {
		t.Fatalf("C neither compacted nor kept several files: %v", st)
	}
	if b.live[timedOut].stats["timeouts"] != "1" || b.live[held].stats["state"] != "reserved" {
		t.Fatalf("the scenario did not go as planned: %v, %v", b.live[timedOut].stats, b.live[held].stats)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	<-s.exited
	return b
}

// check compares beanpole's view of every job with what C reported.
// Ages and times left move with the clock: they may differ from C's by
// the whole seconds that passed between C's reading of them and the last
// of beanpole's, measured once every job has been read (so that a loaded
// machine, slow to answer or to schedule the test, is allowed for), plus
// one for the rounding of either side.
func (b cBinlog) check(t *testing.T, c *conn) {
	t.Helper()
	stats := map[uint64]map[string]string{}
	for id, want := range b.live {
		stats[id] = statsJob(t, c, id)
		mustSend(t, c, fmt.Sprintf("peek %d\r\n", id))
		expect(t, c, fmt.Sprintf("FOUND %d %d\r\n%s", id, len(want.body)-2, want.body))
	}
	since := int((time.Since(b.read)+time.Second-1)/time.Second) + 1
	for id, want := range b.live {
		got := stats[id]
		state := want.stats["state"]
		if state == "reserved" {
			state = "ready" // as C restarts it
		}
		if got["state"] != state {
			t.Errorf("job %d: state %s, C had %s", id, got["state"], want.stats["state"])
		}
		for _, k := range []string{"tube", "pri", "delay", "ttr", "timeouts", "releases", "buries", "kicks"} {
			if unquote(got[k]) != unquote(want.stats[k]) {
				t.Errorf("job %d: %s %s, C had %s", id, k, got[k], want.stats[k])
			}
		}
		// C does not log a reservation: the job held when it stopped may
		// have one less, unless compaction moved it while reserved.
		if r, cr := atoi(t, got["reserves"]), atoi(t, want.stats["reserves"]); r != cr && (id != b.held || r != cr-1) {
			t.Errorf("job %d: reserves %d, C had %d", id, r, cr)
		}
		if age, cAge := atoi(t, got["age"]), atoi(t, want.stats["age"]); age < cAge || age > cAge+since {
			t.Errorf("job %d: age %d, C had %d (%d s allowed)", id, age, cAge, since)
		}
		if state == "delayed" {
			if left, cLeft := atoi(t, got["time-left"]), atoi(t, want.stats["time-left"]); left > cLeft || left < cLeft-since {
				t.Errorf("job %d: time-left %d, C had %d (%d s allowed)", id, left, cLeft, since)
			}
		}
	}
	for _, id := range b.deleted {
		mustSend(t, c, fmt.Sprintf("peek %d\r\n", id))
		expect(t, c, "NOT_FOUND\r\n")
	}
	// Buried jobs come back in the order C buried them.
	mustSend(t, c, "use mail\r\npeek-buried\r\n")
	expect(t, c, "USING mail\r\n")
	line := readLine(t, c)
	readLine(t, c)
	var first uint64
	if _, err := fmt.Sscanf(line, "FOUND %d", &first); err != nil || b.live[first].body != "buried first\r\n" {
		t.Errorf("peek-buried in mail: %s (%q), want the job buried first", show(line), b.live[first].body)
	}
}

// counts is the dry run's line of totals for the live jobs.
func (b cBinlog) counts() string {
	n := map[string]int{}
	for _, j := range b.live {
		n[strings.Replace(j.stats["state"], "reserved", "ready", 1)]++
	}
	return fmt.Sprintf("%d jobs to carry over: %d ready, %d delayed, %d buried; ids up to %d, the next job gets %d",
		len(b.live), n["ready"], n["delayed"], n["buried"], b.maxID, b.maxID+1)
}

func binlogFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "binlog.*"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func runBeanpole(t *testing.T, env string, args ...string) (string, int) {
	t.Helper()
	cmd := serverCommand(args...)
	if env != "" {
		cmd.Env = append(cmd.Env, env)
	}
	out, _ := cmd.CombinedOutput()
	expectNoRace(t, cmd, string(out))
	return string(out), cmd.ProcessState.ExitCode()
}

// Stopped by SIGTERM or by kill -9, C's binlog is carried over whole: the
// dry run says what will be, changing nothing; beanpole import, or the
// server's start, imports it and every job is as C had it; ids go on after
// C's highest; a restart reads beanpole's own log and imports nothing
// twice.
func TestImportFromBeanstalkd(t *testing.T) {
	t.Parallel()
	skipUnlessBeanpole(t, "the import of an upstream binlog is beanpole's")
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			b := makeCBinlog(t, dir, sig)
			files := binlogFiles(t, dir)

			out, code := runBeanpole(t, "", "import", "-b", dir, "--dry-run")
			if code != 0 || !strings.Contains(out, b.counts()) || !strings.Contains(out, "dry run: nothing changed") ||
				!strings.Contains(out, `tube "mail": 3 ready, 0 delayed, 3 buried`) || strings.Contains(out, "damage") {
				t.Fatalf("dry run (exit %d), want %q:\n%s", code, b.counts(), out)
			}
			if after := binlogFiles(t, dir); len(after) != len(files) {
				t.Fatalf("the dry run changed the directory: %v, then %v", files, after)
			}

			// Once by beanpole import, once by the server's start.
			if sig == syscall.SIGTERM {
				out, code := runBeanpole(t, "", "import", "-b", dir)
				if code != 0 || !strings.Contains(out, b.counts()) || !strings.Contains(out, "imported; beanstalkd's files are in") {
					t.Fatalf("beanpole import (exit %d):\n%s", code, out)
				}
			}
			s := startServer(t, "-b", dir)
			c := s.dial(t)
			b.check(t, c)
			put(t, c, 0, 0, 60, "after the import", b.maxID+1)
			if moved := binlogFiles(t, filepath.Join(dir, "beanstalkd-import")); len(moved) != len(files) {
				t.Errorf("beanstalkd-import/ holds %v, want the %d files C left", moved, len(files))
			}
			s.signal(t, syscall.SIGTERM)
			<-s.exited

			s = startServer(t, "-b", dir)
			c = s.dial(t)
			b.check(t, c)
			st := stats(t, c)
			if n := atoi(t, st["current-jobs-ready"]) + atoi(t, st["current-jobs-delayed"]) + atoi(t, st["current-jobs-buried"]); n != len(b.live)+1 {
				t.Errorf("after a restart %d jobs, want %d", n, len(b.live)+1)
			}
			put(t, c, 0, 0, 60, "after a restart", b.maxID+2)
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

// Killed just after each step of the import (the server, or beanpole
// import), the next run finishes it: every job once, the upstream files
// aside, nothing left of the staging.
func TestImportFinishesAfterACrashAtEachStep(t *testing.T) {
	t.Parallel()
	skipUnlessBeanpole(t, "the import of an upstream binlog is beanpole's")
	src := t.TempDir()
	b := makeCBinlog(t, src, syscall.SIGKILL)
	for _, step := range []string{"writing", "staged", "marked", "archiving", "archived", "installing", "installed", "marked by beanpole import"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "binlog")
			if out, err := exec.Command("cp", "-a", src, dir).CombinedOutput(); err != nil {
				t.Fatalf("cp: %v %s", err, out)
			}
			crash := "BEANPOLE_IMPORT_CRASH_AFTER=" + strings.Fields(step)[0]
			if strings.HasSuffix(step, "beanpole import") {
				if out, code := runBeanpole(t, crash, "import", "-b", dir); code != 70 {
					t.Fatalf("beanpole import did not stop after %s: exit %d\n%s", step, code, out)
				}
				if out, code := runBeanpole(t, "", "import", "-b", dir); code != 0 || !strings.Contains(out, "finished an import that a crash had interrupted") {
					t.Fatalf("beanpole import after the crash: exit %d\n%s", code, out)
				}
			} else {
				port, _ := freePort()
				if out, code := runBeanpole(t, crash, "-l", "127.0.0.1", "-p", strconv.Itoa(port), "-b", dir); code != 70 {
					t.Fatalf("the import did not stop after %s: exit %d\n%s", step, code, out)
				}
			}
			s := startServer(t, "-b", dir)
			b.check(t, s.dial(t))
			if _, err := os.Stat(filepath.Join(dir, ".beanstalkd-import.tmp")); !os.IsNotExist(err) {
				t.Errorf("the staging directory is still there: %v", err)
			}
			if left := binlogFiles(t, filepath.Join(dir, "beanstalkd-import")); len(left) != len(binlogFiles(t, src)) {
				t.Errorf("beanstalkd-import/ holds %d files, want %d", len(left), len(binlogFiles(t, src)))
			}
		})
	}
}

// A record damaged in the middle of C's binlog makes beanpole refuse to
// start, naming the file, the offset and the jobs, and change nothing;
// the dry run shows it; beanpole import --accept-damage imports what C
// itself would have read. A record torn at the end of a file is left out
// with a warning and the server starts.
func TestImportDamagedBinlog(t *testing.T) {
	t.Parallel()
	skipUnlessBeanpole(t, "the import of an upstream binlog is beanpole's")
	if _, err := os.Stat(referenceBin); err != nil {
		t.Skipf("C beanstalkd not installed: %v", err)
	}
	src := t.TempDir()
	s, err := startProcRetry(referenceBin, "tcp", "", []string{"-b", src})
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	k := &cClient{t: t, c: s.dial(t)}
	bodies := []string{"first", "second", "third", "fourth"}
	for _, body := range bodies {
		k.put("t", 0, 0, 60, body)
	}
	s.signal(t, syscall.SIGTERM)
	<-s.exited
	// binlog.1: the version, then one record a put: namelen, "t", the
	// 80-byte job struct, the body and its CRLF.
	second := 4 + (4 + 1 + 80 + len(bodies[0]) + 2)
	last := second + 2*(4+1+80) + len(bodies[1]) + 2 + len(bodies[2]) + 2
	damage := func(t *testing.T, at int, b []byte) string {
		dir := filepath.Join(t.TempDir(), "binlog")
		if out, err := exec.Command("cp", "-a", src, dir).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
		path := filepath.Join(dir, "binlog.1")
		if err := os.Chmod(path, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(b, int64(at)); err != nil {
			t.Fatal(err)
		}
		return dir
	}

	t.Run("in the middle", func(t *testing.T) {
		dir := damage(t, second, binary.LittleEndian.AppendUint32(nil, 0x7f7f7f7f))
		port, _ := freePort()
		out, code := runBeanpole(t, "", "-l", "127.0.0.1", "-p", strconv.Itoa(port), "-b", dir)
		where := fmt.Sprintf("binlog.1 at offset %d: tube name length 2139062143 out of range", second)
		if code != 1 || !strings.Contains(out, where) || !strings.Contains(out, "changes there to jobs 3, 4 are lost") ||
			!strings.Contains(out, "--accept-damage") {
			t.Fatalf("exit %d, want 1 and %q:\n%s", code, where, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "beanstalkd-import")); !os.IsNotExist(err) || len(binlogFiles(t, dir)) == 0 {
			t.Fatalf("a refused import changed the directory (%v)", err)
		}
		out, code = runBeanpole(t, "", "import", "-b", dir, "--dry-run")
		if code != 0 || !strings.Contains(out, "damage: ") || !strings.Contains(out, where) || !strings.Contains(out, "would refuse") {
			t.Fatalf("dry run: exit %d\n%s", code, out)
		}
		if out, code = runBeanpole(t, "", "import", "-b", dir, "--accept-damage"); code != 0 || !strings.Contains(out, "1 jobs to carry over") {
			t.Fatalf("--accept-damage: exit %d\n%s", code, out)
		}
		srv := startServer(t, "-b", dir)
		c := srv.dial(t)
		mustSend(t, c, "peek 1\r\npeek 2\r\n")
		expect(t, c, "FOUND 1 5\r\nfirst\r\nNOT_FOUND\r\n")
		put(t, c, 0, 0, 60, "never id 3 or 4 again", 5)
	})

	// Read as version 5, C's records were damage from the first on (all
	// of them lost under --accept-damage, and what a probe under the
	// wrong layout finds is nonsense): the header is refused by name.
	t.Run("version 5 header on C's records", func(t *testing.T) {
		dir := damage(t, 0, []byte{5})
		want := "binlog import refused: " + dir + "/binlog.1: the header says binlog version 5, but the records are those of version 7 (4 of them read as version 7"
		out, code := runBeanpole(t, "", "import", "-b", dir, "--dry-run")
		if code != 1 || !strings.Contains(out, want) {
			t.Fatalf("dry run: exit %d, want 1 and %q:\n%s", code, want, out)
		}
		port, _ := freePort()
		if out, code = runBeanpole(t, "", "-l", "127.0.0.1", "-p", strconv.Itoa(port), "-b", dir); code != 1 || !strings.Contains(out, want) {
			t.Fatalf("server start: exit %d, want 1 and %q:\n%s", code, want, out)
		}
	})

	t.Run("torn tail", func(t *testing.T) {
		dir := damage(t, last+4+1+80+len(bodies[3]), []byte{0, 0}) // the last CRLF
		srv := startServer(t, "-b", dir)
		c := srv.dial(t)
		mustSend(t, c, "peek 3\r\npeek 4\r\n")
		expect(t, c, "FOUND 3 5\r\nthird\r\nNOT_FOUND\r\n")
		if out := srv.out.String(); !strings.Contains(out, "torn tail") || !strings.Contains(out, "job 4 is lost") {
			t.Errorf("no warning of the torn tail:\n%s", out)
		}
	})
}
