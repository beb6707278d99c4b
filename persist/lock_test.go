package persist

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

func TestLockSecondOpenInProcess(t *testing.T) {
	dir := t.TempDir()
	l, _ := mustOpen(t, fastOpts(dir))
	if _, _, err := Open(fastOpts(dir), testLogger(t)); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	// The failed attempt must not have released the first holder's lock.
	if _, _, err := Open(fastOpts(dir), testLogger(t)); !errors.Is(err, ErrLocked) {
		t.Fatalf("third Open: %v, want ErrLocked", err)
	}
	l.Close()
	l, _ = mustOpen(t, fastOpts(dir))
	l.Close()
}

// TestLockOtherProcess runs the test binary again as a second server on the
// same directory: it must fail to lock and exit 10, like upstream.
func TestLockOtherProcess(t *testing.T) {
	dir := t.TempDir()
	l, _ := mustOpen(t, fastOpts(dir))
	code := runHelper(t, "lock", dir)
	if code != 10 {
		t.Fatalf("second process exited %d, want 10", code)
	}
	l.Close()
	if code := runHelper(t, "lock", dir); code != 0 {
		t.Fatalf("after Close the second process exited %d, want 0", code)
	}
}

func runHelper(t *testing.T, mode, dir string) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), "PERSIST_HELPER="+mode, "PERSIST_DIR="+dir)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	return 0
}

// TestHelperProcess is not a test: it is the body of the subprocesses the
// lock and crash tests start.
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv("PERSIST_DIR")
	switch os.Getenv("PERSIST_HELPER") {
	case "lock":
		l, _, err := Open(fastOpts(dir), testLogger(t))
		if errors.Is(err, ErrLocked) {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(10)
		}
		if err != nil {
			os.Exit(1)
		}
		l.Close()
		os.Exit(0)
	case "crash":
		crashChild(dir)
	}
}
