package main

import (
	"fmt"
	"math"
	"strings"
)

// A target is one of the goals beanpole is held to against C beanstalkd
// (bench/README.md, "Targets"), checked against one row of a run. In the
// cluster rows the ratio is of the cluster to that row's second contender
// (C, or beanpole on its own).
type target struct {
	what    string
	variant string // variant name; "idle-max" is the largest idle count
	// mode: the target is for pinned or unpinned runs; "" for either (it
	// is read from the plain row).
	mode   string
	metric string // key of the row's primary metric
	// vsMetric, when set, is the second contender's figure compared
	// with beanpole's metric (stunnel's own share of stunnel+C).
	vsMetric string
	// Exactly one of the bounds applies: the ratio beanpole ÷ beanstalkd
	// at least minRatio or at most maxRatio, and beanpole's own figure at
	// most maxValue (when not zero).
	minRatio, maxRatio, maxValue float64
	unit                         string // of maxValue
	// inverse: the ratio is beanstalkd ÷ beanpole (how many times less
	// beanpole spends), checked against minRatio.
	inverse bool
	// own, when not zero, is the contender (1 or 2) whose two figures are
	// compared: its metric ÷ its vsMetric.
	own int
}

var targets = []target{
	{what: "accept 10,000 connections, unpinned: time ≤ C", variant: "idle-10000", mode: "unpinned", metric: "accept_ms", maxRatio: 1},
	{what: "accept 10,000 connections, pinned: time ≤ C", variant: "idle-10000", mode: "pinned", metric: "accept_ms", maxRatio: 1},
	{what: "accept the most connections, unpinned: time ≤ C", variant: "idle-max", mode: "unpinned", metric: "accept_ms", maxRatio: 1},
	{what: "accept the most connections, pinned: time ≤ C", variant: "idle-max", mode: "pinned", metric: "accept_ms", maxRatio: 1},
	{what: "RSS per idle connection at 10,000 ≤ C", variant: "idle-10000", metric: "rss_per_conn", maxRatio: 1},
	{what: "RSS per idle connection at 10,000 ≤ 600 B", variant: "idle-10000", metric: "rss_per_conn", maxValue: 600.0 / 1024, unit: "KiB"},
	{what: "RSS per idle connection at the most ≤ C", variant: "idle-max", metric: "rss_per_conn", maxRatio: 1},
	{what: "RSS per idle connection at the most ≤ 600 B", variant: "idle-max", metric: "rss_per_conn", maxValue: 600.0 / 1024, unit: "KiB"},
	{what: "round trips, 10 connections, pinned ≥ 1.1× C", variant: "roundtrip-c10", mode: "pinned", metric: "rate", minRatio: 1.1},
	{what: "round trips, 50 connections, pinned ≥ 1.1× C", variant: "roundtrip-c50", mode: "pinned", metric: "rate", minRatio: 1.1},
	{what: "pipelined puts, pinned ≥ 10× C", variant: "pipeline-c1", mode: "pinned", metric: "put.rate", minRatio: 10},
	{what: "pipelined puts, pinned: server CPU per put ≥ 10× less than C's", variant: "pipeline-c1", mode: "pinned", metric: "put.srvus", minRatio: 10, inverse: true},
	{what: "pipelined reserve+delete, pinned ≥ 10× C", variant: "pipeline-c1", mode: "pinned", metric: "drain.rate", minRatio: 10},
	{what: "pipelined reserve+delete, pinned: server CPU per job ≥ 10× less than C's", variant: "pipeline-c1", mode: "pinned", metric: "drain.srvus", minRatio: 10, inverse: true},
	{what: "64 KiB bodies, pinned ≥ 1.2× C", variant: "large-64KiB", mode: "pinned", metric: "mbps", minRatio: 1.2},
	{what: "64 KiB bodies, unpinned ≥ 1.2× C", variant: "large-64KiB", mode: "unpinned", metric: "mbps", minRatio: 1.2},
	{what: "1 MiB bodies, pinned ≥ 1.2× C", variant: "large-1MiB", mode: "pinned", metric: "mbps", minRatio: 1.2},
	{what: "1 MiB bodies, unpinned ≥ 1.2× C", variant: "large-1MiB", mode: "unpinned", metric: "mbps", minRatio: 1.2},
	{what: "memory per queued 100-byte job ≤ C", variant: "memory-1000000", metric: "rss_per_job", maxRatio: 1},
	{what: "3-node cluster: round trips, 50 connections ≥ 2× C -b -f 0", variant: "cluster-c50", metric: "rate", minRatio: 2},
	{what: "3-node cluster: round trips, 50 connections ≥ 0.5× beanpole -b -f 0", variant: "cluster-c50-vs-beanpole", metric: "rate", minRatio: 0.5},
	{what: "3-node cluster: pipelined puts ≥ 0.5× beanpole -b -f 0", variant: "cluster-pipeline-c1-vs-beanpole", metric: "put.rate", minRatio: 0.5},
	{what: "3-node cluster: pipelined reserve+delete ≥ 2× C -b -f 0", variant: "cluster-pipeline-c1", metric: "drain.rate", minRatio: 2},
	{what: "3-node cluster: pipelined reserve+delete ≥ 0.6× beanpole -b -f 0", variant: "cluster-pipeline-c1-vs-beanpole", metric: "drain.rate", minRatio: 0.6},
	{what: "beanpole -b -f 0: pipelined reserve+delete ≥ 0.5× its pipelined puts", variant: "cluster-pipeline-c1-vs-beanpole", metric: "drain.rate", vsMetric: "put.rate", own: 2, minRatio: 0.5},
	{what: "3 nodes, 3 groups: round trips, 50 connections over the nodes ≥ 1.3× 3 nodes, one group", variant: "cluster-groups3-c50", metric: "rate", minRatio: 1.3},
	{what: "3 nodes, 3 groups: pipelined puts over the nodes ≥ 1.3× 3 nodes, one group", variant: "cluster-groups3-pipeline-c9", metric: "put.rate", minRatio: 1.3},
	{what: "3 nodes, 3 groups: reserve over tubes of every group, jobs ready: p50 ≤ 2× 3 nodes, one group", variant: "cluster-groups3-xres-c3", metric: "busy.p50", maxRatio: 2},
	{what: "6 nodes, 6 groups on 3 replicas: round trips, 50 connections over the nodes ≥ 1.8× 3 nodes, one group", variant: "cluster6-groups6-r3-c50", metric: "rate", minRatio: 1.8},
	{what: "6 nodes, 6 groups on 3 replicas: pipelined puts over the nodes ≥ 1.8× 3 nodes, one group", variant: "cluster6-groups6-r3-pipeline-c36", metric: "put.rate", minRatio: 1.8},
	{what: "TLS: round trips, 50 connections ≥ 2× C behind stunnel", variant: "tls-c50", metric: "rate", minRatio: 2},
	{what: "TLS: round trips, 50 connections ≥ 0.8× beanpole plaintext", variant: "tls-c50-vs-plain", metric: "rate", minRatio: 0.8},
	{what: "TLS: 64 KiB bodies ≥ 0.7× beanpole plaintext", variant: "tls-large-64KiB-vs-plain", metric: "mbps", minRatio: 0.7},
	{what: "TLS: RSS per idle connection at 2,000 ≤ 32 KiB", variant: "tls-idle-2000", metric: "rss_per_conn", maxValue: 32, unit: "KiB"},
	{what: "TLS: RSS per idle connection at 2,000 ≤ stunnel's own", variant: "tls-idle-2000", metric: "rss_per_conn", vsMetric: "tunnel_rss_per_conn", maxRatio: 1},
}

