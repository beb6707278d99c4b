package e2e

// The binlog (-b DIR) seen from outside: upstream's binlog test cases
// (testserv.c), the improvements (docs/behaviour.md, 'Binlog') that need a
// restart to show (ids never reused, release with delay 0 keeping its priority,
// `buries` and buried order surviving, deleted jobs staying deleted,
// wall-clock delays), the stats fields, the directory lock, a missing
// directory and the graceful SIGTERM. Crashes under concurrent load and
// damaged files are in crash_test.go.
//
// "Restart" always means SIGKILL (kill -9) and a new process on the same
// directory: nothing here relies on a clean shutdown except the SIGTERM
// test. Tests that check a beanpole improvement skip for C beanstalkd 1.12.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// blStart starts a server on the binlog directory dir with the extra flags.
func blStart(t *testing.T, dir string, extra ...string) *server {
	t.Helper()
	return startServer(t, append([]string{"-b", dir}, extra...)...)
}

// blRestart kills s with SIGKILL, waits for it, and starts a new server on
// the same directory with the same flags.
func blRestart(t *testing.T, s *server, dir string, extra ...string) *server {
	t.Helper()
	s.stop()
	return blStart(t, dir, extra...)
}

// blRunToExit runs the binary (on a fresh port) with args, expecting it to
// exit by itself within 10 s, and returns its exit code and output.
func blRunToExit(t *testing.T, args ...string) (int, string) {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	cmd := serverCommand(append([]string{"-l", "127.0.0.1", "-p", itoa(port)}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%s: still running after 10s; output: %s", strings.Join(cmd.Args, " "), out.String())
	}
	expectNoRace(t, cmd, out.String())
	return cmd.ProcessState.ExitCode(), out.String()
}

// blExpectGone pipelines `peek id` for each id and expects NOT_FOUND for all.
func blExpectGone(t *testing.T, c *conn, ids []uint64) {
	t.Helper()
	for len(ids) > 0 {
		n := min(len(ids), 200)
		var b strings.Builder
		for _, id := range ids[:n] {
			fmt.Fprintf(&b, "peek %d\r\n", id)
		}
		mustSend(t, c, b.String())
		for _, id := range ids[:n] {
			if got := readLine(t, c); got != "NOT_FOUND" {
				t.Fatalf("peek %d: want NOT_FOUND (the job was deleted), got %s", id, show(got))
			}
		}
		ids = ids[n:]
	}
}

// blSegments lists DIR's binlog.N files by N.
func blSegments(t *testing.T, dir string) []int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int
	for _, e := range ents {
		if s, ok := strings.CutPrefix(e.Name(), "binlog."); ok {
			if n, err := strconv.Atoi(s); err == nil && n > 0 {
				seqs = append(seqs, n)
			}
		}
	}
	sort.Ints(seqs)
	return seqs
}

// blNonEmptySegments lists the binlog.N files holding at least one non-zero
// byte (both servers preallocate files with zeros ahead of need).
func blNonEmptySegments(t *testing.T, dir string) []int {
	t.Helper()
	var out []int
	for _, n := range blSegments(t, dir) {
		b, err := os.ReadFile(filepath.Join(dir, "binlog."+itoa(n)))
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.Trim(b, "\x00")) > 0 {
			out = append(out, n)
		}
	}
	return out
}

func blStatInt(t *testing.T, m map[string]string, key string) int {
	t.Helper()
	v, ok := m[key]
	if !ok {
		t.Fatalf("no %s in %v", key, m)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s: %q is not a number", key, v)
	}
	return n
}

// blExpectJob checks stats-job fields given as key → value.
func blExpectJob(t *testing.T, c *conn, id uint64, want map[string]string) {
	t.Helper()
	got := statsJob(t, c, id)
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("stats-job %d: %s is %q, want %q (all: %v)", id, k, got[k], v, got)
		}
	}
}

// blPutDeleteCycles puts n jobs with body, each deleted right after, as
// ids *id+1..*id+n (pipelined in batches), and advances *id.
func blPutDeleteCycles(t *testing.T, c *conn, body string, id *uint64, n int) {
	t.Helper()
	for n > 0 {
		k := min(n, 50)
		var send, want strings.Builder
		for i := 0; i < k; i++ {
			*id++
			fmt.Fprintf(&send, "put 0 0 60 %d\r\n%s\r\ndelete %d\r\n", len(body), body, *id)
			fmt.Fprintf(&want, "INSERTED %d\r\nDELETED\r\n", *id)
		}
		mustSend(t, c, send.String())
		expect(t, c, want.String())
		n -= k
	}
}

func blRange(from, to uint64) []uint64 {
	var ids []uint64
	for id := from; id <= to; id++ {
		ids = append(ids, id)
	}
	return ids
}

