package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestNodeCPUConfinesEachServerToItsShare(t *testing.T) {
	cpuQuota = 0.25
	defer func() { cpuQuota = 0 }()
	if err := checkCgroups(); err != nil {
		t.Skip("no CPU cgroup with a bandwidth limit can be made here:", err)
	}
	s, err := spawn("spin", "/bin/sh", []string{"-c", "while :; do :; done"}, -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(s.Pid) + "/cgroup")
	i := strings.Index(string(b), "beanpole-bench-")
	if err != nil || i < 0 {
		s.Stop()
		t.Fatalf("the server is in no cgroup of the benchmark's: %q, %v", b, err)
	}
	name := strings.TrimSpace(strings.SplitN(string(b)[i:], "\n", 2)[0])
	// A process that would spin a whole core gets a quarter of one: over
	// whatever time passes (a loaded machine gives it less, never more).
	cpu0, t0 := procCPU(s.Pid), time.Now()
	for time.Since(t0) < time.Second {
		time.Sleep(50 * time.Millisecond)
	}
	used, wall := procCPU(s.Pid)-cpu0, time.Since(t0).Seconds()
	s.Stop()
	if share := used / wall; share > 0.25*1.3 {
		t.Fatalf("a server confined to 0.25 CPU used %.2f CPU over %.2fs", share, wall)
	}
	// Its cgroup goes with it.
	root, _, _ := cpuCgroupRoot()
	if _, err := os.Stat(root + "/" + name); !os.IsNotExist(err) {
		t.Fatalf("cgroup %s is left behind after the server exited (%v)", name, err)
	}
}
