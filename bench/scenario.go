package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Options are the knobs shared by all scenarios (see flags in main.go).
type Options struct {
	Duration   time.Duration
	Warmup     time.Duration
	Drain      time.Duration // how long a run may take to settle after its window
	Size       int
	Conns      []int
	PipeWindow int
	PipeConns  []int
	PipeMax    int
	Producers  int
	Consumers  int
	PubTubes   int
	ProdWindow int
	Backlog    int
	Tubes      []int
	TubeCons   int
	TubeProds  int
	Idle       []int
	Fanout     []int
	Large      []int
	LargeConns int
	BinConns   int
	Fsync      []int
	MemJobs    int // memory: jobs queued
	TLSConns   int // tls: round-trip connections
	TLSHsConns int // tls: connections handshaking at a time
	TLSIdle    int // tls: idle connections
	NoFile     uint64
	PinAll     bool // -pin: every variant runs pinned
	// CapacityCPU, when above 0, is the cores each node of the capacity
	// rows may use (-capacity-cpu, or -node-cpu when given): Variant.NodeCPU.
	CapacityCPU float64
}

// Metrics are the named figures of one run (see meter.fill for the keys).
type Metrics map[string]float64

// RowDef is one line of the report table.
type RowDef struct {
	Key     string // metric key prefix
	Title   string
	Metric  string // primary metric key (without prefix)
	Unit    string
	Higher  bool // higher is better
	Lat     bool // has <key>p50/p99/p999 (µs)
	LatWhat string
	NoCPU   bool // the CPU columns do not apply
}

// Variant is one concrete configuration of a scenario: one server start
// per contender and repetition.
type Variant struct {
	Name    string
	Group   string
	Num     int
	Desc    string
	Rows    []RowDef
	Flags   func(dir string) []string
	NeedDir bool
	MayNA   bool
	// Pinned: the server runs on CPU 1 and the load generator on CPU 0,
	// so the server's figures are those of one core.
	Pinned bool
	// Cluster: beanpole runs as a group of clusterNodes nodes (in place
	// of Flags) and the client talks to the leader; the servers' fsyncs
	// are counted in the first window of each run (with perf), for both
	// contenders. VsBeanpole: the second contender is beanpole on its
	// own (with Flags) instead of beanstalkd.
	Cluster, VsBeanpole bool
	// Groups, when above 0: the first contender is the cluster with
	// --groups Groups, the second the cluster of one group, and the client
	// spreads its connections over the nodes, each on a tube of its own
	// (RunCtx.Spread). Nodes and Replicas, when above 0, are the first
	// contender's number of nodes and --replicas; the second has
	// clusterNodes nodes.
	Groups, Nodes, Replicas int
	// NodeCPU, when above 0, is the cores each server process of both
	// contenders may use, in a CPU cgroup of its own (Contender.CPU): the
	// capacity rows compare clusters of machines of that size.
	NodeCPU float64
	// TLS: the first contender is beanpole serving TLS and the client
	// speaks TLS to it; the second is C beanstalkd behind stunnel or, with
	// VsBeanpole, beanpole over plaintext (the same client without TLS).
	TLS bool
	Run func(rc *RunCtx) (Metrics, error)
}

// contenders are who runs v, given beanpole and beanstalkd.
func (v *Variant) contenders(cts [2]Contender) [2]Contender {
	if v.VsBeanpole {
		cts[1] = cts[0]
	}
	if v.Cluster {
		cts[0].Name, cts[0].Cluster = "cluster", true
	}
	if v.Groups > 0 {
		cts[1] = cts[0]
		cts[0].Name, cts[0].Groups = groupsName(v.Nodes, v.Groups, v.Replicas), v.Groups
		cts[0].Nodes, cts[0].Replicas = v.Nodes, v.Replicas
	}
	if v.NodeCPU > 0 {
		cts[0].CPU, cts[1].CPU = v.NodeCPU, v.NodeCPU
	}
	if v.TLS {
		cts[0].Name, cts[0].TLS = "beanpole-tls", true
		if !v.VsBeanpole {
			cts[1].Name, cts[1].TLS, cts[1].Stunnel = "stunnel+C", true, true
		}
	}
	return cts
}