// ---------------------------------------------------------------------------
// Upstream testserv.c's binlog cases.

// Upstream's cttest_binlog_empty_exit: -b with -z 10, start, kill, restart:
// the empty log replays and the first put is job 1.
func TestBinlogEmptyExit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := blStart(t, dir, "-z", "10")
	s = blRestart(t, s, dir, "-z", "10")
	c := s.dial(t)
	mustSend(t, c, "put 0 0 0 0\r\n\r\n")
	expect(t, c, "INSERTED 1\r\n")
}

// Upstream's cttest_binlog_bury, plus a restart: the buried job comes back
// buried.
func TestBinlogBury(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := blStart(t, dir)
	c := s.dial(t)
	runSteps(t, c, []step{
		{"put 0 0 100 0\r\n\r\n", "INSERTED 1\r\n"},
		{"reserve\r\n", "RESERVED 1 0\r\n\r\n"},
		{"bury 1 0\r\n", "BURIED\r\n"},
	})
	s = blRestart(t, s, dir)
	c = s.dial(t)
	runSteps(t, c, []step{
		{"peek-buried\r\n", "FOUND 1 0\r\n\r\n"},
		{"peek-ready\r\n", "NOT_FOUND\r\n"},
	})
	blExpectJob(t, c, 1, map[string]string{"state": "buried", "pri": "0", "reserves": "1"})
	if !target.legacy { // upstream re-increments buries on replay (#668)
		blExpectJob(t, c, 1, map[string]string{"buries": "1"})
	}
	runSteps(t, c, []step{{"kick 1\r\n", "KICKED 1\r\n"}, {"reserve\r\n", "RESERVED 1 0\r\n\r\n"}})
}

// Upstream's cttest_binlog_basic: a put survives kill -9 and can be deleted
// after.
func TestBinlogBasic(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := blStart(t, dir)
	c := s.dial(t)
	mustSend(t, c, "put 0 0 100 0\r\n\r\n")
	expect(t, c, "INSERTED 1\r\n")
	s = blRestart(t, s, dir)
	c = s.dial(t)
	runSteps(t, c, []step{
		{"delete 1\r\n", "DELETED\r\n"},
		{"delete 1\r\n", "NOT_FOUND\r\n"},
	})
}

// Upstream's cttest_binlog_size_limit checks upstream's exact file sizes,
// which beanpole's own format does not reproduce (docs/behaviour.md,
// 'Binlog'). Instead: with -s 4096 the log rotates over several binlog.N
// files and everything comes back after kill -9.
func TestBinlogSegmentRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	args := []string{"-s", "4096", "-f0"}
	s := blStart(t, dir, args...)
	c := s.dial(t)
	const n = 100
	body := strings.Repeat("x", 50)
	// Pipelined, so that -f0 can share fsyncs between puts.
	var send, want strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&send, "put 0 0 100 50\r\n%s\r\n", body)
		fmt.Fprintf(&want, "INSERTED %d\r\n", i)
	}
	mustSend(t, c, send.String())
	expect(t, c, want.String())
	st := stats(t, c)
	cur := blStatInt(t, st, "binlog-current-index")
	if cur < 2 {
		t.Fatalf("binlog-current-index %d after %d puts of ~150 bytes with -s 4096: no rotation", cur, n)
	}
	if st["binlog-max-size"] != "4096" {
		t.Fatalf("binlog-max-size %q, want 4096", st["binlog-max-size"])
	}
	if segs := blNonEmptySegments(t, dir); len(segs) < 2 {
		t.Fatalf("binlog files holding data: %v (all: %v); want more than one", segs, blSegments(t, dir))
	}
	blExpectJob(t, c, 1, map[string]string{"file": "1"})
	blExpectJob(t, c, n, map[string]string{"file": itoa(cur)})

	s = blRestart(t, s, dir, args...)
	c = s.dial(t)
	send.Reset()
	want.Reset()
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&send, "peek %d\r\n", i)
		fmt.Fprintf(&want, "FOUND %d 50\r\n%s\r\n", i, body)
	}
	mustSend(t, c, send.String())
	expect(t, c, want.String())
	if v := stats(t, c)["current-jobs-ready"]; v != itoa(n) {
		t.Fatalf("current-jobs-ready %s after restart, want %d", v, n)
	}
	send.Reset()
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&send, "delete %d\r\n", i)
	}
	mustSend(t, c, send.String())
	expect(t, c, strings.Repeat("DELETED\r\n", n))
}

