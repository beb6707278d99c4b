package main

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestNodeCPUConfinesEachServerToItsShare(t *testing.T) {
	if err := checkCgroups(0.25); err != nil {
		t.Skip("no CPU cgroup with a bandwidth limit can be made here:", err)
	}
	s, err := spawn("spin", "/bin/sh", []string{"-c", "while :; do :; done"}, -1, 0, 0.25)
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

// The capacity rows, and only they, confine every node of both clusters
// to the capacity quota, and their titles say how much.
func TestCapacityRowsAloneConfineEachNode(t *testing.T) {
	o := Options{BinConns: 50, PipeConns: []int{1}, PipeWindow: 64, Size: 64, Conns: []int{1}, Fsync: []int{0}, CapacityCPU: 0.2}
	var capacity []string
	for _, v := range buildVariants(&o) {
		cts := v.contenders([2]Contender{{Name: "beanpole"}, {Name: "beanstalkd"}})
		if v.NodeCPU == 0 {
			if cts[0].CPU != 0 || cts[1].CPU != 0 {
				t.Errorf("%s is confined", v.Name)
			}
			continue
		}
		capacity = append(capacity, v.Name)
		if v.NodeCPU != 0.2 || cts[0].CPU != 0.2 || cts[1].CPU != 0.2 {
			t.Errorf("%s: quota %g, contenders %g and %g; want 0.2", v.Name, v.NodeCPU, cts[0].CPU, cts[1].CPU)
		}
		for _, r := range v.Rows {
			if !strings.HasSuffix(r.Title, ", 0.2 CPU/node") {
				t.Errorf("%s: the title %q does not give the quota", v.Name, r.Title)
			}
		}
	}
	want := []string{"cluster-groups3-c50", "cluster-groups3-pipeline-c9", "cluster6-groups6-r3-c50", "cluster6-groups6-r3-pipeline-c36"}
	if !slices.Equal(capacity, want) {
		t.Errorf("the confined rows are %q; want %q", capacity, want)
	}
}

// Where no cgroup can be made the capacity rows are not run and say why;
// -node-cpu confines every contender, and fails the run if it cannot.
func TestQuotasSayWhyCapacityRowsCannotRun(t *testing.T) {
	capRow, plain := &Variant{Name: "cap", NodeCPU: 0.2}, &Variant{Name: "plain"}
	fail := func(float64) error { return errors.New("permission denied") }
	ok := func(float64) error { return nil }

	var cts [2]Contender
	note, noQuota, err := applyQuotas(&cts, []*Variant{plain, capRow}, 0, 0.2, fail)
	if err != nil || !strings.Contains(noQuota, "permission denied") || !strings.Contains(note, "not run") {
		t.Errorf("no cgroup: note %q, why %q, %v", note, noQuota, err)
	}
	note, noQuota, err = applyQuotas(&cts, []*Variant{plain}, 0, 0.2, fail)
	if note != "" || noQuota != "" || err != nil {
		t.Errorf("no capacity row selected: note %q, why %q, %v", note, noQuota, err)
	}
	note, noQuota, err = applyQuotas(&cts, []*Variant{plain, capRow}, 0, 0.2, ok)
	if err != nil || noQuota != "" || !strings.Contains(note, "confined to 0.2 CPU") || cts[0].CPU != 0 || cts[1].CPU != 0 {
		t.Errorf("capacity rows confined: note %q, why %q, %v, contenders %+v", note, noQuota, err, cts)
	}
	note, _, err = applyQuotas(&cts, []*Variant{plain, capRow}, 0.5, 0.5, ok)
	if err != nil || !strings.Contains(note, "each server process confined to 0.5 CPU") || cts[0].CPU != 0.5 || cts[1].CPU != 0.5 {
		t.Errorf("-node-cpu 0.5: note %q, %v, contenders %+v", note, err, cts)
	}
	if _, _, err := applyQuotas(&cts, []*Variant{plain}, 0.5, 0.5, fail); err == nil {
		t.Errorf("-node-cpu without a cgroup: no error")
	}
}