// names are the contenders' names in reports.
func (v *Variant) names() [2]string {
	cts := v.contenders([2]Contender{{Name: "beanpole"}, {Name: "beanstalkd"}})
	return [2]string{cts[0].Name, cts[1].Name}
}

// RunCtx is what a scenario run gets.
type RunCtx struct {
	Srv *Server
	Opt *Options
	L   *Loop
	// Spread, when above 0, is the number of data groups the round trips
	// and pipelines spread over: connection i goes to node i mod k of the
	// cluster's k nodes, on a tube of its own (spreadTube).
	Spread int
}

var groups = []string{"roundtrip", "pipeline", "pubsub", "tubes", "idle", "fanout", "large", "binlog", "memory", "cluster", "tls"}

// buildVariants expands the options into the full scenario list.
func buildVariants(o *Options) []*Variant {
	var vs []*Variant
	noFlags := func(string) []string { return nil }
	for _, c := range o.Conns {
		vs = append(vs, &Variant{
			Name: fmt.Sprintf("roundtrip-c%d", c), Group: "roundtrip", Num: 1,
			Desc:  fmt.Sprintf("put/reserve/delete round trips, one command in flight, %d connections, %d-byte bodies", c, o.Size),
			Rows:  []RowDef{{Title: fmt.Sprintf("roundtrip c=%d", c), Metric: "rate", Unit: "jobs/s", Higher: true, Lat: true, LatWhat: "per command"}},
			Flags: noFlags,
			Run:   func(rc *RunCtx) (Metrics, error) { return runRoundTrip(rc, c, o.Size, "") },
		})
	}
	for _, c := range o.PipeConns {
		vs = append(vs, &Variant{
			Name: fmt.Sprintf("pipeline-c%d", c), Group: "pipeline", Num: 2,
			Desc: fmt.Sprintf("pipelined puts (window %d) on %d connections, then pipelined reserve+delete of those jobs", o.PipeWindow, c),
			Rows: []RowDef{
				{Key: "put.", Title: fmt.Sprintf("pipelined put w=%d c=%d", o.PipeWindow, c), Metric: "rate", Unit: "puts/s", Higher: true, Lat: true, LatWhat: "per put"},
				{Key: "drain.", Title: fmt.Sprintf("pipelined rsv+del w=%d c=%d", o.PipeWindow, c), Metric: "rate", Unit: "jobs/s", Higher: true, Lat: true, LatWhat: "per command"},
			},
			Flags: noFlags,
			Run:   func(rc *RunCtx) (Metrics, error) { return runPipeline(rc, c) },
		})
	}
	vs = append(vs, &Variant{
		Name: "pubsub", Group: "pubsub", Num: 3,
		Desc:  fmt.Sprintf("%d producers (window %d) and %d consumers on %d shared tubes; end-to-end jobs/s and put-to-reserve latency", o.Producers, o.ProdWindow, o.Consumers, o.PubTubes),
		Rows:  []RowDef{{Title: fmt.Sprintf("pub/sub %dp/%dc/%dt", o.Producers, o.Consumers, o.PubTubes), Metric: "rate", Unit: "jobs/s", Higher: true, Lat: true, LatWhat: "put→reserved"}},
		Flags: noFlags,
		Run: func(rc *RunCtx) (Metrics, error) {
			return runPubSub(rc, pubsubCfg{producers: o.Producers, consumers: o.Consumers, tubes: o.PubTubes, perPutUse: false, watchAll: true})
		},
	})
	for _, t := range o.Tubes {
		cons := o.TubeCons
		if need := (t + 9) / 10; cons < need {
			cons = need
		}
		vs = append(vs, &Variant{
			Name: fmt.Sprintf("tubes-%d", t), Group: "tubes", Num: 4,
			Desc:  fmt.Sprintf("%d tubes; %d consumers watching 10 tubes each; %d producers doing use+put (window %d)", t, cons, o.TubeProds, o.ProdWindow),
			Rows:  []RowDef{{Title: fmt.Sprintf("tubes=%d (%dc)", t, cons), Metric: "rate", Unit: "jobs/s", Higher: true, Lat: true, LatWhat: "put→reserved"}},
			Flags: noFlags,
			Run: func(rc *RunCtx) (Metrics, error) {
				return runPubSub(rc, pubsubCfg{producers: o.TubeProds, consumers: cons, tubes: t, perPutUse: true})
			},
		})
	}
	for _, n := range o.Idle {
		vs = append(vs, &Variant{
			Name: fmt.Sprintf("idle-%d", n), Group: "idle", Num: 5,
			Desc: fmt.Sprintf("%d idle connections (each answered one command): server RSS per connection, time to accept them all, round-trip latency with them open", n),
			Rows: []RowDef{
				{Key: "", Title: fmt.Sprintf("idle %d: RSS/conn", n), Metric: "rss_per_conn", Unit: "KiB", Lat: true, LatWhat: "1-conn round trip"},
				{Key: "", Title: fmt.Sprintf("idle %d: accept all", n), Metric: "accept_ms", Unit: "ms", NoCPU: true},
			},
			Flags: noFlags,
			Run:   func(rc *RunCtx) (Metrics, error) { return runIdle(rc, n) },
		})
	}
	for _, n := range o.Fanout {
		vs = append(vs, &Variant{
			Name: fmt.Sprintf("fanout-%d", n), Group: "fanout", Num: 6,
			Desc:  fmt.Sprintf("%d connections blocked in reserve, then %d pipelined puts: time until every job is delivered exactly once", n, n),
			Rows:  []RowDef{{Title: fmt.Sprintf("fan-out %d", n), Metric: "fanout_ms", Unit: "ms", Lat: true, LatWhat: "delivery after 1st put"}},
			Flags: noFlags,
			Run:   func(rc *RunCtx) (Metrics, error) { return runFanout(rc, n) },
		})
	}
	for _, sz := range o.Large {
		vs = append(vs, &Variant{
			Name: "large-" + sizeName(sz), Group: "large", Num: 7,
			Desc:  fmt.Sprintf("%s bodies (-z %d), put/reserve/delete round trips on %d connections; MB/s of job payload", sizeName(sz), sz, o.LargeConns),
			Rows:  []RowDef{{Title: fmt.Sprintf("large %s c=%d", sizeName(sz), o.LargeConns), Metric: "mbps", Unit: "MB/s", Higher: true, Lat: true, LatWhat: "per command"}},
			Flags: func(string) []string { return []string{"-z", strconv.Itoa(sz)} },
			Run:   func(rc *RunCtx) (Metrics, error) { return runRoundTrip(rc, o.LargeConns, sz, "") },
		})
	}
	for _, f := range o.Fsync {
		vs = append(vs, &Variant{
			Name: fmt.Sprintf("binlog-f%d", f), Group: "binlog", Num: 8,
			Desc:    fmt.Sprintf("-b <fresh temp dir> -f %d, put/reserve/delete round trips on %d connections", f, o.BinConns),
			Rows:    []RowDef{{Title: fmt.Sprintf("binlog -f %d c=%d", f, o.BinConns), Metric: "rate", Unit: "jobs/s", Higher: true, Lat: true, LatWhat: "per command"}},
			Flags:   func(dir string) []string { return []string{"-b", dir, "-f", strconv.Itoa(f)} },
			NeedDir: true, MayNA: true,
			Run: func(rc *RunCtx) (Metrics, error) { return runRoundTrip(rc, o.BinConns, o.Size, "") },
		})
	}
	if o.MemJobs > 0 {
		vs = append(vs, &Variant{
			Name: fmt.Sprintf("memory-%d", o.MemJobs), Group: "memory", Num: 9,
			Desc:  fmt.Sprintf("%d ready jobs of %d-byte bodies queued by pipelined puts: server RSS per queued job", o.MemJobs, memJobSize),
			Rows:  []RowDef{{Title: fmt.Sprintf("queued %s jobs: RSS/job", fmtNum(float64(o.MemJobs))), Metric: "rss_per_job", Unit: "B", Lat: true, LatWhat: "per put"}},
			Flags: noFlags,
			Run:   func(rc *RunCtx) (Metrics, error) { return runMemory(rc, o.MemJobs) },
		})
	}
	// The cluster against C and against beanpole alone, both with a
	// binlog fsynced at every write (-b DIR -f 0).
	f0 := func(dir string) []string { return []string{"-b", dir, "-f", "0"} }
	for _, vsBP := range []bool{false, true} {
		name, vs2 := "", "C -b -f 0"
		if vsBP {
			name, vs2 = "-vs-beanpole", "beanpole -b -f 0"
		}
		c := o.BinConns
		vs = append(vs, &Variant{
			Name: fmt.Sprintf("cluster-c%d%s", c, name), Group: "cluster", Num: 10,
			Desc: fmt.Sprintf("%d beanpole nodes (--cluster-dir, raft on loopback) vs %s: put/reserve/delete round trips on %d connections to the leader", clusterNodes, vs2, c),
			Rows: []RowDef{
				{Title: fmt.Sprintf("cluster×%d rt c=%d vs %s", clusterNodes, c, vs2), Metric: "rate", Unit: "jobs/s", Higher: true, Lat: true, LatWhat: "per command"},
				{Title: fmt.Sprintf("cluster×%d rt c=%d vs %s", clusterNodes, c, vs2), Metric: "fsyncs", Unit: "fsyncs/job", NoCPU: true},
			},
			Flags: f0, NeedDir: true, MayNA: true, Cluster: true, VsBeanpole: vsBP,
			Run: func(rc *RunCtx) (Metrics, error) { return runRoundTrip(rc, c, o.Size, "") },
		})
		for _, c := range o.PipeConns {
			vs = append(vs, &Variant{
				Name: fmt.Sprintf("cluster-pipeline-c%d%s", c, name), Group: "cluster", Num: 10,
				Desc: fmt.Sprintf("%d beanpole nodes vs %s: pipelined puts (window %d) on %d connections to the leader, then pipelined reserve+delete of those jobs", clusterNodes, vs2, o.PipeWindow, c),
				Rows: []RowDef{
					{Key: "put.", Title: fmt.Sprintf("cluster×%d put w=%d c=%d vs %s", clusterNodes, o.PipeWindow, c, vs2), Metric: "rate", Unit: "puts/s", Higher: true, Lat: true, LatWhat: "per put"},
					{Key: "put.", Title: fmt.Sprintf("cluster×%d put w=%d c=%d vs %s", clusterNodes, o.PipeWindow, c, vs2), Metric: "fsyncs", Unit: "fsyncs/put", NoCPU: true},
					{Key: "drain.", Title: fmt.Sprintf("cluster×%d rsv+del w=%d c=%d vs %s", clusterNodes, o.PipeWindow, c, vs2), Metric: "rate", Unit: "jobs/s", Higher: true, Lat: true, LatWhat: "per command"},
				},
				Flags: f0, NeedDir: true, MayNA: true, Cluster: true, VsBeanpole: vsBP,
				Run: func(rc *RunCtx) (Metrics, error) { return runPipeline(rc, c) },
			})
		}
	}
	vs = append(vs, groupsVariants(o)...)
	vs = append(vs, tlsVariants(o)...)
	return vs
}