// Upstream's cttest_binlog_allocation: -s 601 -f0, 96 puts then 96 deletes,
// all accepted; after a restart nothing is left and (beanpole) ids go on.
func TestBinlogAllocation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	args := []string{"-s", "601", "-f0"}
	s := blStart(t, dir, args...)
	c := s.dial(t)
	// Pipelined, so that -f0 can share fsyncs between commands.
	var send, want strings.Builder
	for i := 1; i <= 96; i++ {
		send.WriteString("put 0 0 120 22\r\njob payload xxxxxxxxxx\r\n")
		fmt.Fprintf(&want, "INSERTED %d\r\n", i)
	}
	mustSend(t, c, send.String())
	expect(t, c, want.String())
	send.Reset()
	for i := 1; i <= 96; i++ {
		fmt.Fprintf(&send, "delete %d\r\n", i)
	}
	mustSend(t, c, send.String())
	expect(t, c, strings.Repeat("DELETED\r\n", 96))
	s = blRestart(t, s, dir, args...)
	c = s.dial(t)
	blExpectGone(t, c, blRange(1, 96))
	if v := stats(t, c)["current-jobs-ready"]; v != "0" {
		t.Fatalf("current-jobs-ready %s after restart, want 0", v)
	}
	if !target.legacy { // upstream reuses ids after a restart
		put(t, c, 0, 0, 120, "job payload xxxxxxxxxx", 97)
	}
}

// Upstream's cttest_binlog_read: a release with delay and a delete replay;
// the delayed job becomes ready by itself after the restart.
func TestBinlogRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := blStart(t, dir, "-f0")
	c := s.dial(t)
	runSteps(t, c, []step{
		{"use test\r\n", "USING test\r\n"},
		{"put 0 0 100 4\r\ntest\r\n", "INSERTED 1\r\n"},
		{"put 0 0 100 4\r\ntes1\r\n", "INSERTED 2\r\n"},
		{"watch test\r\n", "WATCHING 2\r\n"},
		{"reserve\r\n", "RESERVED 1 4\r\ntest\r\n"},
		{"release 1 1 1\r\n", "RELEASED\r\n"},
		{"reserve\r\n", "RESERVED 2 4\r\ntes1\r\n"},
		{"delete 2\r\n", "DELETED\r\n"},
	})
	s = blRestart(t, s, dir, "-f0")
	c = s.dial(t)
	runSteps(t, c, []step{{"watch test\r\n", "WATCHING 2\r\n"}, {"reserve\r\n", "RESERVED 1 4\r\ntest\r\n"}})
	blExpectJob(t, c, 1, map[string]string{"pri": "1", "releases": "1", "tube": q("test")})
	runSteps(t, c, []step{{"delete 1\r\n", "DELETED\r\n"}, {"delete 2\r\n", "NOT_FOUND\r\n"}})
}

// ---------------------------------------------------------------------------
// The improvements over upstream that need a restart to show.

// Job ids are never reused after a restart, even when the highest ids were
// deleted, or when every job was deleted and the segments that recorded
// them have been reclaimed (the id mark at the head of each segment).
func TestBinlogIDsNotReused(t *testing.T) {
	skipLegacy(t, "upstream reuses ids after a restart")
	t.Parallel()
	t.Run("highest deleted", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		s := blStart(t, dir)
		c := s.dial(t)
		for i := uint64(1); i <= 5; i++ {
			put(t, c, 0, 0, 60, "j"+itoa(int(i)), i)
		}
		runSteps(t, c, []step{{"delete 5\r\n", "DELETED\r\n"}, {"delete 4\r\n", "DELETED\r\n"}})
		s = blRestart(t, s, dir)
		c = s.dial(t)
		put(t, c, 0, 0, 60, "six", 6)
		runSteps(t, c, []step{
			{"peek 3\r\n", "FOUND 3 2\r\nj3\r\n"},
			{"peek 4\r\n", "NOT_FOUND\r\n"},
			{"peek 5\r\n", "NOT_FOUND\r\n"},
		})
		// And again, with the new highest id deleted before the kill.
		runSteps(t, c, []step{{"delete 6\r\n", "DELETED\r\n"}})
		s = blRestart(t, s, dir)
		c = s.dial(t)
		put(t, c, 0, 0, 60, "seven", 7)
	})
	t.Run("all deleted, segments reclaimed", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		args := []string{"-s", "4096"}
		s := blStart(t, dir, args...)
		c := s.dial(t)
		body := strings.Repeat("y", 100)
		id := uint64(0)
		for id < 40 {
			id++
			put(t, c, 0, 0, 60, body, id)
		}
		for i := 1; i <= 40; i++ {
			mustSend(t, c, fmt.Sprintf("delete %d\r\n", i))
			expect(t, c, "DELETED\r\n")
		}
		blPutDeleteCycles(t, c, body, &id, 100)
		// Put and delete until the segments holding the first records are
		// gone, so only id marks can remember the highest id.
		for blStatInt(t, stats(t, c), "binlog-oldest-index") < 3 {
			if id > 600 {
				t.Fatalf("binlog-oldest-index still < 3 after %d put+delete; files %v", id, blSegments(t, dir))
			}
			id++
			put(t, c, 0, 0, 60, body, id)
			mustSend(t, c, fmt.Sprintf("delete %d\r\n", id))
			expect(t, c, "DELETED\r\n")
		}
		// The files go right after the index moves.
		waitFor(t, defaultTimeout, "binlog.1 and binlog.2 unlinked", func() bool {
			segs := blSegments(t, dir)
			return len(segs) > 0 && segs[0] >= 3
		})
		s = blRestart(t, s, dir, args...)
		c = s.dial(t)
		put(t, c, 0, 0, 60, "next", id+1)
		blExpectGone(t, c, blRange(1, id))
	})
}

