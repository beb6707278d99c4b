package cluster

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the node's own figures beside what raft reports.
type metrics struct {
	leaderChanges atomic.Uint64
	apply         prometheus.Histogram // an entry's time from Apply to commit
	snapSeconds   atomic.Uint64        // float64 bits: the last snapshot's duration
	snapBytes     atomic.Uint64        // the last snapshot's size
	refused       atomic.Uint64        // entries the FSM refused (validEntry)
	linksRefused  func() uint64        // connections the raft port closed before raft saw them
	// forwardRefused counts the clients a follower closed as soon as
	// accepted, to keep descriptors for raft (Forwarder).
	forwardRefused atomic.Uint64
}

func newMetrics() *metrics {
	return &metrics{apply: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "beanpole_raft_apply_seconds",
		Help:    "Time from handing an entry (a batch of records) to raft until it committed on a majority, fsynced there.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	})}
}

// watchLeader counts leader changes as raft observes them.
func (n *Node) watchLeader() {
	ch := make(chan raft.Observation, 16)
	n.Raft.RegisterObserver(raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	}))
	go func() {
		for range ch {
			n.m.leaderChanges.Add(1)
		}
	}()
}

var (
	descState = prometheus.NewDesc("beanpole_raft_state", "1 for the raft state this node is in (leader, follower, candidate, shutdown), 0 for the others.", []string{"state"}, nil)
	descTerm  = prometheus.NewDesc("beanpole_raft_term", "The raft term this node is in.", nil, nil)
	descLead  = prometheus.NewDesc("beanpole_raft_leader", "1, labelled with the id of the node this node takes for the leader (none while there is none).", []string{"id"}, nil)
	descComm  = prometheus.NewDesc("beanpole_raft_commit_index", "The highest raft index known committed.", nil, nil)
	descAppl  = prometheus.NewDesc("beanpole_raft_applied_index", "The highest raft index applied to this node's state.", nil, nil)
	descCont  = prometheus.NewDesc("beanpole_raft_last_contact_seconds", "A follower's time since it last heard from the leader (0 on the leader).", nil, nil)
	descChg   = prometheus.NewDesc("beanpole_raft_leader_changes_total", "Leader changes this node has seen since it started.", nil, nil)
	descSnapS = prometheus.NewDesc("beanpole_raft_snapshot_seconds", "How long this node's last snapshot took to write.", nil, nil)
	descSnapB = prometheus.NewDesc("beanpole_raft_snapshot_bytes", "The size of this node's last snapshot.", nil, nil)
	descRefE  = prometheus.NewDesc("beanpole_cluster_refused_entries_total", "Committed raft entries this node refused to apply as malformed (only a forged or damaged log has them).", nil, nil)
	descRefL  = prometheus.NewDesc("beanpole_cluster_links_refused_total", "Connections to the raft port closed before raft saw them: a failed handshake, no certificate of a node, silence past the greeting deadline, or over the caps.", nil, nil)
	descFwdRf = prometheus.NewDesc("beanpole_forwarded_connections_refused_total", "Clients this node closed as soon as accepted while following, to keep descriptors for raft.", nil, nil)
)

// Describe is prometheus.Collector's.
func (n *Node) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descState, descTerm, descLead, descComm, descAppl, descCont, descChg, descSnapS, descSnapB, descRefE, descRefL, descFwdRf} {
		ch <- d
	}
	n.m.apply.Describe(ch)
}

// Collect is prometheus.Collector's: raft's figures read at scrape time.
func (n *Node) Collect(ch chan<- prometheus.Metric) {
	st := n.Raft.Stats()
	state := stateName(n.Raft.State())
	for _, s := range []string{"leader", "follower", "candidate", "shutdown"} {
		v := 0.0
		if s == state {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, v, s)
	}
	_, leader := n.Raft.LeaderWithID()
	if leader == "" {
		leader = "none"
	}
	ch <- prometheus.MustNewConstMetric(descLead, prometheus.GaugeValue, 1, string(leader))
	ch <- prometheus.MustNewConstMetric(descTerm, prometheus.GaugeValue, float64(atou(st["term"])))
	ch <- prometheus.MustNewConstMetric(descComm, prometheus.GaugeValue, float64(atou(st["commit_index"])))
	ch <- prometheus.MustNewConstMetric(descAppl, prometheus.GaugeValue, float64(n.Raft.AppliedIndex()))
	contact := 0.0
	if state != "leader" {
		if lc := n.Raft.LastContact(); !lc.IsZero() {
			contact = time.Since(lc).Seconds()
		}
	}
	ch <- prometheus.MustNewConstMetric(descCont, prometheus.GaugeValue, contact)
	ch <- prometheus.MustNewConstMetric(descChg, prometheus.CounterValue, float64(n.m.leaderChanges.Load()))
	ch <- prometheus.MustNewConstMetric(descSnapS, prometheus.GaugeValue, math.Float64frombits(n.m.snapSeconds.Load()))
	ch <- prometheus.MustNewConstMetric(descSnapB, prometheus.GaugeValue, float64(n.m.snapBytes.Load()))
	ch <- prometheus.MustNewConstMetric(descRefE, prometheus.CounterValue, float64(n.m.refused.Load()))
	var links uint64
	if n.m.linksRefused != nil {
		links = n.m.linksRefused()
	}
	ch <- prometheus.MustNewConstMetric(descRefL, prometheus.CounterValue, float64(links))
	ch <- prometheus.MustNewConstMetric(descFwdRf, prometheus.CounterValue, float64(n.m.forwardRefused.Load()))
	n.m.apply.Collect(ch)
}