// groupsVariants are the capacity rows of the cluster group: the cluster
// with a data group per node (--groups) against the cluster of one group,
// the clients spread over the nodes and over tubes of every group. With
// every node confined to o.CapacityCPU cores, they compare three machines
// that each lead a share of the queue with three whose leader runs it all;
// and six machines, each hosting three of six groups (--replicas 3), with
// those three.
func groupsVariants(o *Options) []*Variant {
	vs := append(spreadVariants(o, clusterNodes, clusterNodes, 0), xresVariant(clusterNodes))
	return append(vs, spreadVariants(o, 6, 6, 3)...)
}

// xresVariant is the latency of a reserve over tubes of every group:
// clusterNodes nodes with --groups g against as many of one group, with a
// worker on every node watching one tube of every group (runXRes). One
// worker a node keeps the two cores of a test machine short of saturated,
// so that the latency is the reserve's rather than a queue's.
func xresVariant(g int) *Variant {
	w := clusterNodes
	vs2 := fmt.Sprintf("%d groups vs 1", g)
	return &Variant{
		Name: fmt.Sprintf("%s-xres-c%d", groupsName(clusterNodes, g, 0), w), Group: "cluster", Num: 10,
		Desc: fmt.Sprintf("%d beanpole nodes with --groups %d vs %d of one group: %d workers spread over the nodes, each watching one tube of every group, loop reserve → delete; "+
			"with jobs queued in every tube, then waiting while one job at a time is put", clusterNodes, g, clusterNodes, w),
		Rows: []RowDef{
			{Key: "busy.", Title: fmt.Sprintf("cluster×%d reserve p50 over %d groups, jobs ready, c=%d, %s", clusterNodes, g, w, vs2), Metric: "p50", Unit: "µs", Lat: true, LatWhat: "reserve"},
			{Key: "wait.", Title: fmt.Sprintf("cluster×%d put→reserved p50 over %d groups, waiting, c=%d, %s", clusterNodes, g, w, vs2), Metric: "p50", Unit: "µs", Lat: true, LatWhat: "put→reserved"},
		},
		Flags: func(string) []string { return nil }, NeedDir: true, MayNA: true, Cluster: true, Groups: g, Nodes: clusterNodes,
		Run: func(rc *RunCtx) (Metrics, error) { return runXRes(rc, w) },
	}
}