// The highest id is known only from the id marks: job 1 lives on, ids
// 2..101 are put and deleted, then only job 1 changes (release records)
// until compaction has moved it forward and every segment that held a
// record of ids 2..101 is gone. The next id must still be 102.
func TestBinlogIDMark(t *testing.T) {
	skipLegacy(t, "upstream reuses ids after a restart")
	t.Parallel()
	dir := t.TempDir()
	args := []string{"-s", "4096"}
	s := blStart(t, dir, args...)
	c := s.dial(t)
	put(t, c, 0, 0, 60, "keep", 1)
	id := uint64(1)
	blPutDeleteCycles(t, c, strings.Repeat("m", 100), &id, 100)
	lastCycleSeg := blStatInt(t, stats(t, c), "binlog-current-index")
	var send, want strings.Builder
	for i := 0; i < 20; i++ {
		send.WriteString("reserve\r\nrelease 1 0 0\r\n")
		want.WriteString("RESERVED 1 4\r\nkeep\r\nRELEASED\r\n")
	}
	// The log's compactor moves job 1's record forward in the background,
	// so how many releases it takes depends on how often it runs: the bound
	// is time, not a count.
	releases := 0
	waitFor(t, 30*time.Second, fmt.Sprintf("segments up to binlog.%d to go as job 1 is released", lastCycleSeg), func() bool {
		if blStatInt(t, stats(t, c), "binlog-oldest-index") > lastCycleSeg {
			return true
		}
		mustSend(t, c, send.String())
		expect(t, c, want.String())
		releases += 20
		return false
	})
	t.Logf("%d releases of job 1", releases)
	waitFor(t, defaultTimeout, "the old segments unlinked", func() bool {
		segs := blSegments(t, dir)
		return len(segs) > 0 && segs[0] > lastCycleSeg
	})
	s = blRestart(t, s, dir, args...)
	c = s.dial(t)
	runSteps(t, c, []step{{"peek 1\r\n", "FOUND 1 4\r\nkeep\r\n"}})
	put(t, c, 0, 0, 60, "next", 102)
	blExpectGone(t, c, blRange(2, 101))
}

// #597: release with delay 0 and a new priority is logged, so the priority
// survives a restart and decides the reserve order.
func TestBinlogReleasePriority(t *testing.T) {
	skipLegacy(t, "upstream #597: it does not log release with delay 0")
	t.Parallel()
	dir := t.TempDir()
	s := blStart(t, dir)
	c := s.dial(t)
	runSteps(t, c, []step{
		{"put 10 0 60 1\r\na\r\n", "INSERTED 1\r\n"},
		{"put 7 0 60 1\r\nb\r\n", "INSERTED 2\r\n"},
		{"reserve\r\n", "RESERVED 2 1\r\nb\r\n"},
		{"release 2 20 0\r\n", "RELEASED\r\n"},
		{"reserve\r\n", "RESERVED 1 1\r\na\r\n"},
		{"release 1 5 0\r\n", "RELEASED\r\n"},
	})
	s = blRestart(t, s, dir)
	c = s.dial(t)
	blExpectJob(t, c, 1, map[string]string{"state": "ready", "pri": "5", "releases": "1", "reserves": "1"})
	blExpectJob(t, c, 2, map[string]string{"state": "ready", "pri": "20", "releases": "1", "reserves": "1"})
	runSteps(t, c, []step{
		{"peek-ready\r\n", "FOUND 1 1\r\na\r\n"},
		{"reserve\r\n", "RESERVED 1 1\r\na\r\n"},
		{"reserve\r\n", "RESERVED 2 1\r\nb\r\n"},
	})
}

