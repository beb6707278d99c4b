package e2e

// A directory beanstalkd's binlog was copied into may hold what no
// beanstalkd left there: a stray file of a huge number, a named pipe, a
// sparse file of many gigabytes, a record naming the largest id, a header
// that does not match its records. Both the dry run and the server's start
// must finish promptly on each, say what they found, and never hand an id
// out twice. The binlogs are written as beanstalkd lays them out
// (package upstreamtest).

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	ut "github.com/beanpole/beanpole/persist/upstream/upstreamtest"
)

// runBounded is runBeanpole for a run that must end by itself: a run
// still going after limit is killed and fails the test.
func runBounded(t *testing.T, limit time.Duration, args ...string) (string, int, time.Duration) {
	t.Helper()
	cmd := serverCommand(args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	kill := time.AfterFunc(limit, func() { _ = cmd.Process.Kill() })
	_ = cmd.Wait()
	took := time.Since(start)
	if !kill.Stop() {
		t.Fatalf("beanpole %s: killed after running %v:\n%s", strings.Join(args, " "), took, out.String())
	}
	expectNoRace(t, cmd, out.String())
	return out.String(), cmd.ProcessState.ExitCode(), took
}

// startOn runs the server on dir as an operator would, for a start that
// must be refused: it returns the output and the exit status.
func startOn(t *testing.T, dir string) (string, int) {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	out, code, _ := runBounded(t, time.Minute, "-l", "127.0.0.1", "-p", strconv.Itoa(port), "-b", dir)
	return out, code
}

// upstreamDir is a new directory holding binlog.1 with the given bytes.
func upstreamDir(t *testing.T, binlog1 []byte) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "binlog")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "binlog.1"), binlog1, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// untouched fails t unless dir still holds binlog.1 and no trace of an
// import.
func untouched(t *testing.T, dir string) {
	t.Helper()
	for _, n := range []string{"beanstalkd-import", ".beanstalkd-import.tmp"} {
		if _, err := os.Stat(filepath.Join(dir, n)); !os.IsNotExist(err) {
			t.Errorf("a refused import left %s (%v)", n, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "binlog.1")); err != nil {
		t.Errorf("a refused import moved binlog.1: %v", err)
	}
}

// A stray empty binlog.999999999999 beside binlog.1 is one gap of damage,
// named once: the dry run reports it at once and the server refuses to
// start on it, as on any damage, until it is accepted.
func TestImportStrayHighNumberedFileIsOneGap(t *testing.T) {
	t.Parallel()
	skipUnlessBeanpole(t, "the import of an upstream binlog is beanpole's")
	dir := upstreamDir(t, ut.File(7, 64, ut.Put(1, "t", "one\r\n")))
	if err := os.WriteFile(filepath.Join(dir, "binlog.999999999999"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	gap := "damage: " + dir + "/binlog.2 at offset 0: missing, and so is every file up to binlog.999999999998 (999999999997 files)," +
		" though binlog.1 and binlog.999999999999 are there; whatever they held is lost\n"
	out, code, _ := runBounded(t, time.Minute, "import", "-b", dir, "--dry-run")
	if code != 0 || !strings.Contains(out, gap) || !strings.Contains(out, "would refuse") || strings.Count(out, "damage: ") != 1 {
		t.Fatalf("dry run: exit %d, want 0 and %q:\n%s", code, gap, out)
	}
	out, code = startOn(t, dir)
	if code != 1 || !strings.Contains(out, strings.TrimSuffix(strings.TrimPrefix(gap, "damage: "), "\n")) || !strings.Contains(out, "--accept-damage") {
		t.Fatalf("server start: exit %d, want 1 and the gap:\n%s", code, out)
	}
	untouched(t, dir)
	if out, code, _ := runBounded(t, time.Minute, "import", "-b", dir, "--accept-damage"); code != 0 {
		t.Fatalf("--accept-damage: exit %d\n%s", code, out)
	}
	c := startServer(t, "-b", dir).dial(t)
	mustSend(t, c, "peek 1\r\n")
	expect(t, c, "FOUND 1 3\r\none\r\n")
	put(t, c, 0, 0, 60, "next", 2)
}

// A named pipe called binlog.N is never opened (that would wait for a
// writer forever): the dry run and the server's start say they skip it,
// import the rest, and the pipe is moved aside with upstream's files.
func TestImportSkipsANamedPipe(t *testing.T) {
	t.Parallel()
	skipUnlessBeanpole(t, "the import of an upstream binlog is beanpole's")
	dir := upstreamDir(t, ut.File(7, 64, ut.Put(1, "t", "one\r\n")))
	if err := syscall.Mkfifo(filepath.Join(dir, "binlog.2"), 0o600); err != nil {
		t.Fatal(err)
	}
	skipped := dir + "/binlog.2 is a named pipe (FIFO), not a regular file: it is not read; the import moves it to " + dir + "/beanstalkd-import with upstream's files"
	out, code, _ := runBounded(t, time.Minute, "import", "-b", dir, "--dry-run")
	if code != 0 || !strings.Contains(out, "skipped: "+skipped+"\n") || !strings.Contains(out, "1 jobs to carry over") || strings.Contains(out, "damage") {
		t.Fatalf("dry run: exit %d, want 0 and %q:\n%s", code, skipped, out)
	}
	s := startServer(t, "-b", dir)
	c := s.dial(t)
	mustSend(t, c, "peek 1\r\n")
	expect(t, c, "FOUND 1 3\r\none\r\n")
	put(t, c, 0, 0, 60, "next", 2)
	if !strings.Contains(s.out.String(), skipped) {
		t.Errorf("the server did not warn of the named pipe:\n%s", s.out.String())
	}
	if st, err := os.Lstat(filepath.Join(dir, "beanstalkd-import", "binlog.2")); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the named pipe was not moved aside: %v", err)
	}
}

// A sparse binlog.N of 20 GB (a record, then a hole where beanstalkd's
// preallocation would be) costs no disk, and no time: the hole is passed
// over, not read as zeros. Reading it took close to a minute.
func TestImportPassesOverASparseFile(t *testing.T) {
	t.Parallel()
	skipUnlessBeanpole(t, "the import of an upstream binlog is beanpole's")
	dir := upstreamDir(t, ut.File(7, 0, ut.Put(1, "t", "one\r\n")))
	if err := os.Truncate(filepath.Join(dir, "binlog.1"), 20<<30); err != nil {
		t.Skipf("no sparse file of 20 GB here: %v", err)
	}
	out, code, took := runBounded(t, time.Minute, "import", "-b", dir, "--dry-run")
	if code != 0 || !strings.Contains(out, "1 jobs to carry over") || strings.Contains(out, "damage") {
		t.Fatalf("dry run: exit %d:\n%s", code, out)
	}
	if took > 5*time.Second {
		t.Errorf("the dry run took %v", took)
	}
	start := time.Now()
	c := startServer(t, "-b", dir).dial(t) // startServer gives up after 10 s
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the server took %v to start", took)
	}
	mustSend(t, c, "peek 1\r\n")
	expect(t, c, "FOUND 1 3\r\none\r\n")
}

// No import leads to an id handed out twice. A record naming the largest
// id (read, or found past damage) leaves no id to follow it, and a version
// 5 header on version 7 records, read as damage, made ids jump by 7e17:
// each is refused by name, by the dry run, by --accept-damage and by the
// server's start, and nothing is changed.
func TestImportRefusesWhatWouldReuseIDs(t *testing.T) {
	t.Parallel()
	skipUnlessBeanpole(t, "the import of an upstream binlog is beanpole's")
	one, last := ut.Put(1, "t", "one\r\n"), ut.Put(math.MaxUint64, "t", "last\r\n")
	mismatched := ut.File(7, 64, one, ut.Put(2, "t", "two\r\n"), ut.Put(3, "t", "three\r\n"))
	binary.LittleEndian.PutUint32(mismatched, 5)
	for _, c := range []struct {
		name string
		file []byte
		want string
	}{
		{"largest id", ut.File(7, 64, one, last),
			"binlog.1: the record at offset 94 names job id 18446744073709551615, the largest there is: no id would be left for a job put after the import"},
		{"largest id past damage", append(append(ut.File(7, 0, one), 0x7f, 0x7f, 0x7f, 0x7f), ut.File(7, 64, ut.Put(2, "t", "two\r\n"), last)[4:]...),
			"binlog.1: a record found past the damage at offset 94 names job id 18446744073709551615, the largest there is"},
		{"version 5 header on version 7 records", mismatched,
			"binlog.1: the header says binlog version 5, but the records are those of version 7 (3 of them read as version 7; read as version 5 the first, at offset 4, fails: tube name length"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := upstreamDir(t, c.file)
			want := "binlog import refused: " + dir + "/" + c.want
			for _, args := range [][]string{{"--dry-run"}, {"--accept-damage"}, {}} {
				out, code, _ := runBounded(t, time.Minute, append([]string{"import", "-b", dir}, args...)...)
				if code != 1 || !strings.Contains(out, want) {
					t.Errorf("beanpole import %s: exit %d, want 1 and %q:\n%s", strings.Join(args, " "), code, want, out)
				}
			}
			if out, code := startOn(t, dir); code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "Nothing was changed") {
				t.Errorf("server start: exit %d, want 1 and %q:\n%s", code, want, out)
			}
			untouched(t, dir)
		})
	}
}

