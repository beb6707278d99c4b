package e2e

// Memory and descriptors as resources the server rations: a ceiling on the
// bytes held by jobs (--max-job-memory; past it a put is answered
// OUT_OF_MEMORY and the server keeps serving), memory given back to the
// system promptly after a large backlog is deleted, and descriptors kept in
// reserve for the binlog when clients fill the descriptor limit. All of it
// is beanpole design (C beanstalkd has no ceiling flag and no job-memory
// stats), so these tests skip for the 1.12 target.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fillUntilRefused puts bodies of size bytes (pipelined, batch at a time)
// until a put is answered OUT_OF_MEMORY or max puts were made. It returns
// the ids inserted and whether a refusal came.
func fillUntilRefused(t *testing.T, c *conn, size, max int) (ids []uint64, refused bool) {
	t.Helper()
	body := strings.Repeat("m", size)
	msg := fmt.Sprintf("put 0 0 120 %d\r\n%s\r\n", size, body)
	const batch = 32
	for len(ids) < max && !refused {
		n := min(batch, max-len(ids))
		mustSend(t, c, strings.Repeat(msg, n))
		for i := 0; i < n; i++ {
			line := readLineWithin(t, c, 4*defaultTimeout)
			var id uint64
			switch {
			case line == "OUT_OF_MEMORY":
				refused = true
			case !refused:
				if _, err := fmt.Sscanf(line, "INSERTED %d", &id); err != nil {
					t.Fatalf("put %d: %s", len(ids)+1, show(line))
				}
				ids = append(ids, id)
			default:
				// Every put after the first refusal in the same batch is
				// refused too: nothing was freed in between.
				t.Fatalf("put after OUT_OF_MEMORY in the same batch: %s", show(line))
			}
		}
	}
	return ids, refused
}

// statInt reads an integer stats value.
func statInt(t testing.TB, m map[string]string, k string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(m[k], 10, 64)
	if err != nil {
		t.Fatalf("stats %s: %q", k, m[k])
	}
	return v
}

