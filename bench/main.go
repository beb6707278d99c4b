// Command bench runs beanpole and C beanstalkd side by side on loopback and
// compares them scenario by scenario (see README.md).
package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func init() {
	// Servers are started from the main goroutine; keeping it on the main
	// thread makes their Pdeathsig (tied to the forking thread) fire only
	// when this process dies. The epoll loop also runs here.
	runtime.LockOSThread()
}

// CtResult is what one contender produced for one variant.
type CtResult struct {
	Runs   []Metrics
	Errors []string
	NA     string
	Failed bool
	Median Metrics
}

// VarResult holds both contenders' results for one variant.
type VarResult struct {
	V     *Variant
	Flags []string
	Res   [2]*CtResult // index 0 beanpole, 1 beanstalkd
}

func main() {
	os.Exit(realMain())
}

func realMain() int {
	var (
		beanpole   = flag.String("beanpole", "", "path of the beanpole server binary (required)")
		beanstalkd = flag.String("beanstalkd", "/usr/bin/beanstalkd", "path of the C beanstalkd binary")
		outDir     = flag.String("out", "bench/results", "directory for results.json, results.txt and chart.png")
		doc        = flag.String("doc", "", "also write a Markdown page of the run here (from performance.md.tmpl), for docs/performance.md")
		reps       = flag.Int("reps", 3, "repetitions per scenario and contender (medians are reported)")
		only       = flag.String("only", "", "comma list of scenarios to run: groups ("+strings.Join(groups, ",")+"), numbers 1-11 or variant names (see -list)")
		list       = flag.Bool("list", false, "list the scenario variants and exit")
		pin        = flag.Bool("pin", false, "run every scenario pinned: the client on CPU 0, servers on CPU 1")
		pinned     = flag.String("pinned", defaultPinned, "also run these scenarios pinned (as -only; empty: none), for the per-core targets")
		nodeCPU    = flag.Float64("node-cpu", 0, "confine each server process (a contender, each cluster node) to this many cores, in a CPU cgroup of its own, as if each ran on a machine of that size (needs root; 0: no limit); the capacity rows then use it too")
		capCPU     = flag.Float64("capacity-cpu", defaultCapacityCPU, "confine each node of the capacity rows (the cluster rows of many groups against one, titles ending in CPU/node) to this many cores, as -node-cpu does every server (needs root; 0: unconfined)")
		o          Options
	)
	flag.DurationVar(&o.Duration, "duration", 3*time.Second, "measured time per run")
	flag.DurationVar(&o.Warmup, "warmup", 500*time.Millisecond, "unmeasured warm-up before each measured window")
	flag.DurationVar(&o.Drain, "drain", 30*time.Second, "how long a run may take to finish outstanding work after its window before it fails")
	flag.IntVar(&o.Size, "size", 64, "job body size in bytes for the small-job scenarios (>= 16)")
	conns := flag.String("conns", "1,10,50,200,1000", "roundtrip: connection counts")
	flag.IntVar(&o.PipeWindow, "pipe-window", 64, "pipeline: commands in flight per connection")
	pipeConns := flag.String("pipe-conns", "1", "pipeline: connection counts")
	flag.IntVar(&o.PipeMax, "pipe-max", 500000, "pipeline: stop putting after this many jobs (bounds server memory)")
	flag.IntVar(&o.Producers, "producers", 10, "pubsub: producer connections")
	flag.IntVar(&o.Consumers, "consumers", 50, "pubsub: consumer connections")
	flag.IntVar(&o.PubTubes, "pubsub-tubes", 4, "pubsub: shared tubes (producers spread over them, consumers watch all)")
	flag.IntVar(&o.ProdWindow, "prod-window", 8, "pubsub/tubes: puts in flight per producer")
	flag.IntVar(&o.Backlog, "backlog", 0, "pubsub/tubes: producers pause while this many jobs are undelivered (0: 2 per consumer, at least 64)")
	tubes := flag.String("tubes", "1,1000,10000", "tubes: tube counts")
	flag.IntVar(&o.TubeCons, "tube-consumers", 1000, "tubes: consumer connections (each watches 10 tubes; raised to tubes/10 if needed)")
	flag.IntVar(&o.TubeProds, "tube-producers", 10, "tubes: producer connections (use+put per job, round-robin over tubes)")
	idle := flag.String("idle", "1000,10000,max", "idle: connection counts (max = open-file limit minus a margin)")
	fan := flag.String("fanout", "1000,10000", "fanout: blocked reserver counts")
	large := flag.String("large", "65536,1048576", "large: body sizes in bytes (-z is set to the size)")
	flag.IntVar(&o.LargeConns, "large-conns", 10, "large: connections")
	flag.IntVar(&o.BinConns, "binlog-conns", 50, "binlog: connections")
	fsync := flag.String("fsync", "50,0", "binlog: -f values (ms)")
	flag.IntVar(&o.TLSConns, "tls-conns", 50, "tls: round-trip connections")
	flag.IntVar(&o.TLSHsConns, "tls-hs-conns", 8, "tls: clients connecting at a time in the handshake scenario")
	flag.IntVar(&o.TLSIdle, "tls-idle", 2000, "tls: idle connections")
	flag.StringVar(&stunnelPath, "stunnel", stunnelPath, "tls: stunnel binary put in front of beanstalkd (Debian package stunnel4)")
	flag.IntVar(&o.MemJobs, "mem-jobs", 1_000_000, "memory: ready jobs to queue (0: skip the scenario)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run . -beanpole PATH [-beanstalkd PATH] [-out DIR] [flags]   (in bench/)\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "bench: unexpected arguments %q\n", flag.Args())
		return 2
	}

	nofile, err := raiseNofile()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: raising the open-file limit: %v\n", err)
	}
	o.NoFile = nofile

	var perr error
	parse := func(name, s string, allowMax bool) []int {
		var out []int
		for _, f := range strings.Split(s, ",") {
			f = strings.TrimSpace(f)
			if f == "" {
				continue
			}
			if allowMax && f == "max" {
				out = append(out, int(nofile)-fdMargin-2)
				continue
			}
			n, err := strconv.Atoi(f)
			if err != nil || n < 0 {
				perr = fmt.Errorf("-%s: bad value %q", name, f)
				continue
			}
			out = append(out, n)
		}
		return out
	}
	o.Conns = parse("conns", *conns, false)
	o.PipeConns = parse("pipe-conns", *pipeConns, false)
	o.Tubes = parse("tubes", *tubes, false)
	o.Idle = dedupInts(parse("idle", *idle, true))
	o.Fanout = parse("fanout", *fan, false)
	o.Large = parse("large", *large, false)
	o.Fsync = parse("fsync", *fsync, false)
	if *nodeCPU < 0 || *capCPU < 0 {
		perr = errors.New("-node-cpu and -capacity-cpu must be >= 0")
	}
	o.CapacityCPU = *capCPU
	if *nodeCPU > 0 {
		o.CapacityCPU = *nodeCPU
	}
	if perr == nil {
		perr = validate(&o, *reps)
	}
	if perr != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", perr)
		return 2
	}

	vs, err := selectVariants(buildVariants(&o), *only)
	if err == nil && !*pin && numCPU() >= 2 {
		vs = withPinnedCopies(vs, *pinned)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 2
	}
	if *list {
		for _, v := range vs {
			fmt.Printf("%d %-10s %-18s %s\n", v.Num, v.Group, v.Name, v.Desc)
		}
		return 0
	}
	if *beanpole == "" {
		fmt.Fprintln(os.Stderr, "bench: -beanpole PATH is required")
		flag.Usage()
		return 2
	}
	cts := [2]Contender{{Name: "beanpole", Path: *beanpole}, {Name: "beanstalkd", Path: *beanstalkd}}
	for i := range cts {
		p, err := resolveExec(cts[i].Path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", cts[i].Name, err)
			return 2
		}
		cts[i].Path = p
	}

	// Always kill what we started, also on ^C / SIGTERM.
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sigc
		fmt.Fprintf(os.Stderr, "\nbench: %v: stopping servers\n", s)
		cleanupAll()
		os.Exit(130)
	}()
	defer cleanupAll()

	pinning := "none"
	switch {
	case *pin && numCPU() < 2:
		pinning = "requested but only one CPU is available: none"
	case *pin:
		o.PinAll = true
		pinning = "every scenario: " + pinHow()
	case numCPU() >= 2 && strings.TrimSpace(*pinned) != "":
		pinning = "scenarios marked [pinned]: " + pinHow()
	}
	note, noQuota, err := applyQuotas(&cts, vs, *nodeCPU, o.CapacityCPU, checkCgroups)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: -node-cpu:", err)
		return 2
	}
	if noQuota != "" {
		fmt.Fprintln(os.Stderr, "bench: the capacity rows are left out:", noQuota)
	}
	pinning += note
	debug.SetGCPercent(400)

	meta := Meta{
		Started:  time.Now().UTC().Format(time.RFC3339),
		Go:       runtime.Version(),
		CPUs:     numCPU(),
		Kernel:   kernelRelease(),
		NoFile:   nofile,
		Pinning:  pinning,
		Reps:     *reps,
		Options:  o,
		Versions: map[string]string{},
		Paths:    map[string]string{},
	}
	for _, ct := range cts {
		meta.Versions[ct.Name] = serverVersion(ct.Path)
		meta.Paths[ct.Name] = repoPath(ct.Path, ".")
	}
	fmt.Fprintf(os.Stderr, "bench: beanpole=%s (%s) beanstalkd=%s (%s)\n", cts[0].Path, meta.Versions["beanpole"], cts[1].Path, meta.Versions["beanstalkd"])
	fmt.Fprintf(os.Stderr, "bench: %d variants x %d reps x 2 contenders, %v windows, open-file limit %d, pinning: %s\n",
		len(vs), *reps, o.Duration, nofile, pinning)

	results := make([]*VarResult, len(vs))
	total, done := len(vs)*(*reps)*2, 0
	start := time.Now()
	for i, v := range vs {
		vr := &VarResult{V: v, Flags: v.Flags("DIR"), Res: [2]*CtResult{{}, {}}}
		results[i] = vr
		if v.NodeCPU > 0 && noQuota != "" {
			vr.Res[0].NA, vr.Res[1].NA = noQuota, noQuota
			done += *reps * 2
			fmt.Fprintf(os.Stderr, "[%d/%d] %-18s n/a: no CPU cgroup\n", done, total, v.Name)
			continue
		}
		for rep := 0; rep < *reps; rep++ {
			for ci, ct := range v.contenders(cts) {
				done++
				cr := vr.Res[ci]
				if cr.Failed || cr.NA != "" {
					continue
				}
				mx, err := runOne(v, ct, &o, o.PinAll || v.Pinned)
				tag := fmt.Sprintf("[%d/%d %5.0fs] %-18s %-10s rep %d", done, total, time.Since(start).Seconds(), v.Name, ct.Name, rep+1)
				switch {
				case errors.Is(err, errNoStart) && v.MayNA:
					cr.NA = err.Error()
					fmt.Fprintf(os.Stderr, "%s: n/a (%v)\n", tag, oneLine(err.Error()))
				case err != nil:
					cr.Failed = true
					cr.Errors = append(cr.Errors, err.Error())
					fmt.Fprintf(os.Stderr, "%s: FAILED: %v\n", tag, err)
				default:
					cr.Runs = append(cr.Runs, mx)
					fmt.Fprintf(os.Stderr, "%s: %s\n", tag, summary(v, mx))
				}
			}
		}
		for _, cr := range vr.Res {
			cr.Median = medianMetrics(cr.Runs)
		}
	}
	meta.Finished = time.Now().UTC().Format(time.RFC3339)
	meta.Seconds = time.Since(start).Seconds()

	table := renderTable(results, &meta)
	fmt.Print(table)

	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 1
	}
	rc := 0
	if err := writeFileAtomic(filepath.Join(*outDir, "results.txt"), []byte(table)); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		rc = 1
	}
	if err := writeJSON(filepath.Join(*outDir, "results.json"), &meta, results); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		rc = 1
	}
	if err := writeChart(filepath.Join(*outDir, "chart.png"), results); err != nil {
		fmt.Fprintf(os.Stderr, "bench: chart: %v\n", err)
		rc = 1
	}
	if *doc != "" {
		confined := o.CapacityCPU
		if noQuota != "" {
			confined = 0
		}
		if err := writeDoc(*doc, *outDir, table, os.Args[1:], confined); err != nil {
			fmt.Fprintf(os.Stderr, "bench: -doc: %v\n", err)
			rc = 1
		}
	}
	fmt.Fprintf(os.Stderr, "bench: wrote %s/{results.txt,results.json,chart.png} in %.0fs\n", *outDir, meta.Seconds)
	for _, vr := range results {
		for ci, cr := range vr.Res {
			if cr.Failed {
				fmt.Fprintf(os.Stderr, "bench: FAILED %s on %s: %s\n", vr.V.Name, cts[ci].Name, cr.Errors[0])
				rc = 1
			}
		}
	}
	return rc
}