// #668: a restart neither re-increments `buries` nor reorders the buried
// list: kick takes the oldest buried job first, as before the kill. The
// order (2, 3, 1) is neither id order nor its reverse.
func TestBinlogBuriedCountAndOrder(t *testing.T) {
	skipLegacy(t, "upstream #668: it re-buries on replay")
	t.Parallel()
	dir := t.TempDir()
	s := blStart(t, dir)
	c := s.dial(t)
	runSteps(t, c, []step{
		{"put 1 0 60 1\r\na\r\n", "INSERTED 1\r\n"},
		{"put 2 0 60 1\r\nb\r\n", "INSERTED 2\r\n"},
		{"put 3 0 60 1\r\nc\r\n", "INSERTED 3\r\n"},
		{"reserve\r\n", "RESERVED 1 1\r\na\r\n"},
		{"bury 1 9\r\n", "BURIED\r\n"},
		{"reserve\r\n", "RESERVED 2 1\r\nb\r\n"},
		{"bury 2 8\r\n", "BURIED\r\n"},
		{"reserve\r\n", "RESERVED 3 1\r\nc\r\n"},
		{"bury 3 7\r\n", "BURIED\r\n"},
		{"kick 1\r\n", "KICKED 1\r\n"}, // job 1, the oldest
		{"reserve\r\n", "RESERVED 1 1\r\na\r\n"},
		{"bury 1 6\r\n", "BURIED\r\n"}, // buried order is now 2, 3, 1
		{"peek-buried\r\n", "FOUND 2 1\r\nb\r\n"},
	})
	check := func(c *conn) {
		t.Helper()
		blExpectJob(t, c, 1, map[string]string{"state": "buried", "pri": "6", "buries": "2", "kicks": "1", "reserves": "2"})
		blExpectJob(t, c, 2, map[string]string{"state": "buried", "pri": "8", "buries": "1", "kicks": "0", "reserves": "1"})
		blExpectJob(t, c, 3, map[string]string{"state": "buried", "pri": "7", "buries": "1", "kicks": "0", "reserves": "1"})
		if v := stats(t, c)["current-jobs-buried"]; v != "3" {
			t.Fatalf("current-jobs-buried %s, want 3", v)
		}
	}
	check(c)
	// Two restarts: upstream's count grew by one per restart.
	s = blRestart(t, s, dir)
	check(s.dial(t))
	s = blRestart(t, s, dir)
	c = s.dial(t)
	check(c)
	runSteps(t, c, []step{
		{"peek-buried\r\n", "FOUND 2 1\r\nb\r\n"},
		{"kick 1\r\n", "KICKED 1\r\n"},
		{"peek-buried\r\n", "FOUND 3 1\r\nc\r\n"},
		{"kick 1\r\n", "KICKED 1\r\n"},
		{"peek-buried\r\n", "FOUND 1 1\r\na\r\n"},
		{"kick 1\r\n", "KICKED 1\r\n"},
		{"peek-buried\r\n", "NOT_FOUND\r\n"},
		{"reserve\r\n", "RESERVED 1 1\r\na\r\n"}, // pri 6
	})
	blExpectJob(t, c, 2, map[string]string{"kicks": "1", "buries": "1"})
}

// Deleted jobs never come back, across restarts and across compaction: a
// long-lived buried job pins binlog.1 while hundreds of put+delete cycles
// fill later segments; the log rewrites the buried job forward and
// reclaims the old files (#43, #359, #570, #573), and after kill -9 exactly
// the buried job is left.
func TestBinlogDeletedStayDeleted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	args := []string{"-s", "4096"}
	s := blStart(t, dir, args...)
	c := s.dial(t)
	runSteps(t, c, []step{
		{"put 0 0 60 4\r\nkeep\r\n", "INSERTED 1\r\n"},
		{"reserve\r\n", "RESERVED 1 4\r\nkeep\r\n"},
		{"bury 1 0\r\n", "BURIED\r\n"},
	})
	body := strings.Repeat("z", 100)
	id := uint64(1)
	cycle := func() {
		id++
		put(t, c, 0, 0, 60, body, id)
		mustSend(t, c, fmt.Sprintf("delete %d\r\n", id))
		expect(t, c, "DELETED\r\n")
	}
	blPutDeleteCycles(t, c, body, &id, 400)
	// Compaction runs in the background: keep writing a little until it
	// has moved job 1 and the head files are gone.
	deadline := time.Now().Add(10 * time.Second)
	for {
		f := blStatInt(t, statsJob(t, c, 1), "file")
		oldest := blStatInt(t, stats(t, c), "binlog-oldest-index")
		if f > 1 && oldest > 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job 1 still in binlog.%d, oldest index %d, after %d put+delete; files %v", f, oldest, id-1, blSegments(t, dir))
		}
		cycle()
	}
	st := stats(t, c)
	if blStatInt(t, st, "binlog-records-migrated") < 1 {
		t.Fatalf("job 1 moved but binlog-records-migrated is %s", st["binlog-records-migrated"])
	}
	waitFor(t, defaultTimeout, "binlog.1 unlinked", func() bool {
		_, err := os.Stat(filepath.Join(dir, "binlog.1"))
		return os.IsNotExist(err)
	})
	t.Logf("%d put+delete cycles; files %v; %s", id-1, blSegments(t, dir), st["binlog-records-migrated"]+" migrated")

	for round := 0; round < 2; round++ {
		s = blRestart(t, s, dir, args...)
		c = s.dial(t)
		runSteps(t, c, []step{{"peek-buried\r\n", "FOUND 1 4\r\nkeep\r\n"}, {"peek-ready\r\n", "NOT_FOUND\r\n"}})
		blExpectGone(t, c, blRange(2, id))
		st := stats(t, c)
		if st["current-jobs-buried"] != "1" || st["current-jobs-ready"] != "0" {
			t.Fatalf("after restart %d: buried %s ready %s, want 1 and 0", round+1, st["current-jobs-buried"], st["current-jobs-ready"])
		}
		if !target.legacy {
			blExpectJob(t, c, 1, map[string]string{"buries": "1"})
			id++
			put(t, c, 0, 0, 60, body, id) // no id reused
			mustSend(t, c, fmt.Sprintf("delete %d\r\n", id))
			expect(t, c, "DELETED\r\n")
		}
	}
}

