package config

import (
	"errors"
	"fmt"
	"os/user"
	"strconv"
	"syscall"
)

// PrivilegeError is a failed -u switch. Code is the exit code beanstalkd
// uses for the same failure (ExitUserLookup, ExitNoSuchUser or ExitSetID);
// ExitCodeFor extracts it.
type PrivilegeError struct {
	Code int
	Op   string // upstream's wording of the failed call, e.g. setgid(1000 "kr")
	Err  error
}

func (e *PrivilegeError) Error() string { return e.Op + ": " + e.Err.Error() }
func (e *PrivilegeError) Unwrap() error { return e.Err }

var errNoSuchUser = errors.New("no such user")

// DropPrivileges becomes the account name and its primary group, as
// upstream's su(): setgid(pw_gid) first, while we are still allowed to,
// then setuid(pw_uid). Like upstream it does not call initgroups, so the
// account's supplementary groups are not added.
//
// One deliberate difference: when running as root, the supplementary
// groups are first cleared with setgroups. Upstream keeps root's own
// supplementary groups (typically gid 0) after switching, which leaves
// the "unprivileged" server in group root; a non-root caller cannot
// change its groups, so for it the behaviour is upstream's.
//
// Go's syscall.Setuid/Setgid apply to every thread of the process (since
// Go 1.16), so no goroutine keeps the old identity.
//
// Error messages mirror upstream's:
//
//	getpwnam("kr"): no such user            (ExitNoSuchUser, 33)
//	getpwnam("kr"): <lookup error>          (ExitUserLookup, 32)
//	setgid(1000 "kr"): operation not permitted   (ExitSetID, 34)
//	setuid(1000 "kr"): operation not permitted   (ExitSetID, 34)
func DropPrivileges(name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		op := fmt.Sprintf("getpwnam(%q)", name)
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) {
			return &PrivilegeError{Code: ExitNoSuchUser, Op: op, Err: errNoSuchUser}
		}
		return &PrivilegeError{Code: ExitUserLookup, Op: op, Err: err}
	}
	// os/user returns the numeric ids as text; on Unix they always parse.
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return &PrivilegeError{Code: ExitUserLookup, Op: fmt.Sprintf("getpwnam(%q)", name), Err: err}
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return &PrivilegeError{Code: ExitUserLookup, Op: fmt.Sprintf("getpwnam(%q)", name), Err: err}
	}

	if syscall.Geteuid() == 0 {
		if err := syscall.Setgroups([]int{}); err != nil {
			return &PrivilegeError{Code: ExitSetID, Op: fmt.Sprintf("setgroups(0 %q)", name), Err: err}
		}
	}
	if err := syscall.Setgid(gid); err != nil {
		return &PrivilegeError{Code: ExitSetID, Op: fmt.Sprintf("setgid(%d %q)", gid, name), Err: err}
	}
	if err := syscall.Setuid(uid); err != nil {
		return &PrivilegeError{Code: ExitSetID, Op: fmt.Sprintf("setuid(%d %q)", uid, name), Err: err}
	}
	return nil
}