// renderTargets checks every target whose row the run has; the others are
// listed as not measured. In a run that pinned everything (-pin), the
// pinned targets are read from the plain rows and the unpinned ones are
// not measured.
func renderTargets(results []*VarResult, maxIdle int, pinAll bool) string {
	byName := map[string]*VarResult{}
	for _, vr := range results {
		byName[vr.V.Name] = vr
	}
	var rows [][]string
	met, measured := 0, 0
	for _, t := range targets {
		name := strings.Replace(t.variant, "idle-max", fmt.Sprintf("idle-%d", maxIdle), 1)
		switch {
		case t.mode == "pinned" && !pinAll:
			name += "-pinned"
		case t.mode == "unpinned" && pinAll:
			name = "" // not in this run
		}
		vr := byName[name]
		if vr == nil {
			rows = append(rows, []string{t.what, "-", "-", "not measured in this run"})
			continue
		}
		ra, rb := vr.Res[0], vr.Res[1]
		if t.own != 0 {
			ra, rb = vr.Res[t.own-1], vr.Res[t.own-1]
		}
		_, a := cell(ra, t.metric)
		bm := t.metric
		if t.vsMetric != "" {
			bm = t.vsMetric
		}
		_, b := cell(rb, bm)
		r := ratio(a, b)
		if t.inverse {
			r = ratio(b, a)
		}
		var ok bool
		var got string
		switch {
		case t.maxValue != 0:
			ok, got = a <= t.maxValue, fmtNum(a)+" "+t.unit
			if t.unit == "KiB" {
				got = fmt.Sprintf("%.0f B", a*1024)
			}
		case t.minRatio != 0:
			ok, got = r >= t.minRatio, fmtRatio(r)
		default:
			ok, got = r <= t.maxRatio, fmtRatio(r)
		}
		verdict := "MET"
		switch {
		case math.IsNaN(a) || t.maxValue == 0 && math.IsNaN(r):
			verdict = "no figure"
		case !ok:
			verdict = "not met"
		default:
			met++
		}
		if verdict != "no figure" {
			measured++
		}
		rows = append(rows, []string{t.what, name, got, verdict})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\ntargets: %d of %d measured are met (ratios are beanpole ÷ beanstalkd, medians of the same run)\n\n", met, measured)
	b.WriteString(formatTable([]string{"target", "row", "measured", ""}, rows, []bool{false, false, true, false}))
	return b.String()
}