// defaultCapacityCPU is the cores each node of the capacity rows gets: six
// nodes of 0.2 CPU take 1.2 of a 2-core machine's cores at most, leaving the
// load generator the rest, so that the quota, not the machine, bounds them.
const defaultCapacityCPU = 0.2

// defaultPinned names the scenarios whose targets are per core (or, for
// accepting, pinned and unpinned): make bench runs them both ways.
const defaultPinned = "roundtrip-c10,roundtrip-c50,pipeline,idle,large"

// pinHow says how pinned runs are pinned.
func pinHow() string {
	how := "taskset"
	if tasksetPath == "" {
		how = "sched_setaffinity after start"
	}
	return "client CPU 0 (sched_setaffinity), server CPU 1 (" + how + ")"
}

// runOne starts a fresh server for one run, runs the variant against it and
// stops it again.
func runOne(v *Variant, ct Contender, o *Options, pinned bool) (Metrics, error) {
	serverCPU, clientCPU := -1, -1
	if pinned {
		serverCPU, clientCPU = 1, 0
	}
	if err := pinPid(os.Getpid(), clientCPU); err != nil {
		return nil, fmt.Errorf("pinning the client: %w", err)
	}
	dir := ""
	if v.NeedDir {
		d, err := os.MkdirTemp("", "beanpole-bench-binlog-")
		if err != nil {
			return nil, err
		}
		registerTemp(d)
		defer removeTemp(d)
		dir = d
	}
	var srv *Server
	var err error
	switch {
	case ct.Cluster:
		srv, err = StartCluster(ct, dir, serverCPU, o.NoFile)
	case ct.TLS:
		srv, err = StartTLS(ct, v.Flags(dir), serverCPU, o.NoFile)
	default:
		srv, err = StartServer(ct, v.Flags(dir), serverCPU, o.NoFile)
	}
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	if v.Cluster {
		if srv.fsyncs, err = startFsyncCounter(srv.pids()); err != nil {
			warnOnce("bench: the fsync counts are left out: %v\n", err)
		}
		defer srv.fsyncs.close()
	}
	l, err := NewLoop(srv.Port, int(o.NoFile))
	if err != nil {
		return nil, err
	}
	d0, r0 := netCounters()
	mx, err := v.Run(&RunCtx{Srv: srv, Opt: o, L: l, Spread: v.Groups})
	d1, r1 := netCounters()
	if mx != nil {
		mx["net_drops"] = float64(d1 - d0)
		mx["tcp_retrans"] = float64(r1 - r0)
		if srv.dataLeads > 0 {
			mx["data_leads_max"] = float64(srv.dataLeads)
		}
	}
	derr := srv.Died()
	if err != nil && ct.Cluster {
		err = fmt.Errorf("%w; the nodes' last log lines:%s", err, srv.logTail(4))
	}
	// Kill the server before closing our sockets: the server side then
	// does the active close, so TIME_WAIT entries sit on the dead server's
	// port instead of on the client ports the next runs need.
	srv.Stop()
	l.Close()
	if derr != nil {
		if err != nil {
			return nil, fmt.Errorf("%v; %v", err, derr)
		}
		return nil, derr
	}
	return mx, err
}

