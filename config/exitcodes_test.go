package config

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
)

// A binlog directory that is read-only, or that the user may not write,
// gets an exit code of its own, however deeply the error is wrapped;
// anything else is left to the caller (0).
func TestExitCodeForDirTellsReadOnlyFromPermissionDenied(t *testing.T) {
	wrap := func(errno syscall.Errno) error {
		return fmt.Errorf("binlog import: %w", &os.PathError{Op: "open", Path: "/var/lib/beanstalkd/lock", Err: errno})
	}
	for _, tc := range []struct {
		err  error
		want int
	}{
		{wrap(syscall.EROFS), ExitReadOnly},
		{wrap(syscall.EACCES), ExitPermission},
		{wrap(syscall.EPERM), ExitPermission},
		{wrap(syscall.ENOENT), 0},
		{errors.New("failed to lock wal dir"), 0},
		{nil, 0},
	} {
		if got := ExitCodeForDir(tc.err); got != tc.want {
			t.Errorf("ExitCodeForDir(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	if ExitReadOnly == ExitPermission || ExitReadOnly == ExitLocked || ExitPermission == ExitLocked {
		t.Fatal("the binlog directory's exit codes must differ")
	}
}
