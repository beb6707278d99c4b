package server

import (
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/beanpole/beanpole/cluster"
	"github.com/beanpole/beanpole/codec"
	"github.com/beanpole/beanpole/config"
	"github.com/beanpole/beanpole/engine"
	"github.com/beanpole/beanpole/loop"
	"github.com/beanpole/beanpole/persist"
	"github.com/beanpole/beanpole/route"
	"github.com/prometheus/client_golang/prometheus"
)

// groupStats is what /metrics reads on a node of many groups (--groups):
// the engines of the data groups this node leads, summed as the router's
// `stats` sums the groups (counts added, the figures that are not counts
// the first group's), with the router's client connections; each tube is
// read at its group's engine, so its series appear on the node that leads
// its group. As a prometheus.Collector it adds, for each data group,
// whether this node leads it and, for each this node hosts, the group's
// raft term and indexes.
//
// A scrape reads a copy of the led groups (one atomic load) and each
// engine as a `stats` or `stats-tube` command does: it takes no lock of
// its own that an engine waits on.
type groupStats struct {
	host     *cluster.Host
	rt       *route.Router
	n        int // data groups
	maxJob   uint64
	tls      bool // the node has a TLS listener for clients
	draining *atomic.Bool
	mu       sync.Mutex                  // serialises changes of led
	led      atomic.Pointer[[]groupLead] // index g: data group g, zero while not led
}

// groupLead is a data group's engine and event loops while this node leads it.
type groupLead struct {
	srv *loop.Server
	eng *engine.Engine
}

// watchGroups makes /metrics read the data groups this node leads; call
// it before any is served.
func (s *Server) watchGroups(host *cluster.Host, rt *route.Router) {
	n := len(host.Groups) - 1
	gs := &groupStats{host: host, rt: rt, n: n, maxJob: uint64(s.cfg.MaxJobSize), tls: s.tlsLn != nil, draining: &s.draining}
	led := make([]groupLead, n+1)
	gs.led.Store(&led)
	s.groupStats = gs
	s.adm.SetMetricsSource(gs)
}

// lead counts data group g's engine and loops in /metrics until the
// returned func is called.
func (gs *groupStats) lead(g int, eng *engine.Engine, srv *loop.Server) (done func()) {
	gs.set(g, groupLead{srv: srv, eng: eng})
	return func() { gs.set(g, groupLead{}) }
}

func (gs *groupStats) set(g int, l groupLead) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	led := append([]groupLead(nil), *gs.led.Load()...)
	led[g] = l
	gs.led.Store(&led)
}

// engineOf is the engine of the group a tube lives in, nil while this
// node does not lead that group.
func (gs *groupStats) engineOf(name []byte) *engine.Engine {
	return (*gs.led.Load())[route.GroupOfTube(name, gs.n)].eng
}

func (gs *groupStats) ServerStats(st *codec.ServerStats) {
	first := true
	var one codec.ServerStats
	for _, l := range *gs.led.Load() {
		if l.srv == nil {
			continue
		}
		if first {
			l.srv.Stats(st)
			first = false
			continue
		}
		one = codec.ServerStats{}
		l.srv.Stats(&one)
		addServerStats(st, &one)
	}
	if first { // no group led: no job, no command, the process's identity
		st.PID, st.Version, st.MaxJobSize, st.Draining = os.Getpid(), config.Version, gs.maxJob, gs.draining.Load()
	}
	st.CurrentConnections, st.TotalConnections = gs.rt.Connections()
}

// addServerStats adds b's counts into a; binlog-failed is set if b's is.
func addServerStats(a, b *codec.ServerStats) {
	for _, p := range [...][2]*uint64{
		{&a.CurrentJobsUrgent, &b.CurrentJobsUrgent}, {&a.CurrentJobsReady, &b.CurrentJobsReady},
		{&a.CurrentJobsReserved, &b.CurrentJobsReserved}, {&a.CurrentJobsDelayed, &b.CurrentJobsDelayed},
		{&a.CurrentJobsBuried, &b.CurrentJobsBuried}, {&a.JobTimeouts, &b.JobTimeouts},
		{&a.TotalJobs, &b.TotalJobs}, {&a.CurrentTubes, &b.CurrentTubes},
		{&a.CurrentProducers, &b.CurrentProducers}, {&a.CurrentWorkers, &b.CurrentWorkers},
		{&a.CurrentWaiting, &b.CurrentWaiting}, {&a.JobMemoryBytes, &b.JobMemoryBytes},
		{&a.JobMemoryLimit, &b.JobMemoryLimit},
	} {
		*p[0] += *p[1]
	}
	for op := range a.Cmd {
		a.Cmd[op] += b.Cmd[op]
	}
	a.BinlogFailed = a.BinlogFailed || b.BinlogFailed
}

// Refused counts the router's clients and connections to groups closed to
// keep descriptors for raft, and those the internal listeners of the
// groups this node leads closed.
func (gs *groupStats) Refused() uint64 {
	n := gs.rt.Refused()
	for _, l := range *gs.led.Load() {
		if l.srv != nil {
			n += l.srv.Refused()
		}
	}
	return n
}