// Ids never wrap. A binlog naming id 2^64-3 imports with a warning that
// only 2 ids are left; the next two puts get them, and every put after
// that is answered INTERNAL_ERROR and makes nothing (C would hand out 0,
// 1, 2 ... again), while the jobs there are still served. A restart on
// that binlog says no id is left and still refuses puts.
func TestIDsNeverWrapAfterAnImport(t *testing.T) {
	t.Parallel()
	skipUnlessBeanpole(t, "the import of an upstream binlog is beanpole's")
	dir := upstreamDir(t, ut.File(7, 64, ut.Put(1, "t", "one\r\n"), ut.Put(math.MaxUint64-2, "t", "near\r\n")))
	const few = "only 2 job ids are left; once they are handed out, every put is answered INTERNAL_ERROR (ids are never reused)"
	out, code, _ := runBounded(t, time.Minute, "import", "-b", dir, "--dry-run")
	if code != 0 || !strings.Contains(out, "the next job gets 18446744073709551614\nwarning: "+few+"\n") {
		t.Fatalf("dry run: exit %d, want 0 and %q:\n%s", code, few, out)
	}
	s := startServer(t, "-b", dir)
	c := s.dial(t)
	put(t, c, 0, 0, 60, "a", math.MaxUint64-1)
	put(t, c, 0, 0, 60, "b", math.MaxUint64)
	for range 3 {
		mustSend(t, c, "put 0 0 60 1\r\nc\r\n")
		expect(t, c, "INTERNAL_ERROR\r\n")
	}
	mustSend(t, c, "peek 1\r\npeek 18446744073709551613\r\ndelete 18446744073709551614\r\npeek 0\r\n")
	expect(t, c, "FOUND 1 3\r\none\r\nFOUND 18446744073709551613 4\r\nnear\r\nDELETED\r\nNOT_FOUND\r\n")
	if st := stats(t, c); st["current-jobs-ready"] != "3" || st["total-jobs"] != "2" {
		t.Errorf("stats: %s ready, %s put; want 3 and 2", st["current-jobs-ready"], st["total-jobs"])
	}
	// The log lines are written before the first reply, or with it.
	crWaitLog(t, s, few)
	crWaitLog(t, s, "every job id, up to 18446744073709551615, has been handed out")
	s.stop()

	s = startServer(t, "-b", dir)
	c = s.dial(t)
	mustSend(t, c, "put 0 0 60 1\r\nc\r\npeek 18446744073709551615\r\n")
	expect(t, c, "INTERNAL_ERROR\r\nFOUND 18446744073709551615 1\r\nb\r\n")
	crWaitLog(t, s, "every job id has been handed out: every put is answered INTERNAL_ERROR")
}