// A delayed job keeps its wall-clock deadline across a restart: put with
// delay 3, kill -9 after ~1.2 s, and it becomes ready ~3 s after the put
// (~1.8 s after the kill), not 3 s after the restart.
//
// A restarted delay cannot make the job ready sooner than 3 s after the
// kill (the new process reads the log after it), so the test fails if it
// was not ready by then; that tells the two apart only if the new server
// was up and answering well before: when the restart itself took longer
// (a loaded machine, a race-built server), the bound is not checked.
func TestBinlogDelayedDeadline(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := blStart(t, dir)
	c := s.dial(t)
	t0 := time.Now()
	mustSend(t, c, "put 0 3 60 1\r\nd\r\n")
	expect(t, c, "INSERTED 1\r\n")
	time.Sleep(time.Until(t0.Add(1200 * time.Millisecond)))
	tKill := time.Now()
	s = blRestart(t, s, dir)
	c = s.dial(t)
	st := statsJob(t, c, 1)
	restart := time.Since(tKill) // until the new server answered
	if st["delay"] != "3" {
		t.Fatalf("after restart: stats-job 1 delay %s, want 3", st["delay"])
	}
	if el := time.Since(t0); el < 2500*time.Millisecond {
		// Only meaningful while the deadline is comfortably ahead (the
		// restart can be slow on a loaded machine). time-left is whole
		// seconds, rounded down: 0, 1 or 2 here whether or not the
		// deadline was kept, so only the state is checked.
		if st["state"] != "delayed" {
			t.Fatalf("%v after the put: stats-job 1 state %s time-left %s; want delayed",
				el.Round(time.Millisecond), st["state"], st["time-left"])
		}
		runSteps(t, c, []step{{"peek-delayed\r\n", "FOUND 1 1\r\nd\r\n"}})
	}
	mustSend(t, c, "reserve-with-timeout 10\r\n")
	expectWithin(t, c, "RESERVED 1 1\r\nd\r\n", 10*time.Second)
	ready := time.Now()
	// The server keeps the deadline in wall-clock time (it has to, across
	// processes); a step of the system clock moves it. Do not blame the
	// server for that.
	if drift := time.Duration(ready.UnixNano()-t0.UnixNano()) - ready.Sub(t0); drift.Abs() > 200*time.Millisecond {
		t.Skipf("the wall clock moved %v against the monotonic clock during the test", drift)
	}
	sincePut, sinceKill := ready.Sub(t0), ready.Sub(tKill)
	t.Logf("ready %v after the put, %v after the kill; the restarted server answered %v after the kill",
		sincePut.Round(time.Millisecond), sinceKill.Round(time.Millisecond), restart.Round(time.Millisecond))
	if sincePut < 2900*time.Millisecond {
		t.Fatalf("ready %v after a put with delay 3", sincePut)
	}
	if restart > 2500*time.Millisecond {
		t.Logf("the restart took %v: too long to tell a kept deadline from a restarted delay", restart)
		return
	}
	if sinceKill >= 3*time.Second {
		t.Fatalf("ready %v after the kill (%v after the put, the restarted server answered %v after the kill): the delay restarted instead of keeping its deadline",
			sinceKill, sincePut, restart)
	}
}

