package e2e

// The server process: drain mode via SIGUSR1, unix
// sockets with -l unix:PATH (upstream's cttest_peek_ok_unix and
// cttest_unix_auto_removal) and flags.

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// enterDrain sends SIGUSR1 and waits until stats shows draining: true.
func enterDrain(t *testing.T, s *server, c *conn) {
	t.Helper()
	s.signal(t, syscall.SIGUSR1)
	waitFor(t, defaultTimeout, "draining: true", func() bool {
		return stats(t, c)["draining"] == "true"
	})
}

// Upstream's cttest_put_in_drain.
func TestPutInDrain(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := s.dial(t)
	enterDrain(t, s, c)
	mustSend(t, c, "put 0 0 1 1\r\nx\r\n")
	expect(t, c, "DRAINING\r\n")
}

// In drain mode only put is refused: the body is still read, the CRLF
// check comes first, and the id is burned. Everything else keeps working.
func TestDrainMode(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := s.dial(t)
	runSteps(t, c, []step{
		{"put 0 0 10 1\r\na\r\n", "INSERTED 1\r\n"},
		{"put 0 0 10 1\r\nb\r\n", "INSERTED 2\r\n"},
	})
	enterDrain(t, s, c)
	runSteps(t, c, []step{
		{"put 0 0 10 1\r\nc\r\n", "DRAINING\r\n"},
		{"put 0 0 10 1\r\ncXY", "EXPECTED_CRLF\r\n"},
		{"put 0 0 10 9\r\nlist-tube\r\n", "DRAINING\r\n"}, // the body is not a command
		{"reserve\r\n", "RESERVED 1 1\r\na\r\n"},
		{"delete 1\r\n", "DELETED\r\n"},
		{"peek 2\r\n", "FOUND 2 1\r\nb\r\n"},
		{"peek 3\r\n", "NOT_FOUND\r\n"},
		{"use other\r\n", "USING other\r\n"},
		{"list-tube-used\r\n", "USING other\r\n"},
	})
	// Drain mode cannot be left; a second signal changes nothing.
	s.signal(t, syscall.SIGUSR1)
	d := s.dial(t)
	mustSend(t, d, "put 0 0 10 1\r\nd\r\n")
	expect(t, d, "DRAINING\r\n")
	st := stats(t, d)
	if st["draining"] != "true" || st["cmd-put"] != "6" || st["total-jobs"] != "2" {
		t.Fatalf("draining %s cmd-put %s total-jobs %s", st["draining"], st["cmd-put"], st["total-jobs"])
	}
}

// shortTempDir returns a short directory path for unix sockets (their paths
// are limited to about 107 bytes).
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "bp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Upstream's cttest_peek_ok_unix.
func TestPeekOKUnix(t *testing.T) {
	t.Parallel()
	s := startUnixServer(t, filepath.Join(shortTempDir(t), "socket"))
	c := s.dial(t)
	mustSend(t, c, "put 0 0 1 1\r\na\r\n")
	expect(t, c, "INSERTED 1\r\n")
	mustSend(t, c, "peek 1\r\n")
	expect(t, c, "FOUND 1 1\r\n")
	expect(t, c, "a\r\n")
}

// Upstream's cttest_unix_auto_removal: a stale socket file left by a killed
// server is replaced.
func TestUnixAutoRemoval(t *testing.T) {
	t.Parallel()
	path := filepath.Join(shortTempDir(t), "socket")
	s := startUnixServer(t, path)
	mustSend(t, s.dial(t), "use x\r\n")
	s.stop() // SIGKILL: the socket file stays behind
	if fi, err := os.Lstat(path); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("expected a stale socket at %s: %v", path, err)
	}
	s2 := startUnixServer(t, path)
	c := s2.dial(t)
	mustSend(t, c, "list-tube-used\r\n")
	expect(t, c, "USING default\r\n")
}

// -l unix:PATH refuses to replace a file that is not a socket.
func TestUnixPathNotASocket(t *testing.T) {
	t.Parallel()
	path := filepath.Join(shortTempDir(t), "file")
	if err := os.WriteFile(path, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := serverCommand("-l", "unix:"+path)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		expectNoRace(t, cmd, out.String())
		if err == nil {
			t.Fatalf("server exited 0 with a regular file at the socket path")
		}
	case <-time.After(defaultTimeout):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("server kept running with a regular file at the socket path")
	}
	if data, err := os.ReadFile(path); err != nil || string(data) != "keep me" {
		t.Fatalf("the regular file was touched: %q %v", data, err)
	}
}

// The listener takes -l and -p, and -V does not change the protocol.
func TestVerboseFlag(t *testing.T) {
	t.Parallel()
	s := startServer(t, "-V")
	c := s.dial(t)
	mustSend(t, c, "put 0 0 1 1\r\na\r\nreserve\r\n")
	expectLine(t, c, "INSERTED 1")
	expectLine(t, c, "RESERVED 1 1")
	expectLine(t, c, "a")
}

// Flag values may be attached (-z10) and flags combined (-VV); -z
// above 1 GiB is clamped.
func TestFlagForms(t *testing.T) {
	t.Parallel()
	c := startServer(t, "-z10", "-VV").dial(t)
	mustSend(t, c, "put 0 0 0 11\r\n01234567890\r\nput 0 0 0 10\r\n0123456789\r\n")
	expect(t, c, "JOB_TOO_BIG\r\nINSERTED 1\r\n")
	if st := stats(t, c); st["max-job-size"] != "10" {
		t.Fatalf("max-job-size %s", st["max-job-size"])
	}
	d := startServer(t, "-z", "2000000000").dial(t)
	if st := stats(t, d); st["max-job-size"] != "1073741824" {
		t.Fatalf("-z 2000000000: max-job-size %s, want the 1 GiB clamp", st["max-job-size"])
	}
}

// Usage errors exit 5 without serving; -h exits 0.
func TestUsageExitCodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"-h"}, 0},
		{[]string{"-x"}, 5},
		{[]string{"stray"}, 5},
		{[]string{"-"}, 5},
		{[]string{"-p"}, 5},
		{[]string{"-z", "lots"}, 5},
	} {
		cmd := serverCommand(tc.args...)
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(defaultTimeout):
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("%v: still running after %v", tc.args, defaultTimeout)
		}
		expectNoRace(t, cmd, out.String())
		if got := cmd.ProcessState.ExitCode(); got != tc.code {
			t.Errorf("%v: exit code %d, want %d", tc.args, got, tc.code)
		}
	}
}