// A binlog.N that is a dangling or looping symbolic link is reported and
// skipped like any other binlog.N that is not a regular file, as C skips
// a file it cannot open: beside upstream's binlog the import moves it
// aside with upstream's files; beside beanpole's own log it is left where
// it is and its number is not used again. A file that cannot be read
// (an I/O error) stops the start with exit 1, as C's failed replay, not
// 10, which says another server holds the directory.
func TestBinlogSymlinksThatLeadNowhereAreSkipped(t *testing.T) {
	t.Parallel()
	skipUnlessBeanpole(t, "the import of an upstream binlog is beanpole's")
	links := func(t *testing.T, dir string, dangling, looping int) {
		t.Helper()
		for _, l := range [][2]string{{"nowhere", strconv.Itoa(dangling)}, {"binlog." + strconv.Itoa(looping), strconv.Itoa(looping)}} {
			if err := os.Symlink(l[0], filepath.Join(dir, "binlog."+l[1])); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Run("upstream", func(t *testing.T) {
		t.Parallel()
		dir := upstreamDir(t, ut.File(7, 64, ut.Put(1, "t", "one\r\n")))
		links(t, dir, 2, 3)
		skipped := []string{
			"skipped: " + dir + `/binlog.2 is a dangling symbolic link (to "nowhere"), not a regular file: it is not read`,
			"skipped: " + dir + `/binlog.3 is a looping symbolic link (to "binlog.3"), not a regular file: it is not read`,
		}
		out, code, _ := runBounded(t, time.Minute, "import", "-b", dir, "--dry-run")
		if code != 0 || !strings.Contains(out, skipped[0]) || !strings.Contains(out, skipped[1]) || !strings.Contains(out, "1 jobs to carry over") {
			t.Fatalf("dry run: exit %d, want 0 and both links skipped:\n%s", code, out)
		}
		// --from copies the regular files only: the links never reach DIR.
		dst := t.TempDir()
		out, code, _ = runBounded(t, time.Minute, "import", "--from", dir, "-b", dst)
		if code != 0 || !strings.Contains(out, "1 jobs to carry over") || strings.Contains(out, "skipped") {
			t.Fatalf("--from: exit %d, want 0 and the job:\n%s", code, out)
		}
		s := startServer(t, "-b", dir)
		c := s.dial(t)
		mustSend(t, c, "peek 1\r\n")
		expect(t, c, "FOUND 1 3\r\none\r\n")
		put(t, c, 0, 0, 60, "next", 2)
		crWaitLog(t, s, strings.TrimPrefix(skipped[1], "skipped: "))
		for _, n := range []string{"binlog.2", "binlog.3"} {
			if st, err := os.Lstat(filepath.Join(dir, "beanstalkd-import", n)); err != nil || st.Mode()&os.ModeSymlink == 0 {
				t.Errorf("%s was not moved aside: %v", n, err)
			}
		}
	})
	t.Run("beanpole's own", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		s := startServer(t, "-b", dir)
		put(t, s.dial(t), 0, 0, 60, "one", 1)
		s.stop()
		links(t, dir, 7, 8)
		s = startServer(t, "-b", dir)
		c := s.dial(t)
		mustSend(t, c, "peek 1\r\n")
		expect(t, c, "FOUND 1 3\r\none\r\n")
		put(t, c, 0, 0, 60, "two", 2)
		crWaitLog(t, s, `binlog.7 offset 0: not a regular file (a dangling symbolic link (to \"nowhere\")`)
		crWaitLog(t, s, `binlog.8 offset 0: not a regular file (a looping symbolic link (to \"binlog.8\")`)
		for n, to := range map[string]string{"binlog.7": "nowhere", "binlog.8": "binlog.8"} {
			if got, err := os.Readlink(filepath.Join(dir, n)); err != nil || got != to {
				t.Errorf("%s: %q, %v; want the link to %q left as it was", n, got, err, to)
			}
		}
	})
	t.Run("unreadable", func(t *testing.T) {
		t.Parallel()
		if _, err := os.Stat("/proc/self/mem"); err != nil {
			t.Skip("no /proc/self/mem to read an I/O error from")
		}
		dir := t.TempDir()
		if err := os.Symlink("/proc/self/mem", filepath.Join(dir, "binlog.1")); err != nil {
			t.Fatal(err)
		}
		if out, code := startOn(t, dir); code != 1 || !strings.Contains(out, "input/output error") {
			t.Errorf("server start on a binlog.1 that cannot be read: exit %d, want 1:\n%s", code, out)
		}
	})
}
