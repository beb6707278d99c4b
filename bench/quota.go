package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// cpuQuota, when above 0 (-node-cpu), is how much CPU, in cores, each
// server process may use: every process the benchmark starts (a
// contender, each node of a cluster) runs in a CPU cgroup of its own with
// that bandwidth limit, so that the nodes of a cluster behave as separate
// machines of that size instead of sharing this machine's cores, and a
// single server gets the same size of machine as each node.
var cpuQuota float64

// cgroupPeriod is the bandwidth period the quota is a share of (µs):
// short, so that a confined process waits out a throttled period of a few
// milliseconds, as a slower machine would be slower, rather than stalling
// for tens of them.
const cgroupPeriod = 10000

// cpuCgroupRoot is where CPU cgroups are made: cgroup v1's cpu hierarchy,
// or the v2 unified hierarchy.
func cpuCgroupRoot() (dir string, v2 bool, err error) {
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); err == nil {
		return "/sys/fs/cgroup/cpu", false, nil
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return "/sys/fs/cgroup", true, nil
	}
	return "", false, errors.New("no CPU cgroup hierarchy under /sys/fs/cgroup (cgroup v1 cpu or v2)")
}

// confine moves pid into a new CPU cgroup limited to cpuQuota cores, and
// returns what removes the cgroup once the process has exited.
func confine(pid int) (remove func(), err error) {
	root, v2, err := cpuCgroupRoot()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, fmt.Sprintf("beanpole-bench-%d-%d", os.Getpid(), pid))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("-node-cpu: %w (it needs root)", err)
	}
	remove = func() { _ = os.Remove(dir) }
	quota := strconv.Itoa(int(cpuQuota * cgroupPeriod))
	writes := [][2]string{{"cpu.cfs_period_us", strconv.Itoa(cgroupPeriod)}, {"cpu.cfs_quota_us", quota}}
	if v2 {
		_ = os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+cpu"), 0)
		writes = [][2]string{{"cpu.max", quota + " " + strconv.Itoa(cgroupPeriod)}}
	}
	writes = append(writes, [2]string{"cgroup.procs", strconv.Itoa(pid)})
	for _, w := range writes {
		if err := os.WriteFile(filepath.Join(dir, w[0]), []byte(w[1]), 0); err != nil {
			remove()
			return nil, fmt.Errorf("-node-cpu: %s: %w", w[0], err)
		}
	}
	return remove, nil
}
