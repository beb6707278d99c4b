package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.subtree_control"); err == nil {
		if !slices.Contains(strings.Fields(string(b)), "cpu") {
			return "", false, errors.New("cgroup v2 without the cpu controller for child groups (as root: echo +cpu > /sys/fs/cgroup/cgroup.subtree_control)")
		}
		return "/sys/fs/cgroup", true, nil
	}
	return "", false, errors.New("no CPU cgroup hierarchy under /sys/fs/cgroup (cgroup v1 cpu or v2)")
}

// checkCgroups confines a throwaway process as confine does a server, and
// removes its cgroup again: whether confine can work here (a container may
// let a cgroup be made and not let a process into it).
func checkCgroups() error {
	p := exec.Command("sleep", "60")
	if err := p.Start(); err != nil {
		return err
	}
	remove, err := confine(p.Process.Pid)
	_ = p.Process.Kill()
	_ = p.Wait()
	if err == nil {
		remove()
	}
	return err
}

// confine moves pid into a new CPU cgroup limited to cpuQuota cores, and
// returns what removes the cgroup once the process has exited.
func confine(pid int) (remove func(), err error) {
	dir, err := limitedCgroup(strconv.Itoa(pid))
	if err != nil {
		return nil, err
	}
	if err := writeCgroup(dir, "cgroup.procs", strconv.Itoa(pid)); err != nil {
		return nil, err
	}
	return func() { _ = os.Remove(dir) }, nil
}

// limitedCgroup makes the CPU cgroup of this run named name, limited to
// cpuQuota cores (at least a hundredth of one).
func limitedCgroup(name string) (dir string, err error) {
	root, v2, err := cpuCgroupRoot()
	if err != nil {
		return "", err
	}
	dir = filepath.Join(root, fmt.Sprintf("beanpole-bench-%d-%s", os.Getpid(), name))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("-node-cpu: %w (it needs root)", err)
	}
	quota := strconv.Itoa(max(int(cpuQuota*cgroupPeriod), cgroupPeriod/100))
	writes := [][2]string{{"cpu.cfs_period_us", strconv.Itoa(cgroupPeriod)}, {"cpu.cfs_quota_us", quota}}
	if v2 {
		writes = [][2]string{{"cpu.max", quota + " " + strconv.Itoa(cgroupPeriod)}}
	}
	for _, w := range writes {
		if err := writeCgroup(dir, w[0], w[1]); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// writeCgroup writes one of dir's files, and removes dir if that fails.
func writeCgroup(dir, file, value string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
		_ = os.Remove(dir)
		return fmt.Errorf("-node-cpu: %s: %w", file, err)
	}
	return nil
}