// groupsName names the cluster of nodes nodes with --groups groups and,
// when above 0, --replicas replicas.
func groupsName(nodes, groups, replicas int) string {
	if nodes == clusterNodes && replicas == 0 {
		return fmt.Sprintf("cluster-groups%d", groups)
	}
	return fmt.Sprintf("cluster%d-groups%d-r%d", nodes, groups, replicas)
}

// spreadVariants are the round trips and the pipeline of nodes nodes with
// --groups g (and --replicas r, when above 0) against clusterNodes nodes
// of one group, every node of both confined to o.CapacityCPU cores when
// that is above 0. The pipeline runs a connection for each node and group.
func spreadVariants(o *Options, nodes, g, r int) []*Variant {
	c, pc := o.BinConns, nodes*g
	name, vs2, flags := groupsName(nodes, g, r), fmt.Sprintf("%d groups vs 1", g), fmt.Sprintf("--groups %d", g)
	if r > 0 {
		vs2 = fmt.Sprintf("%d groups r%d vs %d nodes of 1", g, r, clusterNodes)
		flags += fmt.Sprintf(" --replicas %d", r)
	}
	confined := ""
	if o.CapacityCPU > 0 {
		vs2 += fmt.Sprintf(", %g CPU/node", o.CapacityCPU)
		confined = fmt.Sprintf(", every node confined to %g CPU", o.CapacityCPU)
	}
	return []*Variant{{
		Name: fmt.Sprintf("%s-c%d", name, c), Group: "cluster", Num: 10,
		Desc: fmt.Sprintf("%d beanpole nodes with %s vs %d of one group%s: put/reserve/delete round trips on %d connections spread over the nodes, each on a tube of its own, the tubes spread over the groups", nodes, flags, clusterNodes, confined, c),
		Rows: []RowDef{
			{Title: fmt.Sprintf("cluster×%d rt c=%d spread, %s", nodes, c, vs2), Metric: "rate", Unit: "jobs/s", Higher: true, Lat: true, LatWhat: "per command"},
			{Title: fmt.Sprintf("cluster×%d rt c=%d spread, %s", nodes, c, vs2), Metric: "fsyncs", Unit: "fsyncs/job", NoCPU: true},
		},
		Flags: func(string) []string { return nil }, NeedDir: true, MayNA: true, Cluster: true, Groups: g, Nodes: nodes, Replicas: r,
		NodeCPU: o.CapacityCPU,
		Run:     func(rc *RunCtx) (Metrics, error) { return runRoundTrip(rc, c, o.Size, "") },
	}, {
		Name: fmt.Sprintf("%s-pipeline-c%d", name, pc), Group: "cluster", Num: 10,
		Desc: fmt.Sprintf("%d beanpole nodes with %s vs %d of one group%s: pipelined puts (window %d) on %d connections, one for each node and group, each on a tube of its own, then pipelined reserve+delete of those jobs", nodes, flags, clusterNodes, confined, o.PipeWindow, pc),
		Rows: []RowDef{
			{Key: "put.", Title: fmt.Sprintf("cluster×%d put w=%d c=%d spread, %s", nodes, o.PipeWindow, pc, vs2), Metric: "rate", Unit: "puts/s", Higher: true, Lat: true, LatWhat: "per put"},
			{Key: "put.", Title: fmt.Sprintf("cluster×%d put w=%d c=%d spread, %s", nodes, o.PipeWindow, pc, vs2), Metric: "fsyncs", Unit: "fsyncs/put", NoCPU: true},
			{Key: "drain.", Title: fmt.Sprintf("cluster×%d rsv+del w=%d c=%d spread, %s", nodes, o.PipeWindow, pc, vs2), Metric: "rate", Unit: "jobs/s", Higher: true, Lat: true, LatWhat: "per command"},
		},
		Flags: func(string) []string { return nil }, NeedDir: true, MayNA: true, Cluster: true, Groups: g, Nodes: nodes, Replicas: r,
		NodeCPU: o.CapacityCPU,
		Run:     func(rc *RunCtx) (Metrics, error) { return runPipeline(rc, pc) },
	}}
}