// A job reserved when the server dies is ready after the restart.
func TestBinlogReservedComeBackReady(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := blStart(t, dir)
	c := s.dial(t)
	runSteps(t, c, []step{
		{"put 5 0 60 1\r\na\r\n", "INSERTED 1\r\n"},
		{"put 9 0 60 1\r\nb\r\n", "INSERTED 2\r\n"},
		{"reserve\r\n", "RESERVED 1 1\r\na\r\n"},
	})
	blExpectJob(t, c, 1, map[string]string{"state": "reserved"})
	s = blRestart(t, s, dir)
	c = s.dial(t)
	blExpectJob(t, c, 1, map[string]string{"state": "ready", "pri": "5"})
	st := stats(t, c)
	if st["current-jobs-reserved"] != "0" || st["current-jobs-ready"] != "2" {
		t.Fatalf("after restart: reserved %s ready %s, want 0 and 2", st["current-jobs-reserved"], st["current-jobs-ready"])
	}
	runSteps(t, c, []step{{"reserve\r\n", "RESERVED 1 1\r\na\r\n"}, {"delete 1\r\n", "DELETED\r\n"}})
}

// stats-job `file` names the binlog file of the job's record with -b, and
// is 0 without.
func TestBinlogStatsJobFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := blStart(t, dir)
	c := s.dial(t)
	put(t, c, 0, 0, 60, "f", 1)
	blExpectJob(t, c, 1, map[string]string{"file": "1"})
	s = blRestart(t, s, dir)
	c = s.dial(t)
	blExpectJob(t, c, 1, map[string]string{"file": "1"})

	plain := startServer(t)
	pc := plain.dial(t)
	put(t, pc, 0, 0, 60, "f", 1)
	blExpectJob(t, pc, 1, map[string]string{"file": "0"})
}

// The binlog-* stats are live: binlog-records-written counts each logged
// change (put, bury, kick, release, delete; not reserve or touch), and the
// indexes name real files.
func TestBinlogStats(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	args := []string{"-s", "100000"}
	s := blStart(t, dir, args...)
	c := s.dial(t)
	written := func() int { return blStatInt(t, stats(t, c), "binlog-records-written") }
	st := stats(t, c)
	if st["binlog-max-size"] != "100000" || st["binlog-records-written"] != "0" || st["binlog-records-migrated"] != "0" {
		t.Fatalf("fresh stats: max-size %s written %s migrated %s", st["binlog-max-size"], st["binlog-records-written"], st["binlog-records-migrated"])
	}
	steps := []struct {
		send, want string
		delta      int
	}{
		{"put 0 0 60 1\r\na\r\n", "INSERTED 1\r\n", 1},
		{"put 0 0 60 1\r\nb\r\n", "INSERTED 2\r\n", 1},
		{"reserve\r\n", "RESERVED 1 1\r\na\r\n", 0},
		{"touch 1\r\n", "TOUCHED\r\n", 0},
		{"bury 1 3\r\n", "BURIED\r\n", 1},
		{"kick 1\r\n", "KICKED 1\r\n", 1},
		{"reserve\r\n", "RESERVED 2 1\r\nb\r\n", 0},
		{"release 2 4 1\r\n", "RELEASED\r\n", 1},
		{"kick-job 2\r\n", "KICKED\r\n", 1},
		{"peek 1\r\n", "FOUND 1 1\r\na\r\n", 0},
		{"delete 1\r\n", "DELETED\r\n", 1},
	}
	n := 0
	for _, sp := range steps {
		mustSend(t, c, sp.send)
		expect(t, c, sp.want)
		n += sp.delta
		if got := written(); got != n {
			t.Fatalf("after %s: binlog-records-written %d, want %d", show(sp.send), got, n)
		}
	}
	if !target.legacy { // release with delay 0 is logged (#597)
		runSteps(t, c, []step{{"reserve\r\n", "RESERVED 2 1\r\nb\r\n"}, {"release 2 1 0\r\n", "RELEASED\r\n"}})
		n++
		if got := written(); got != n {
			t.Fatalf("after release with delay 0: binlog-records-written %d, want %d", got, n)
		}
	}
	st = stats(t, c)
	oldest, cur := blStatInt(t, st, "binlog-oldest-index"), blStatInt(t, st, "binlog-current-index")
	if oldest != 1 || cur != 1 {
		t.Fatalf("binlog-oldest-index %d, binlog-current-index %d; want 1 and 1", oldest, cur)
	}
	if _, err := os.Stat(filepath.Join(dir, "binlog.1")); err != nil {
		t.Fatal(err)
	}

	// Counters start again with the process; beanpole appends to the same
	// file instead of opening a new one per restart.
	s = blRestart(t, s, dir, args...)
	c = s.dial(t)
	put(t, c, 0, 0, 60, "c", 3)
	st = stats(t, c)
	if st["binlog-records-written"] != "1" {
		t.Fatalf("after restart and one put: binlog-records-written %s, want 1", st["binlog-records-written"])
	}
	if !target.legacy {
		if st["binlog-current-index"] != "1" || st["binlog-oldest-index"] != "1" {
			t.Fatalf("after restart: binlog-oldest-index %s, binlog-current-index %s; want 1 and 1 (no new file per restart)",
				st["binlog-oldest-index"], st["binlog-current-index"])
		}
	}
}