// The TLS figures are the router's: its clients' handshakes.
func (gs *groupStats) TLSHandshakeFailures() (uint64, bool) {
	return gs.rt.TLSHandshakeFailures(), gs.tls
}
func (gs *groupStats) TLSHandshakesShed() uint64 { return gs.rt.TLSHandshakesShed() }
func (gs *groupStats) TLSConnections() int64     { return gs.rt.TLSConnections() }

func (gs *groupStats) Bytes() (in, out uint64) {
	for _, l := range *gs.led.Load() {
		if l.srv != nil {
			i, o := l.srv.Bytes()
			in, out = in+i, out+o
		}
	}
	return in, out
}

// LoopConnections sums the groups' event loops, loop by loop (every group
// has as many).
func (gs *groupStats) LoopConnections(dst []int64) []int64 {
	start := len(dst)
	var one []int64
	for _, l := range *gs.led.Load() {
		if l.srv == nil {
			continue
		}
		if len(dst) == start {
			dst = l.srv.LoopConnections(dst)
			continue
		}
		one = l.srv.LoopConnections(one[:0])
		for i := range min(len(one), len(dst)-start) {
			dst[start+i] += one[i]
		}
	}
	return dst
}

// Binlog: a cluster keeps its jobs in raft's log, not in a binlog.
func (gs *groupStats) Binlog() (persist.Stats, bool) { return persist.Stats{}, false }

// TubeNames lists each led group's tubes that live in it: every engine
// has a default tube, which lives in one group alone.
func (gs *groupStats) TubeNames(dst [][]byte) [][]byte {
	for g, l := range *gs.led.Load() {
		if l.eng == nil {
			continue
		}
		start := len(dst)
		dst = l.eng.AppendTubeNames(dst)
		kept := dst[:start]
		for _, name := range dst[start:] {
			if route.GroupOfTube(name, gs.n) == g {
				kept = append(kept, name)
			}
		}
		dst = kept
	}
	return dst
}

func (gs *groupStats) TubeStats(name []byte, st *codec.TubeStats) bool {
	e := gs.engineOf(name)
	return e != nil && e.StatsTube(name, st)
}

func (gs *groupStats) OldestReady(name []byte) (time.Duration, bool) {
	if e := gs.engineOf(name); e != nil {
		return e.OldestReady(name)
	}
	return 0, false
}

func (gs *groupStats) Latency(name []byte) (wait, run engine.Histogram, ok bool) {
	if e := gs.engineOf(name); e != nil {
		return e.Latency(name)
	}
	return wait, run, false
}

func (gs *groupStats) Memory(k engine.MemKind) int64 {
	var n int64
	for _, l := range *gs.led.Load() {
		if l.eng != nil {
			n += l.eng.Memory(k)
		}
	}
	return n
}

var (
	descGroupLeader = prometheus.NewDesc("beanpole_cluster_group_leader",
		"1 while this node leads the data group and its engine serves it, 0 otherwise; the engine figures (beanstalkd_*, the tubes' series) are those of the groups this node leads.",
		[]string{"group"}, nil)
	descGroupTerm = prometheus.NewDesc("beanpole_cluster_group_term",
		"The raft term of a data group this node hosts.", []string{"group"}, nil)
	descGroupCommit = prometheus.NewDesc("beanpole_cluster_group_commit_index",
		"The highest raft index known committed in a data group this node hosts.", []string{"group"}, nil)
	descGroupApplied = prometheus.NewDesc("beanpole_cluster_group_applied_index",
		"The highest raft index applied to this node's state of a data group it hosts.", []string{"group"}, nil)
	descHeld = prometheus.NewDesc("beanpole_route_held_bytes",
		"What the router holds for this node's clients against the input budget: their input while their reserves wait, and list replies over 64 KiB they have not taken.", nil, nil)
	descParked = prometheus.NewDesc("beanpole_route_parked_clients",
		"Client connections of this node whose sessions hold no goroutine and no read buffer: those idle long enough to be parked, and those whose reserve waits, until the client or a group they wait at sends.", nil, nil)
)

// Describe is prometheus.Collector's.
func (gs *groupStats) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descGroupLeader, descGroupTerm, descGroupCommit, descGroupApplied, descParked, descHeld} {
		ch <- d
	}
}

// Collect is prometheus.Collector's: which data groups this node leads,
// the raft figures of those it hosts, and the router's parked clients and
// what it holds for its clients.
func (gs *groupStats) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descParked, prometheus.GaugeValue, float64(gs.rt.Parked()))
	ch <- prometheus.MustNewConstMetric(descHeld, prometheus.GaugeValue, float64(gs.rt.Held()))
	led := *gs.led.Load()
	for g := 1; g <= gs.n; g++ {
		label := strconv.Itoa(g)
		v := 0.0
		if led[g].eng != nil {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descGroupLeader, prometheus.GaugeValue, v, label)
		nd := gs.host.Groups[g]
		if nd == nil {
			continue // not hosted here
		}
		ch <- prometheus.MustNewConstMetric(descGroupTerm, prometheus.GaugeValue, float64(nd.Raft.CurrentTerm()), label)
		ch <- prometheus.MustNewConstMetric(descGroupCommit, prometheus.GaugeValue, float64(nd.Raft.CommitIndex()), label)
		ch <- prometheus.MustNewConstMetric(descGroupApplied, prometheus.GaugeValue, float64(nd.Raft.AppliedIndex()), label)
	}
}
