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

// A server process given a CPU quota (Contender.CPU: -node-cpu for every
// row, -capacity-cpu for the capacity rows) runs in a CPU cgroup of its
// own with that bandwidth limit, so that the nodes of a cluster behave as
// separate machines of that size instead of sharing this machine's cores,
// and a single server gets the same size of machine as each node.

// applyQuotas gives the contenders cts and the variants vs their CPU
// quotas: nodeCPU (-node-cpu), when above 0, to every server process, and
// capacityCPU to the nodes of the capacity rows (Variant.NodeCPU). check
// tells whether a process can be confined to so many cores here. It
// returns what the report's header says of the quotas and, when the
// capacity rows cannot be confined, why: they are then not run, since
// unconfined they would measure what a job costs, not capacity. An
// explicit -node-cpu that cannot be applied is an error.
func applyQuotas(cts *[2]Contender, vs []*Variant, nodeCPU, capacityCPU float64, check func(cores float64) error) (note, noQuota string, err error) {
	if nodeCPU > 0 {
		if err := check(nodeCPU); err != nil {
			return "", "", err
		}
		for i := range cts {
			cts[i].CPU = nodeCPU
		}
		return fmt.Sprintf("; each server process confined to %g CPU (cgroup)", nodeCPU), "", nil
	}
	if capacityCPU <= 0 || !slices.ContainsFunc(vs, func(v *Variant) bool { return v.NodeCPU > 0 }) {
		return "", "", nil
	}
	if err := check(capacityCPU); err != nil {
		return "; the capacity rows (CPU/node) not run: no CPU cgroup",
			fmt.Sprintf("each node needs a CPU cgroup of %g CPU (-capacity-cpu): %v; unconfined (-capacity-cpu 0) the nodes share "+
				"this machine's cores and the rows measure what a job costs, not capacity", capacityCPU, err), nil
	}
	return fmt.Sprintf("; each node of the capacity rows (CPU/node) confined to %g CPU (cgroup)", capacityCPU), "", nil
}

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

// checkCgroups confines a throwaway process to cores as confine does a
// server, and removes its cgroup again: whether confine can work here (a
// container may let a cgroup be made and not let a process into it).
func checkCgroups(cores float64) error {
	p := exec.Command("sleep", "60")
	if err := p.Start(); err != nil {
		return err
	}
	remove, err := confine(p.Process.Pid, cores)
	_ = p.Process.Kill()
	_ = p.Wait()
	if err == nil {
		remove()
	}
	return err
}

// confine moves pid into a new CPU cgroup limited to cores, and returns
// what removes the cgroup once the process has exited.
func confine(pid int, cores float64) (remove func(), err error) {
	dir, err := limitedCgroup(strconv.Itoa(pid), cores)
	if err != nil {
		return nil, err
	}
	if err := writeCgroup(dir, "cgroup.procs", strconv.Itoa(pid)); err != nil {
		return nil, err
	}
	return func() { _ = os.Remove(dir) }, nil
}

// limitedCgroup makes the CPU cgroup of this run named name, limited to
// cores (at least a hundredth of one).
func limitedCgroup(name string, cores float64) (dir string, err error) {
	root, v2, err := cpuCgroupRoot()
	if err != nil {
		return "", err
	}
	dir = filepath.Join(root, fmt.Sprintf("beanpole-bench-%d-%s", os.Getpid(), name))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("a CPU cgroup: %w (it needs root)", err)
	}
	quota := strconv.Itoa(max(int(cores*cgroupPeriod), cgroupPeriod/100))
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
		return fmt.Errorf("a CPU cgroup: %s: %w", file, err)
	}
	return nil
}
