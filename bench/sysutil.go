package main

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// tasksetPath is the taskset binary when present (used to pin servers).
var tasksetPath, _ = exec.LookPath("taskset")

// raiseNofile raises the soft RLIMIT_NOFILE to the hard limit and returns
// the new limit. It goes through syscall.Setrlimit on purpose: that tells
// the Go runtime not to restore the old soft limit in children, so the
// servers we start inherit the raised limit too.
func raiseNofile() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	return lim.Cur, nil
}

// selfCPU returns this process's consumed user+system CPU seconds.
func selfCPU() float64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// pinPid pins every thread of pid to cpu (threads created later inherit
// the mask of their creator); cpu < 0 lets them run on every CPU again.
func pinPid(pid, cpu int) error {
	var set unix.CPUSet
	set.Zero()
	if cpu >= 0 {
		set.Set(cpu)
	} else {
		for i := range numCPU() {
			set.Set(i)
		}
	}
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return unix.SchedSetaffinity(pid, &set)
	}
	var first error
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// numCPU is the number of CPUs this process may run on.
func numCPU() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 1
	}
	return set.Count()
}

// netCounters returns system-wide loopback backlog drops (sum of the
// "dropped" column of /proc/net/softnet_stat) and TCP retransmitted
// segments (/proc/net/snmp). Drops happen when a burst overflows
// net.core.netdev_max_backlog; the retransmits that follow stall a
// connection for a retransmission timeout, which shows in tail latency.
func netCounters() (drops, retrans int64) {
	if b, err := os.ReadFile("/proc/net/softnet_stat"); err == nil {
		for _, ln := range strings.Split(string(b), "\n") {
			f := strings.Fields(ln)
			if len(f) >= 2 {
				v, _ := strconv.ParseInt(f[1], 16, 64)
				drops += v
			}
		}
	}
	if b, err := os.ReadFile("/proc/net/snmp"); err == nil {
		var names []string
		for _, ln := range strings.Split(string(b), "\n") {
			f := strings.Fields(ln)
			if len(f) < 2 || f[0] != "Tcp:" {
				continue
			}
			if names == nil {
				names = f
				continue
			}
			for i := 1; i < len(f) && i < len(names); i++ {
				if names[i] == "RetransSegs" {
					retrans, _ = strconv.ParseInt(f[i], 10, 64)
				}
			}
		}
	}
	return drops, retrans
}