func validate(o *Options, reps int) error {
	switch {
	case reps < 1:
		return errors.New("-reps must be >= 1")
	case o.Duration <= 0:
		return errors.New("-duration must be > 0")
	case o.Warmup < 0:
		return errors.New("-warmup must be >= 0")
	case o.Size < seqDigits:
		return fmt.Errorf("-size must be >= %d (bodies carry a sequence number)", seqDigits)
	case o.PipeWindow < 1 || o.ProdWindow < 1:
		return errors.New("windows must be >= 1")
	case o.Producers < 1 || o.Consumers < 1 || o.TubeProds < 1 || o.LargeConns < 1 || o.BinConns < 1 ||
		o.TLSConns < 1 || o.TLSHsConns < 1 || o.TLSIdle < 1:
		return errors.New("connection counts must be >= 1")
	case o.PubTubes < 1 || o.Backlog < 0:
		return errors.New("-pubsub-tubes must be >= 1 and -backlog >= 0")
	}
	limit := int(o.NoFile) - fdMargin
	check := func(name string, xs []int, extra int) error {
		for _, n := range xs {
			if n < 1 {
				return fmt.Errorf("-%s: counts must be >= 1", name)
			}
			if n+extra > limit {
				return fmt.Errorf("-%s: %d connections exceed the open-file limit %d minus a margin of %d", name, n, o.NoFile, fdMargin)
			}
		}
		return nil
	}
	for _, c := range []struct {
		name  string
		xs    []int
		extra int
	}{{"conns", o.Conns, 0}, {"pipe-conns", o.PipeConns, 0}, {"idle", o.Idle, 1}, {"fanout", o.Fanout, 1}} {
		if err := check(c.name, c.xs, c.extra); err != nil {
			return err
		}
	}
	for _, t := range o.Tubes {
		if t < 1 {
			return errors.New("-tubes: counts must be >= 1")
		}
		if max(o.TubeCons, (t+9)/10)+o.TubeProds > limit {
			return fmt.Errorf("-tubes %d needs more connections than the open-file limit allows", t)
		}
	}
	for _, s := range o.Large {
		if s < seqDigits || s > 1<<30 {
			return errors.New("-large: sizes must be between 16 bytes and 1 GiB")
		}
	}
	return nil
}

