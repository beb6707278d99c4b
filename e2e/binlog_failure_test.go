package e2e

// A binlog write that fails (not a full disk: an I/O error) seen from
// outside. The failure is real, not simulated: the test lowers the running
// server's file-size limit (RLIMIT_FSIZE) below the segment's write offset,
// so the kernel answers the next write(2) with EFBIG, as it would answer an
// EIO. Go ignores SIGXFSZ, so the process lives on and must handle the
// error: held replies of failed records are answered INTERNAL_ERROR (never
// INSERTED or DELETED), every later change is refused with INTERNAL_ERROR
// and changes nothing, reads and stats go on, `stats` shows
// binlog-failed: true, and a restart recovers exactly what was
// acknowledged.

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// limitFileSize sets the file-size limit of process pid to n bytes.
func limitFileSize(t *testing.T, pid int, n uint64) {
	t.Helper()
	lim := unix.Rlimit{Cur: n, Max: n}
	if err := unix.Prlimit(pid, unix.RLIMIT_FSIZE, &lim, nil); err != nil {
		t.Skipf("cannot set RLIMIT_FSIZE of the server (%v): no way to make its writes fail", err)
	}
}

func TestBinlogWriteFailureIsNeverAcknowledged(t *testing.T) {
	t.Parallel()
	skipLegacy(t, "upstream disables its binlog on a write error and keeps acknowledging")
	for _, mode := range []string{"-f0", "-f50"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			s := blStart(t, dir, mode)
			c := s.dial(t)
			mustSend(t, c, "put 0 0 60 4\r\nkept\r\nput 0 0 60 4\r\ngone\r\n")
			expect(t, c, "INSERTED 1\r\nINSERTED 2\r\n")

			limitFileSize(t, s.pid(), 64)
			// Job 3's record fails; the list-tube-used behind it does not
			// depend on it and is answered; the delete is refused and
			// deletes nothing.
			mustSend(t, c, "put 0 0 60 4\r\nlost\r\nlist-tube-used\r\ndelete 2\r\n")
			expect(t, c, "INTERNAL_ERROR\r\nUSING default\r\nINTERNAL_ERROR\r\n")
			// Reads and stats go on; the failure shows in stats.
			mustSend(t, c, "peek 2\r\npeek 3\r\n")
			expect(t, c, "FOUND 2 4\r\ngone\r\nNOT_FOUND\r\n")
			if st := stats(t, c); st["binlog-failed"] != "true" || st["current-jobs-ready"] != "2" {
				t.Fatalf("stats after the failure: binlog-failed %q, current-jobs-ready %q; want true, 2",
					st["binlog-failed"], st["current-jobs-ready"])
			}
			// Every change is refused from now on, one command after another.
			mustSend(t, c, "reserve\r\nrelease 1 0 0\r\nbury 1 0\r\ndelete 1\r\nput 0 0 60 1\r\nx\r\nkick 1\r\nkick-job 1\r\n")
			expect(t, c, "RESERVED 1 4\r\nkept\r\nINTERNAL_ERROR\r\nINTERNAL_ERROR\r\nINTERNAL_ERROR\r\nINTERNAL_ERROR\r\nKICKED 0\r\nNOT_FOUND\r\n")
			crWaitLog(t, s, "binlog: write failed") // logged through a diode: soon, not at once

			// What was acknowledged is what a restart recovers.
			s2 := blRestart(t, s, dir, mode)
			c2 := s2.dial(t)
			mustSend(t, c2, "peek 1\r\npeek 2\r\npeek 3\r\n")
			expect(t, c2, "FOUND 1 4\r\nkept\r\nFOUND 2 4\r\ngone\r\nNOT_FOUND\r\n")
			if st := stats(t, c2); st["binlog-failed"] != "" {
				t.Fatalf("binlog-failed %q after a clean restart; the key must be absent", st["binlog-failed"])
			}
		})
	}
}

// A parked reserver is never handed a job whose put failed to be written.
func TestBinlogFailedPutNeverReachesAWaiter(t *testing.T) {
	skipLegacy(t, "upstream disables its binlog on a write error and keeps acknowledging")
	t.Parallel()
	s := blStart(t, t.TempDir(), "-f0")
	w, p := s.dial(t), s.dial(t)
	mustSend(t, w, "reserve-with-timeout 2\r\n")
	waitWaiting(t, p, 1)
	limitFileSize(t, s.pid(), 64)
	mustSend(t, p, "put 0 0 60 1\r\nx\r\n")
	expect(t, p, "INTERNAL_ERROR\r\n")
	expectWithin(t, w, "TIMED_OUT\r\n", 10*time.Second)
}

// mountTmpfs mounts a tmpfs of size bytes on a new directory, or skips the
// test where mounting is not allowed. The server must be stopped before
// the cleanup unmounts it: call this before starting it.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+itoa(size)); err != nil {
		t.Skipf("cannot mount a small filesystem to fill (%v)", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// A binlog on a full filesystem: puts are refused with OUT_OF_MEMORY and
// change nothing, deletes still succeed, and the server keeps serving.
func TestBinlogFullDisk(t *testing.T) {
	t.Parallel()
	dir := mountTmpfs(t, 1<<20)
	s := blStart(t, dir, "-s", "131072", "-z", "65536")
	c := s.dial(t)
	body := strings.Repeat("f", 60000)
	var ids []uint64
	full := false
	for i := 0; i < 40 && !full; i++ {
		mustSend(t, c, "put 0 0 60 60000\r\n"+body+"\r\n")
		switch line := readLine(t, c); {
		case line == "OUT_OF_MEMORY":
			full = true
		case strings.HasPrefix(line, "INSERTED "):
			id, err := strconv.ParseUint(strings.TrimPrefix(line, "INSERTED "), 10, 64)
			if err != nil {
				t.Fatal(line)
			}
			ids = append(ids, id)
		default:
			t.Fatalf("put %d: %s", i, show(line))
		}
	}
	if !full || len(ids) == 0 {
		t.Fatalf("%d puts of 60 KB on a 1 MiB filesystem and no OUT_OF_MEMORY", len(ids))
	}
	st := stats(t, c)
	if st["current-jobs-ready"] != itoa(len(ids)) || st["binlog-failed"] != "" {
		t.Fatalf("after the refusal: current-jobs-ready %s (want %d), binlog-failed %q (want absent)",
			st["current-jobs-ready"], len(ids), st["binlog-failed"])
	}
	for _, id := range ids {
		mustSend(t, c, "delete "+strconv.FormatUint(id, 10)+"\r\n")
		expect(t, c, "DELETED\r\n")
	}
	mustSend(t, c, "list-tube-used\r\n")
	expect(t, c, "USING default\r\n")
}