// tlsVariants are the tls group: beanpole serving TLS against C behind
// stunnel and against beanpole's own plaintext.
func tlsVariants(o *Options) []*Variant {
	noFlags := func(string) []string { return nil }
	c, sz := o.TLSConns, 65536
	z := func(string) []string { return []string{"-z", strconv.Itoa(sz)} }
	return []*Variant{{
		Name: fmt.Sprintf("tls-c%d", c), Group: "tls", Num: 11,
		Desc:  fmt.Sprintf("TLS: put/reserve/delete round trips on %d connections, beanpole --tls-listen vs C behind stunnel", c),
		Rows:  []RowDef{{Title: fmt.Sprintf("TLS rt c=%d vs stunnel+C", c), Metric: "rate", Unit: "jobs/s", Higher: true, Lat: true, LatWhat: "per command"}},
		Flags: noFlags, MayNA: true, TLS: true,
		Run: func(rc *RunCtx) (Metrics, error) { return runTLSRoundTrip(rc, c, o.Size) },
	}, {
		Name: fmt.Sprintf("tls-c%d-vs-plain", c), Group: "tls", Num: 11,
		Desc:  fmt.Sprintf("put/reserve/delete round trips on %d connections, beanpole over TLS vs beanpole over plaintext", c),
		Rows:  []RowDef{{Title: fmt.Sprintf("TLS rt c=%d vs beanpole plain", c), Metric: "rate", Unit: "jobs/s", Higher: true, Lat: true, LatWhat: "per command"}},
		Flags: noFlags, TLS: true, VsBeanpole: true,
		Run: func(rc *RunCtx) (Metrics, error) { return runTLSRoundTrip(rc, c, o.Size) },
	}, {
		Name: "tls-large-" + sizeName(sz) + "-vs-plain", Group: "tls", Num: 11,
		Desc:  fmt.Sprintf("%s bodies (-z %d), round trips on %d connections, beanpole over TLS vs beanpole over plaintext; MB/s of job payload", sizeName(sz), sz, o.LargeConns),
		Rows:  []RowDef{{Title: fmt.Sprintf("TLS %s c=%d vs beanpole plain", sizeName(sz), o.LargeConns), Metric: "mbps", Unit: "MB/s", Higher: true, Lat: true, LatWhat: "per command"}},
		Flags: z, TLS: true, VsBeanpole: true,
		Run: func(rc *RunCtx) (Metrics, error) { return runTLSRoundTrip(rc, o.LargeConns, sz) },
	}, {
		Name: "tls-handshake", Group: "tls", Num: 11,
		Desc:  fmt.Sprintf("TLS: %d clients each connecting (full handshake), running one command and closing, over and over; beanpole vs C behind stunnel", o.TLSHsConns),
		Rows:  []RowDef{{Title: fmt.Sprintf("TLS handshake+cmd c=%d vs stunnel+C", o.TLSHsConns), Metric: "rate", Unit: "conns/s", Higher: true, Lat: true, LatWhat: "connect to reply"}},
		Flags: noFlags, MayNA: true, TLS: true,
		Run: func(rc *RunCtx) (Metrics, error) { return runHandshakes(rc, o.TLSHsConns) },
	}, {
		Name: fmt.Sprintf("tls-idle-%d", o.TLSIdle), Group: "tls", Num: 11,
		Desc: fmt.Sprintf("TLS: %d idle connections (each answered one command): RSS per connection of beanpole, of stunnel+C together and of stunnel alone", o.TLSIdle),
		Rows: []RowDef{
			{Title: fmt.Sprintf("TLS idle %d: RSS/conn vs stunnel+C", o.TLSIdle), Metric: "rss_per_conn", Unit: "KiB", NoCPU: true},
			{Title: fmt.Sprintf("TLS idle %d: stunnel's own RSS/conn", o.TLSIdle), Metric: "tunnel_rss_per_conn", Unit: "KiB", NoCPU: true},
			{Title: fmt.Sprintf("TLS idle %d: connect all", o.TLSIdle), Metric: "accept_ms", Unit: "ms", NoCPU: true},
		},
		Flags: noFlags, MayNA: true, TLS: true,
		Run: func(rc *RunCtx) (Metrics, error) { return runTLSIdle(rc, o.TLSIdle) },
	}}
}