// With a small ceiling, puts are refused OUT_OF_MEMORY once the
// jobs' bytes reach it; the refused put changes nothing; deletes, reserves,
// peeks and stats go on; deleting a job makes room for the next put. With
// -b the same holds (the put is counted before its record is logged).
func TestJobMemoryCeiling(t *testing.T) {
	skipUnlessBeanpole(t, "--max-job-memory and the job-memory stats are beanpole's")
	t.Parallel()
	const (
		limit = 8_000_000
		size  = 64 << 10
	)
	for _, mode := range []struct {
		name  string
		flags []string
	}{
		{"memory only", nil},
		{"binlog", []string{"-b", ""}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			flags := []string{"--max-job-memory", strconv.Itoa(limit), "-z", strconv.Itoa(size)}
			if mode.flags != nil {
				flags = append(flags, "-b", t.TempDir())
			}
			s := startServer(t, flags...)
			c, ctl := s.dial(t), s.dial(t)
			st := stats(t, ctl)
			if st["job-memory-limit"] != strconv.Itoa(limit) || st["job-memory-bytes"] != "0" {
				t.Fatalf("fresh server: job-memory-limit %s job-memory-bytes %s", st["job-memory-limit"], st["job-memory-bytes"])
			}

			ids, refused := fillUntilRefused(t, c, size, 2*limit/size)
			if !refused {
				t.Fatalf("%d puts of %d bytes, none refused under a ceiling of %d", len(ids), size, limit)
			}
			// Each job costs at least its body and at most its body rounded
			// to whole pages plus a small fixed overhead.
			if n := len(ids); n > limit/size || n < limit/(size+16<<10) {
				t.Fatalf("%d jobs of %d bytes fit under %d", n, size, limit)
			}
			st = stats(t, ctl)
			used := statInt(t, st, "job-memory-bytes")
			perJob := used / int64(len(ids))
			if used > limit || perJob < size || perJob > size+16<<10 {
				t.Fatalf("job-memory-bytes %d for %d jobs (%d each), limit %d", used, len(ids), perJob, limit)
			}
			if st["current-jobs-ready"] != itoa(len(ids)) || st["total-jobs"] != itoa(len(ids)) {
				t.Fatalf("after the refusal: current-jobs-ready %s total-jobs %s, want %d", st["current-jobs-ready"], st["total-jobs"], len(ids))
			}

			// A refused put changed nothing, and refuses again.
			mustSend(t, c, fmt.Sprintf("put 0 0 120 %d\r\n%s\r\n", size, strings.Repeat("n", size)))
			expect(t, c, "OUT_OF_MEMORY\r\n")
			if st2 := stats(t, ctl); st2["job-memory-bytes"] != st["job-memory-bytes"] || st2["current-jobs-ready"] != st["current-jobs-ready"] {
				t.Fatalf("a refused put changed job-memory-bytes %s→%s, current-jobs-ready %s→%s",
					st["job-memory-bytes"], st2["job-memory-bytes"], st["current-jobs-ready"], st2["current-jobs-ready"])
			}

			// Everything else works at the ceiling.
			mustSend(t, c, fmt.Sprintf("peek %d\r\n", ids[0]))
			expectLine(t, c, fmt.Sprintf("FOUND %d %d", ids[0], size))
			readN(t, c, size+2, defaultTimeout)
			mustSend(t, c, "reserve\r\n")
			expectLine(t, c, fmt.Sprintf("RESERVED %d %d", ids[0], size))
			readN(t, c, size+2, defaultTimeout)
			mustSend(t, c, fmt.Sprintf("release %d 0 0\r\n", ids[0]))
			expect(t, c, "RELEASED\r\n")
			mustSend(t, c, "stats-tube default\r\n")
			expectYAMLContains(t, c, "current-jobs-ready: "+itoa(len(ids))+"\n")

			// Deleting one job makes room for one more.
			mustSend(t, c, fmt.Sprintf("delete %d\r\n", ids[1]))
			expect(t, c, "DELETED\r\n")
			if got := statInt(t, stats(t, ctl), "job-memory-bytes"); got >= used {
				t.Fatalf("job-memory-bytes %d after a delete, was %d", got, used)
			}
			mustSend(t, c, fmt.Sprintf("put 0 0 120 %d\r\n%s\r\n", size, strings.Repeat("o", size)))
			line := readLine(t, c)
			if !strings.HasPrefix(line, "INSERTED ") {
				t.Fatalf("put after a delete: %s", show(line))
			}
			mustSend(t, c, fmt.Sprintf("put 0 0 120 %d\r\n%s\r\n", size, strings.Repeat("p", size)))
			expect(t, c, "OUT_OF_MEMORY\r\n")

			// Deleting everything brings the count back to zero.
			var newID uint64
			fmt.Sscanf(line, "INSERTED %d", &newID)
			for _, id := range append(append([]uint64{ids[0]}, ids[2:]...), newID) {
				mustSend(t, c, fmt.Sprintf("delete %d\r\n", id))
				expect(t, c, "DELETED\r\n")
			}
			if st := stats(t, ctl); st["job-memory-bytes"] != "0" || st["current-jobs-ready"] != "0" {
				t.Fatalf("after deleting everything: job-memory-bytes %s current-jobs-ready %s", st["job-memory-bytes"], st["current-jobs-ready"])
			}
		})
	}
}

// --max-job-memory is a long option that takes its value as the
// next argument or after "="; 0 turns the ceiling off; a bad value is a
// usage error (exit 5) as for the short flags.
func TestJobMemoryFlag(t *testing.T) {
	skipUnlessBeanpole(t, "--max-job-memory is beanpole's")
	t.Parallel()
	s := startServer(t, "--max-job-memory=123456789")
	if v := stats(t, s.dial(t))["job-memory-limit"]; v != "123456789" {
		t.Fatalf("--max-job-memory=123456789: job-memory-limit %s", v)
	}
	s = startServer(t, "--max-job-memory", "0")
	c := s.dial(t)
	if v := stats(t, c)["job-memory-limit"]; v != "0" {
		t.Fatalf("--max-job-memory 0: job-memory-limit %s", v)
	}
	put(t, c, 0, 0, 10, "hello", 1)
	if v := statInt(t, stats(t, c), "job-memory-bytes"); v < 7 {
		t.Fatalf("job-memory-bytes %d with one job of 5 bytes", v)
	}
	// The default is derived from the machine (cgroup, address space or
	// physical memory): some positive number.
	s = startServer(t)
	if v := statInt(t, stats(t, s.dial(t)), "job-memory-limit"); v <= 0 {
		t.Fatalf("default job-memory-limit %d", v)
	}
	for _, args := range [][]string{{"--max-job-memory"}, {"--max-job-memory", "12x"}, {"--max-job-memory=-1"}} {
		cmd := serverCommand(args...)
		out, err := cmd.CombinedOutput()
		expectNoRace(t, cmd, string(out))
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 5 || !strings.Contains(string(out), "--max-job-memory") {
			t.Errorf("%q: %v, output %q; want exit 5 naming the option", args, err, out)
		}
	}
}

