package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// labelled is the sample of family name whose label is value, or nil.
func labelled(fams map[string]*dto.MetricFamily, name, label, value string) *dto.Metric {
	for _, m := range fams[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == value {
				return m
			}
		}
	}
	return nil
}

// sampleValue is a counter's or gauge's value (0 for none).
func sampleValue(m *dto.Metric) float64 {
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	return m.GetGauge().GetValue()
}

// On a node of many groups, /metrics shows the engines of the data groups
// it leads: the server-wide figures summed over the nodes are the
// cluster's (what `stats` through any node sums), each tube's series are on
// the node that leads its group alone, and each node says which groups it
// leads, with the raft figures of those it hosts.
func TestGroupsMetricsShowTheEnginesEachNodeLeads(t *testing.T) {
	const groups, perTube = 3, 4
	tc := startGroupsCluster(t, 3, groups)
	leaders := tc.settled(tc.nodes[0], 60*time.Second)
	scrapeAll := func() []map[string]*dto.MetricFamily {
		t.Helper()
		all := make([]map[string]*dto.MetricFamily, len(tc.nodes))
		for i, nd := range tc.nodes {
			all[i] = scrape(t, "http://"+nd.http)
		}
		return all
	}
	sum := func(all []map[string]*dto.MetricFamily, name string) (n float64) {
		for _, fams := range all {
			if m := metric(fams, name, ""); m != nil {
				n += sampleValue(m)
			}
		}
		return n
	}
	before := scrapeAll()
	c := tc.nodes[0].srv.dial(t)
	tubes := make([]string, groups+1)
	for g := 1; g <= groups; g++ {
		tubes[g] = tubeOfGroup(g, groups, "metrics")
		mustSend(t, c, "use "+tubes[g]+"\r\n")
		expect(t, c, "USING "+tubes[g]+"\r\n")
		for range perTube {
			mustSend(t, c, "put 0 0 60 1\r\nx\r\n")
			if l := readLine(t, c); !strings.HasPrefix(l, "INSERTED ") {
				t.Fatalf("put to %s: %q", tubes[g], l)
			}
		}
	}
	st := stats(t, c)
	after := scrapeAll()
	if now := tc.settled(tc.nodes[0], 60*time.Second); fmt.Sprint(now) != fmt.Sprint(leaders) {
		t.Fatalf("the leads moved during the test: %v, then %v", leaders, now)
	}

	put := float64(groups * perTube)
	for _, name := range []string{"beanstalkd_cmd_put", "beanstalkd_current_jobs_ready", "beanstalkd_total_jobs"} {
		if d := sum(after, name) - sum(before, name); d != put {
			t.Errorf("the nodes' %s went up by %v in all, for %v jobs put", name, d, put)
		}
	}
	for key, name := range map[string]string{"cmd-put": "beanstalkd_cmd_put", "current-jobs-ready": "beanstalkd_current_jobs_ready",
		"total-jobs": "beanstalkd_total_jobs", "current-jobs-reserved": "beanstalkd_current_jobs_reserved"} {
		if got := strconv.FormatFloat(sum(after, name), 'f', -1, 64); got != st[key] {
			t.Errorf("the nodes' %s add up to %s, stats through a node says %s", name, got, st[key])
		}
	}

	ids := map[string]int{}
	for i, nd := range tc.nodes {
		ids[nd.id] = i
	}
	for g := 1; g <= groups; g++ {
		lead := ids[leaders[g]]
		for i, fams := range after {
			leads := 0.0
			if i == lead {
				leads = 1
			}
			m := metric(fams, "beanstalkd_tube_current_jobs_ready", tubes[g])
			switch {
			case i != lead && m != nil:
				t.Errorf("%s: series of tube %s, whose group %d %s leads", tc.nodes[i].id, tubes[g], g, leaders[g])
			case i == lead && (m == nil || sampleValue(m) != perTube):
				t.Errorf("%s, leader of group %d: tube %s's jobs ready: %v, want %d", tc.nodes[i].id, g, tubes[g], m, perTube)
			}
			gl := labelled(fams, "beanpole_cluster_group_leader", "group", strconv.Itoa(g))
			if gl == nil || sampleValue(gl) != leads {
				t.Errorf("%s: beanpole_cluster_group_leader{group=%q} = %v, %s leads it", tc.nodes[i].id, strconv.Itoa(g), gl, leaders[g])
			}
			// Every node hosts every group (no --replicas).
			for _, name := range []string{"beanpole_cluster_group_term", "beanpole_cluster_group_commit_index", "beanpole_cluster_group_applied_index"} {
				if m := labelled(fams, name, "group", strconv.Itoa(g)); m == nil || sampleValue(m) < 1 {
					t.Errorf("%s: %s{group=%q} = %v", tc.nodes[i].id, name, strconv.Itoa(g), m)
				}
			}
		}
	}
	// Every engine has a default tube; it lives in one group, and has
	// series on one node.
	n := 0
	for _, fams := range after {
		if metric(fams, "beanstalkd_tube_current_jobs_ready", "default") != nil {
			n++
		}
	}
	if n != 1 {
		t.Errorf("tube default has series on %d nodes, want 1", n)
	}
}
