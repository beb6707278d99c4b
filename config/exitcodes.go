package config

import "errors"

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
	// systemd socket was unusable.
	ExitListen = 111
)

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
