package config

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// RaiseFileLimit raises the soft RLIMIT_NOFILE to the hard limit and
// returns the limits in force afterwards. Every client costs a descriptor,
// and running out of them is a classic beanstalkd failure (#351, #628), so
// beanpole takes all it is allowed at start.
//
// The Go runtime already does the same at start-up (Go 1.19+); doing it
// explicitly keeps the guarantee visible, survives a runtime change, and
// returns the numbers for the log.
//
// A hard limit of RLIM_INFINITY cannot be used as a soft limit on Linux
// (the kernel caps it at fs.nr_open), so the soft limit then goes to
// nr_open instead.
func RaiseFileLimit() (soft, hard uint64, err error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, err
	}
	target := lim.Max
	if target == rlimInfinity {
		if n, ok := nrOpen(); ok {
			target = n
		}
	}
	if lim.Cur < target {
		want := lim
		want.Cur = target
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
			return lim.Cur, lim.Max, err
		}
		lim = want
	}
	return lim.Cur, lim.Max, nil
}

// rlimInfinity is RLIM_INFINITY as the unsigned field of syscall.Rlimit
// holds it (the syscall constant is an untyped -1).
const rlimInfinity = ^uint64(0)

// nrOpen reads the kernel's per-process ceiling on descriptors.
func nrOpen() (uint64, bool) {
	b, err := os.ReadFile("/proc/sys/fs/nr_open")
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}