// The job-memory ceiling under a real address-space limit (RLIMIT_AS, set
// by the shell that execs the server): without a ceiling the Go runtime
// dies with "fatal error: out of memory" at about 1.1 GB of bodies under a
// 3 GB limit and every job is lost. The default ceiling is derived from
// the limit: puts get OUT_OF_MEMORY, the server stays up and serves.
func TestJobMemoryUnderAddressSpaceLimit(t *testing.T) {
	skipUnlessBeanpole(t, "the job-memory ceiling is beanpole's")
	if target.race {
		t.Skip("race-built server: the race detector reserves terabytes of address space, no RLIMIT_AS fits")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skipf("no shell to set RLIMIT_AS with: %v", err)
	}
	t.Parallel()
	// The address space a server uses before it holds any job: the Go
	// runtime reserves much more than it touches.
	probe := startServer(t)
	base := procStatusKB(t, probe.pid(), "VmSize")
	probe.stop()
	const room = 768 << 10 // kB of address space beyond the idle server's
	wrapper := filepath.Join(t.TempDir(), "beanpole-as")
	script := fmt.Sprintf("#!%s\nulimit -v %d || exit 99\nexec %q \"$@\"\n", sh, base+room, target.bin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := startProcRetry(wrapper, "tcp", "", []string{"-z", strconv.Itoa(64 << 10)})
	if err != nil {
		t.Skipf("cannot start a server under RLIMIT_AS %d kB: %v", base+room, err)
	}
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("server output:\n%s", s.out.String())
		}
	})
	c, ctl := s.dial(t), s.dial(t)
	limit := statInt(t, stats(t, ctl), "job-memory-limit")
	if limit <= 0 || limit > room<<10 {
		t.Fatalf("job-memory-limit %d under an address-space limit leaving %d bytes", limit, room<<10)
	}
	ids, refused := fillUntilRefused(t, c, 64<<10, 2*room/64)
	if !refused {
		t.Fatalf("%d puts of 64 KiB under a %d kB address-space limit, none refused", len(ids), base+room)
	}
	// Still serving: stats, deletes, and a put once there is room.
	st := stats(t, ctl)
	if st["current-jobs-ready"] != itoa(len(ids)) {
		t.Fatalf("current-jobs-ready %s, %d inserted", st["current-jobs-ready"], len(ids))
	}
	for _, id := range ids[:len(ids)/2] {
		mustSend(t, c, fmt.Sprintf("delete %d\r\n", id))
		expect(t, c, "DELETED\r\n")
	}
	more, _ := fillUntilRefused(t, c, 64<<10, len(ids)/4)
	if len(more) != len(ids)/4 {
		t.Fatalf("after deleting half: %d of %d puts inserted", len(more), len(ids)/4)
	}
	select {
	case <-s.exited:
		t.Fatalf("the server died: %v", s.waitErr)
	default:
	}
}

