package config

import (
	"errors"
	"io/fs"
	"syscall"
)

// Exit codes of beanstalkd 1.12 that belong to start-up configuration.
// Init scripts and supervisors may key on them, so beanpole keeps the
// same numbers.
const (
	// ExitUsage: bad command line (unknown flag, positional argument,
	// missing flag value, invalid size).
	ExitUsage = 5
	// ExitUserLookup: looking up -u USER failed for a reason other than
	// "no such user" (getpwnam set errno).
	ExitUserLookup = 32
	// ExitNoSuchUser: -u USER names no account.
	ExitNoSuchUser = 33
	// ExitSetID: setgid or setuid to -u USER was refused.
	ExitSetID = 34
	// ExitListen: the listen socket could not be created or the inherited
	// systemd socket was unusable, or -l or -p is empty.
	ExitListen = 111
	// ExitLocked: another server holds the binlog directory's lock
	// (upstream's "failed to lock wal dir"). Restarting cannot help.
	ExitLocked = 10
)

// Exit codes of beanpole's own, for failures upstream lumps into
// ExitLocked: the binlog directory cannot be written, which restarting
// cannot mend either, and which is no other server's doing. The numbers
// are those of sysexits.h.
const (
	// ExitReadOnly: the binlog directory is on a read-only file system
	// (EROFS), as every path but a unit's StateDirectory is under
	// systemd's ProtectSystem=strict.
	ExitReadOnly = 73 // EX_CANTCREAT
	// ExitPermission: the user the server runs as may not write the
	// binlog directory or read its files (EACCES, EPERM).
	ExitPermission = 77 // EX_NOPERM
	// ExitRemoved: this cluster node was removed from its group (the
	// group's configuration no longer has it); restarting it would only
	// find that again.
	ExitRemoved = 78 // EX_CONFIG
)

// ExitCodeForDir is ExitReadOnly or ExitPermission when err, a failure to
// use a directory, is one of those, and 0 otherwise.
func ExitCodeForDir(err error) int {
	switch {
	case errors.Is(err, syscall.EROFS):
		return ExitReadOnly
	case errors.Is(err, fs.ErrPermission):
		return ExitPermission
	}
	return 0
}

// ExitCodeFor maps an error returned by this package to the exit code
// beanstalkd would have used for the same failure. Errors from
// DropPrivileges carry their own code (32, 33 or 34); nil is 0; anything
// else is 1, upstream's generic failure.
func ExitCodeFor(err error) int {
	if err == nil {
		return 0
	}
	var pe *PrivilegeError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return 1
}
