package config

import (
	"fmt"
	"math"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Memory budget: how much memory the process can count on, from whichever
// of these is smallest:
//
//   - its cgroup's limit (systemd MemoryMax=/MemoryHigh=, a container's
//     memory limit): cgroup v2 memory.max and memory.high, or v1
//     memory.limit_in_bytes, of the cgroup named in /proc/self/cgroup and
//     of each of its ancestors, since any of them can be the one that
//     binds;
//   - the address-space limit (RLIMIT_AS, ulimit -v) less the address space
//     already mapped (the Go runtime reserves far more than it touches:
//     about 1.7 GB for an idle server), taken at half less 64 MiB
//     (asBudget), because address space is not memory: the heap grows in
//     64 MiB arenas, pages the runtime returns to the system stay mapped,
//     and in a cgo build (the default where a C compiler is found) every
//     new thread maps an 8 MiB stack and may get a 64 MiB malloc arena.
//     Measured on 2 cores: filling a server to its ceiling, then pushing
//     refused puts at it, the address space grew by the soft memory limit
//     plus 100-280 MB;
//   - GOMEMLIMIT, if the operator set one;
//   - physical memory.
//
// The ceiling on job memory and the Go runtime's soft memory limit are
// derived from it (DefaultJobMemory, SoftMemoryLimit).

// MemoryBudget is the memory the process can count on and where that
// figure comes from.
type MemoryBudget struct {
	Bytes  int64
	Source string
}

// DetectMemoryBudget reads the limits that apply to this process now.
func DetectMemoryBudget() MemoryBudget {
	var cands []MemoryBudget
	if n, src, ok := cgroupLimit("/", readFile("/proc/self/cgroup")); ok {
		cands = append(cands, MemoryBudget{n, src})
	}
	var as unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_AS, &as) == nil && as.Cur != unix.RLIM_INFINITY && as.Cur < math.MaxInt64 {
		if vm, ok := statusKB(readFile("/proc/self/status"), "VmSize"); ok {
			cands = append(cands, MemoryBudget{asBudget(int64(as.Cur) - vm<<10),
				fmt.Sprintf("RLIMIT_AS %d less %d mapped", as.Cur, vm<<10)})
		}
	}
	if lim := debug.SetMemoryLimit(-1); lim < math.MaxInt64 {
		cands = append(cands, MemoryBudget{lim, "GOMEMLIMIT"})
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		cands = append(cands, MemoryBudget{int64(si.Totalram) * int64(si.Unit), "physical memory"})
	}
	return smallest(cands)
}

// asBudget is the memory budget that free address space allows.
func asBudget(free int64) int64 { return max(free/2-64<<20, free/4) }

func smallest(cands []MemoryBudget) MemoryBudget {
	var b MemoryBudget
	for _, c := range cands {
		if b.Source == "" || c.Bytes < b.Bytes {
			b = c
		}
	}
	return b
}

// DefaultJobMemory is the ceiling on job memory for a budget: three
// quarters of it, less 64 MiB. The rest is for what a server holds besides
// its jobs and for the collector: garbage between cycles (at the ceiling,
// every refused put's body is garbage), the 64 MiB of headroom
// memtune.KeepHeapHeadroom gives the collector while bodies stream through,
// connection buffers, stacks and the runtime's own structures, and, in a
// cgroup, the kernel's socket buffers and page cache, which count against
// the same limit. It is never less than a quarter of the budget.
func DefaultJobMemory(budget int64) int64 {
	return max(budget/4*3-64<<20, budget/4)
}

// SoftMemoryLimit is the Go runtime's soft memory limit for a budget: all
// of it but max(1/16, 32 MiB) for what the runtime does not count (thread
// stacks of the kernel, socket buffers in a cgroup, the binary). Close to
// the budget the collector then works harder instead of letting garbage
// push the process over the limit.
func SoftMemoryLimit(budget int64) int64 {
	return max(budget-max(budget/16, 32<<20), budget/2)
}

// cgroupLimit finds the smallest memory limit on the cgroup that
// procSelfCgroup (the text of /proc/self/cgroup) names and its ancestors,
// under root (the file system root; tests use a directory). It reports
// false when no limit is set.
func cgroupLimit(root, procSelfCgroup string) (int64, string, bool) {
	var best int64 = math.MaxInt64
	var src string
	try := func(file string) {
		n, ok := parseCgroupLimit(readFile(path.Join(root, file)))
		if ok && n < best {
			best, src = n, file
		}
	}
	for _, line := range strings.Split(procSelfCgroup, "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		var mounts, files []string
		switch {
		case f[0] == "0" && f[1] == "":
			mounts = []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}
			files = []string{"memory.max", "memory.high"}
		case hasController(f[1], "memory"):
			mounts = []string{"/sys/fs/cgroup/memory"}
			files = []string{"memory.limit_in_bytes"}
		default:
			continue
		}
		// Walk from the process's cgroup up to the root of the mount: in
		// a container without its own cgroup namespace the path is the
		// host's and only the root exists.
		for dir := path.Clean("/" + f[2]); ; dir = path.Dir(dir) {
			for _, m := range mounts {
				for _, file := range files {
					try(path.Join(m, dir, file))
				}
			}
			if dir == "/" {
				break
			}
		}
	}
	return best, src, src != ""
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// parseCgroupLimit reads a memory.max / memory.high / memory.limit_in_bytes
// value: "max", or v1's page-rounded 2^63-1 (which means no limit), or a
// byte count.
func parseCgroupLimit(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= 1<<62 {
		return 0, false
	}
	return n, true
}

// statusKB reads a "kB" field of /proc/self/status.
func statusKB(status, field string) (int64, bool) {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

func readFile(name string) string {
	b, err := os.ReadFile(name)
	if err != nil {
		return ""
	}
	return string(b)
}

// parseMemSize reads a --max-job-memory value: decimal digits, optionally
// followed by K, M, G or T (powers of 1024). No sign, no blanks.
func parseMemSize(s string) (int64, bool) {
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k', 'K':
			mult = 1 << 10
		case 'm', 'M':
			mult = 1 << 20
		case 'g', 'G':
			mult = 1 << 30
		case 't', 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			s = s[:n-1]
		}
	}
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, false
	}
	return n * mult, true
}