// A fresh binlog directory: before the first record, the current index
// should already name a file and not be older than the oldest one.
// Upstream opens binlog.1 at start and reports 1 for both.
func TestBinlogStatsIndexAtStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := blStart(t, dir)
	c := s.dial(t)
	st := stats(t, c)
	oldest, cur := blStatInt(t, st, "binlog-oldest-index"), blStatInt(t, st, "binlog-current-index")
	if cur < 1 || cur < oldest {
		t.Errorf("fresh -b dir: binlog-oldest-index %d, binlog-current-index %d; want current >= 1 and >= oldest (upstream: 1 and 1); files %v",
			oldest, cur, blSegments(t, dir))
	}
}

// The directory lock: a second server on the same directory exits with
// status 10 and says why, while the first keeps serving; once the first is
// killed, the directory can be opened again.
func TestBinlogLock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := blStart(t, dir)
	c := s.dial(t)
	put(t, c, 0, 0, 60, "one", 1)
	code, out := blRunToExit(t, "-b", dir)
	if code != 10 {
		t.Fatalf("second server on a locked dir: exit code %d, want 10; output: %s", code, out)
	}
	if !strings.Contains(out, "failed to lock wal dir") {
		t.Fatalf("second server's message does not say the dir is locked: %s", show(out))
	}
	put(t, c, 0, 0, 60, "two", 2)
	runSteps(t, c, []step{{"peek 1\r\n", "FOUND 1 3\r\none\r\n"}})
	if code, out := blRunToExit(t, "-b", dir); code != 10 {
		t.Fatalf("third server: exit code %d, want 10; output: %s", code, out)
	}
	s = blRestart(t, s, dir)
	c = s.dial(t)
	runSteps(t, c, []step{{"peek 2\r\n", "FOUND 2 3\r\ntwo\r\n"}})
}

// -b on a directory that does not exist (or on a plain file) exits
// non-zero with a message naming it, and creates nothing.
func TestBinlogMissingDir(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	missing := filepath.Join(base, "nope")
	code, out := blRunToExit(t, "-b", missing)
	if code == 0 || !strings.Contains(out, missing) {
		t.Fatalf("-b %s: exit code %d, output %s; want non-zero and a message naming the directory", missing, code, show(out))
	}
	if !strings.Contains(strings.ToLower(out), "no such file or directory") {
		t.Fatalf("-b %s: the message does not say it does not exist: %s", missing, show(out))
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("-b %s created it (%v)", missing, err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out = blRunToExit(t, "-b", file)
	if code == 0 || !strings.Contains(out, file) {
		t.Fatalf("-b %s (a file): exit code %d, output %s; want non-zero and a message naming it", file, code, show(out))
	}
}

// SIGTERM with -b: graceful stop, exit 0, and everything acknowledged is
// there after the restart (ready, buried and a job reserved at the stop).
func TestBinlogSIGTERM(t *testing.T) {
	skipLegacy(t, "upstream dies on SIGTERM; the graceful stop is beanpole's")
	t.Parallel()
	dir := t.TempDir()
	for _, flags := range [][]string{nil, {"-f", "100000"}, {"-F"}} {
		s := blStart(t, dir, flags...)
		c := s.dial(t)
		runSteps(t, c, []step{
			{"put 1 0 60 1\r\na\r\n", "INSERTED 1\r\n"},
			{"put 2 0 60 1\r\nb\r\n", "INSERTED 2\r\n"},
			{"put 3 0 60 1\r\nc\r\n", "INSERTED 3\r\n"},
			{"reserve\r\n", "RESERVED 1 1\r\na\r\n"},
			{"bury 1 4\r\n", "BURIED\r\n"},
			{"reserve\r\n", "RESERVED 2 1\r\nb\r\n"},
		})
		s.signal(t, syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			t.Fatalf("%v: still running 10s after SIGTERM", flags)
		}
		if code := s.cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("%v: exit code %d after SIGTERM, want 0 (%v); output: %s", flags, code, s.waitErr, s.out.String())
		}
		s = blStart(t, dir, flags...)
		c = s.dial(t)
		runSteps(t, c, []step{
			{"peek-buried\r\n", "FOUND 1 1\r\na\r\n"},
			{"reserve\r\n", "RESERVED 2 1\r\nb\r\n"},
			{"delete 2\r\n", "DELETED\r\n"},
			{"reserve\r\n", "RESERVED 3 1\r\nc\r\n"},
			{"delete 3\r\n", "DELETED\r\n"},
			{"delete 1\r\n", "DELETED\r\n"},
		})
		// Start the next flag set from an empty log with fresh ids.
		s.stop()
		dir = t.TempDir()
	}
}