// withPinnedCopies puts a pinned copy of each variant of vs that only
// names right after it, for the targets that are per core. only lists
// groups, numbers or variant names, as -only; names that match nothing in
// vs are ignored, so -only can narrow a run.
func withPinnedCopies(vs []*Variant, only string) []*Variant {
	var out []*Variant
	for _, v := range vs {
		out = append(out, v)
		if !matches(v, only) {
			continue
		}
		p := *v
		p.Name, p.Pinned = v.Name+"-pinned", true
		p.Rows = make([]RowDef, len(v.Rows))
		for i, rd := range v.Rows {
			rd.Title += " [pinned]"
			p.Rows[i] = rd
		}
		out = append(out, &p)
	}
	return out
}

// matches reports whether the comma list only names v.
func matches(v *Variant, only string) bool {
	for _, w := range strings.Split(only, ",") {
		w = strings.TrimSpace(w)
		if w != "" && (w == v.Group || w == v.Name || w == strconv.Itoa(v.Num)) {
			return true
		}
	}
	return false
}

// selectVariants keeps the variants named by only (comma list of group
// names, scenario numbers 1-11 or variant names); empty keeps all.
func selectVariants(vs []*Variant, only string) ([]*Variant, error) {
	only = strings.TrimSpace(only)
	if only == "" {
		return vs, nil
	}
	for _, w := range strings.Split(only, ",") {
		if w = strings.TrimSpace(w); w != "" && !slices.ContainsFunc(vs, func(v *Variant) bool { return matches(v, w) }) {
			return nil, fmt.Errorf("-only: %q matches no scenario (groups: %s)", w, strings.Join(groups, ","))
		}
	}
	var out []*Variant
	for _, v := range vs {
		if matches(v, only) {
			out = append(out, v)
		}
	}
	return out, nil
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}