func dedupInts(xs []int) []int {
	var out []int
	seen := map[int]bool{}
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

func medianMetrics(runs []Metrics) Metrics {
	if len(runs) == 0 {
		return nil
	}
	out := Metrics{}
	for k := range runs[0] {
		xs := make([]float64, 0, len(runs))
		for _, r := range runs {
			if v, ok := r[k]; ok {
				xs = append(xs, v)
			}
		}
		if m := median(xs); !math.IsNaN(m) {
			out[k] = m
		}
	}
	return out
}

func summary(v *Variant, mx Metrics) string {
	var parts []string
	for _, r := range v.Rows {
		v, ok := mx[r.Key+r.Metric]
		if !ok {
			v = math.NaN() // not measured (fsyncs without perf)
		}
		s := fmt.Sprintf("%s %s", fmtNum(v), r.Unit)
		if r.Lat {
			s += fmt.Sprintf(" p50 %sµs p99 %sµs", fmtNum(mx[r.Key+"p50"]), fmtNum(mx[r.Key+"p99"]))
		}
		if c, ok := mx[r.Key+"cpu"]; ok && !r.NoCPU {
			s += fmt.Sprintf(" cli %.0f%% srv %.0f%%", c, mx[r.Key+"srvcpu"])
		}
		parts = append(parts, s)
	}
	if n, ok := mx["data_leads_max"]; ok {
		parts = append(parts, fmt.Sprintf("a node leads at most %.0f data groups", n))
	}
	return strings.Join(parts, "; ")
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " | ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// resolveExec resolves and checks an executable path.
func resolveExec(p string) (string, error) {
	if !strings.Contains(p, "/") {
		return "", fmt.Errorf("%q: give a path (for example bin/beanpole or /usr/bin/beanstalkd)", p)
	}
	a, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(a)
	if err != nil {
		return "", err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not an executable file", a)
	}
	return a, nil
}

func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