// After a backlog of 512 MiB of 64 KiB jobs is deleted, the server
// gives the memory back within seconds (left to the Go runtime alone, it
// takes minutes).
func TestMemoryReturnedAfterDrain(t *testing.T) {
	skipUnlessBeanpole(t, "beanpole's Go runtime tuning")
	t.Parallel()
	const (
		size = 64 << 10
		jobs = 8192 // 512 MiB
	)
	s := startServer(t, "-V", "-z", strconv.Itoa(size))
	c := s.dial(t)
	ids, refused := fillUntilRefused(t, c, size, jobs)
	if refused {
		t.Skipf("the default ceiling refuses 512 MiB of jobs on this machine (%d inserted)", len(ids))
	}
	full := procStatusKB(t, s.pid(), "VmRSS")
	if !target.race && full < 400<<10 {
		t.Fatalf("VmRSS %d kB holding 512 MiB of jobs", full)
	}
	var b strings.Builder
	for i, id := range ids {
		fmt.Fprintf(&b, "delete %d\r\n", id)
		if (i+1)%256 == 0 || i == len(ids)-1 {
			mustSend(t, c, b.String())
			expect(t, c, strings.Repeat("DELETED\r\n", strings.Count(b.String(), "\r\n")))
			b.Reset()
		}
	}
	if raceSkipsBound(t, "VmRSS after the drain") {
		return
	}
	const bound = 128 << 10 // kB
	deadline := time.Now().Add(10 * time.Second)
	for {
		rss := procStatusKB(t, s.pid(), "VmRSS")
		if rss < bound {
			t.Logf("VmRSS %d kB full, %d kB after the drain", full, rss)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("VmRSS still %d kB 10 s after deleting every job (it was %d kB full); want < %d kB", rss, full, bound)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// And the server still works.
	put(t, c, 0, 0, 10, "after", ids[len(ids)-1]+1)
}

// With -b, connections are shed while the process is within a few
// descriptors of its limit, so the binlog can always open its next segment:
// with clients filling the limit, every put (here rolling over many 4 KiB
// segments) is still INSERTED, never OUT_OF_MEMORY for want of a
// descriptor.
func TestBinlogKeepsDescriptorsInReserve(t *testing.T) {
	skipUnlessBeanpole(t, "descriptor reserve for the binlog is beanpole's")
	t.Parallel()
	s := startServer(t, "-b", t.TempDir(), "-s", "4096")
	pid := s.pid()
	ctl := s.dial(t)
	startIndex := statInt(t, stats(t, ctl), "binlog-current-index")
	nofile := uint64(max(64, procFDs(t, pid)+40))
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: nofile, Max: nofile}, nil); err != nil {
		t.Skipf("prlimit: %v", err)
	}
	open := []*conn{ctl}
	for shed := false; !shed; {
		if len(open) > int(nofile) {
			t.Fatalf("still serving after %d connections with %d descriptors", len(open), nofile)
		}
		c := s.dial(t)
		mustSend(t, c, listUsed)
		deadline := time.Now().Add(defaultTimeout)
		for len(c.buf) < usingLen && c.fill(deadline) == nil {
		}
		switch {
		case string(c.buf) == usingDflt:
			c.buf = nil
			open = append(open, c)
		case c.eof != nil && len(c.buf) == 0:
			shed = true
		default:
			t.Fatalf("client %d: want %q or a close, got %s (%v)", len(open)+1, usingDflt, show(string(c.buf)), c.eof)
		}
	}
	fds := procFDs(t, pid)
	t.Logf("%d connections served, then shed; the server has %d of %d descriptors open", len(open), fds, nofile)
	if uint64(fds)+8 > nofile {
		t.Fatalf("%d of %d descriptors open once connections are shed: no reserve left for the binlog", fds, nofile)
	}

	// 400 puts of 1000 bytes: about four per 4 KiB segment, so the binlog
	// opens a hundred new files while the connections hold their descriptors.
	body := strings.Repeat("d", 1000)
	var ids []uint64
	for i := 0; i < 400; i++ {
		c := open[i%len(open)]
		mustSend(t, c, "put 0 0 60 1000\r\n"+body+"\r\n")
		line := readLine(t, c)
		var id uint64
		if _, err := fmt.Sscanf(line, "INSERTED %d", &id); err != nil {
			t.Fatalf("put %d with the descriptor limit full of clients: %s", i+1, show(line))
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		mustSend(t, ctl, fmt.Sprintf("delete %d\r\n", id))
		expect(t, ctl, "DELETED\r\n")
	}
	if idx := statInt(t, stats(t, ctl), "binlog-current-index"); idx < startIndex+50 {
		t.Fatalf("binlog-current-index %d → %d: the puts did not roll over many segments", startIndex, idx)
	}
	// Connections are shed only while the reserve is short: after some
	// clients leave, new ones are served again.
	before := statInt(t, stats(t, ctl), "current-connections")
	for _, c := range open[len(open)-4:] {
		c.nc.Close()
	}
	waitFor(t, defaultTimeout, "the server to close 4 connections", func() bool {
		return statInt(t, stats(t, ctl), "current-connections") <= before-4
	})
	for i := 0; i < 2; i++ {
		c := s.dial(t)
		mustSend(t, c, listUsed)
		expect(t, c, usingDflt)
	}
}
