package config

import (
	"os"
	"path/filepath"
	"testing"
)

// writeTree creates files (path → content) under root.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCgroupLimit(t *testing.T) {
	for _, c := range []struct {
		name   string
		self   string // /proc/self/cgroup
		files  map[string]string
		want   int64
		source string
	}{
		{
			name:  "v2 systemd service with MemoryMax",
			self:  "0::/system.slice/beanstalkd.service\n",
			files: map[string]string{"sys/fs/cgroup/system.slice/beanstalkd.service/memory.max": "536870912\n", "sys/fs/cgroup/system.slice/beanstalkd.service/memory.high": "max\n", "sys/fs/cgroup/system.slice/memory.max": "max\n"},
			want:  512 << 20, source: "/sys/fs/cgroup/system.slice/beanstalkd.service/memory.max",
		},
		{
			name:  "v2 a parent binds",
			self:  "0::/a/b/c\n",
			files: map[string]string{"sys/fs/cgroup/a/b/c/memory.max": "max\n", "sys/fs/cgroup/a/memory.max": "1073741824\n", "sys/fs/cgroup/a/b/memory.max": "2147483648\n"},
			want:  1 << 30, source: "/sys/fs/cgroup/a/memory.max",
		},
		{
			name:  "v2 memory.high below memory.max",
			self:  "0::/s\n",
			files: map[string]string{"sys/fs/cgroup/s/memory.max": "1073741824\n", "sys/fs/cgroup/s/memory.high": "805306368\n"},
			want:  768 << 20, source: "/sys/fs/cgroup/s/memory.high",
		},
		{
			name:  "v2 container without a cgroup namespace: only the mount root exists",
			self:  "0::/docker/0123abcd\n",
			files: map[string]string{"sys/fs/cgroup/memory.max": "268435456\n"},
			want:  256 << 20, source: "/sys/fs/cgroup/memory.max",
		},
		{
			name:  "v1 memory controller",
			self:  "9:name=systemd:/\n4:memory:/process_api/x\n3:cpu,cpuacct:/\n0::/\n",
			files: map[string]string{"sys/fs/cgroup/memory/process_api/x/memory.limit_in_bytes": "9223372036854771712\n", "sys/fs/cgroup/memory/process_api/memory.limit_in_bytes": "3221225472\n"},
			want:  3 << 30, source: "/sys/fs/cgroup/memory/process_api/memory.limit_in_bytes",
		},
		{
			name:  "v1 unlimited",
			self:  "4:memory:/process_api/x\n",
			files: map[string]string{"sys/fs/cgroup/memory/process_api/x/memory.limit_in_bytes": "9223372036854771712\n"},
		},
		{
			name:  "v2 no limit anywhere",
			self:  "0::/user.slice\n",
			files: map[string]string{"sys/fs/cgroup/user.slice/memory.max": "max\n"},
		},
		{name: "no cgroup file", self: ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, c.files)
			n, src, ok := cgroupLimit(root, c.self)
			if ok != (c.want != 0) || (ok && (n != c.want || src != c.source)) {
				t.Fatalf("cgroupLimit = %d %q %v; want %d %q", n, src, ok, c.want, c.source)
			}
		})
	}
}

func TestJobMemoryDefaults(t *testing.T) {
	const mib = int64(1) << 20
	for _, c := range []struct{ budget, jobs, soft int64 }{
		{24 << 30, 24<<30/4*3 - 64*mib, 24<<30 - 24<<30/16}, // physical memory of a large box
		{1 << 30, 704 * mib, 960 * mib},                     // MemoryMax=1G
		{256 * mib, 128 * mib, 224 * mib},
		{64 * mib, 16 * mib, 32 * mib}, // tiny: a quarter for jobs
	} {
		if got := DefaultJobMemory(c.budget); got != c.jobs {
			t.Errorf("DefaultJobMemory(%d MiB) = %d MiB, want %d MiB", c.budget/mib, got/mib, c.jobs/mib)
		}
		if got := SoftMemoryLimit(c.budget); got != c.soft {
			t.Errorf("SoftMemoryLimit(%d MiB) = %d MiB, want %d MiB", c.budget/mib, got/mib, c.soft/mib)
		}
	}
	// 1 GiB of address space left: a budget of 448 MiB, so the soft limit
	// (416 MiB) leaves 608 MiB of address space for what is not heap.
	if got := asBudget(1 << 30); got != 448*mib {
		t.Errorf("asBudget(1 GiB) = %d MiB, want 448 MiB", got/mib)
	}
}

func TestDetectMemoryBudget(t *testing.T) {
	b := DetectMemoryBudget()
	if b.Bytes <= 0 || b.Source == "" {
		t.Fatalf("DetectMemoryBudget() = %+v", b)
	}
	t.Logf("this machine: %d MiB from %s", b.Bytes>>20, b.Source)
	if got := smallest([]MemoryBudget{{5, "a"}, {3, "b"}, {4, "c"}}); got != (MemoryBudget{3, "b"}) {
		t.Fatalf("smallest = %+v", got)
	}
}

func TestParseMemSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"8000000", 8000000, true}, {"64K", 64 << 10, true}, {"512m", 512 << 20, true},
		{"2G", 2 << 30, true}, {"1T", 1 << 40, true}, {"9223372036854775807", 1<<63 - 1, true},
		{"", 0, false}, {"G", 0, false}, {"-1", 0, false}, {"+1", 0, false}, {" 1", 0, false},
		{"1 ", 0, false}, {"1.5G", 0, false}, {"1GB", 0, false}, {"9223372036854775808", 0, false},
		{"8388608T", 0, false},
	} {
		got, ok := parseMemSize(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("parseMemSize(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
	if n, ok := statusKB("Name:\tx\nVmSize:\t 1855988 kB\nVmRSS:\t7424 kB\n", "VmSize"); !ok || n != 1855988 {
		t.Fatalf("statusKB = %d %v", n, ok)
	}
}
