package e2e

// The operator's kit in dist/ (docs/operating.md): the alerting rules pass
// promtool check rules, and every query of the Grafana dashboard, every
// variable's and every figure an alert compares with its threshold returns
// data from a real Prometheus (Debian's) scraping running servers: one
// with a binlog and TLS, and a cluster of three nodes. A query that names
// a metric the server does not export, or a label it does not set, comes
// back empty and fails the test.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	kitRules     = "../dist/beanpole-alerts.yml"
	kitDashboard = "../dist/beanpole-dashboard.json"
)

func TestAlertRulesPassPromtool(t *testing.T) {
	promtool := ciTool(t, "promtool", "prometheus")
	t.Parallel()
	out, err := exec.Command(promtool, "check", "rules", kitRules).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", kitRules, err, out)
	}
	want := fmt.Sprintf("SUCCESS: %d rules found", len(kitAlerts(t)))
	if !strings.Contains(string(out), want) {
		t.Fatalf("promtool check rules: %q, want %q (every rule an alert, one line of expr each)", out, want)
	}
}

// kitAlert is an alerting rule: its name, its expression and the figure
// the expression compares with its threshold.
type kitAlert struct{ name, expr, figure string }

// threshold is an expression's final comparison with a number.
var threshold = regexp.MustCompile(`^(.*\S)\s*(?:[<>]=?|==|!=)\s*[0-9.]+$`)

// kitAlerts reads the rules file's alerts (each expr on one line, as the
// file keeps them).
func kitAlerts(t *testing.T) []kitAlert {
	t.Helper()
	b, err := os.ReadFile(kitRules)
	if err != nil {
		t.Fatal(err)
	}
	var alerts []kitAlert
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if name, ok := strings.CutPrefix(line, "- alert: "); ok {
			alerts = append(alerts, kitAlert{name: name})
		} else if expr, ok := strings.CutPrefix(line, "expr: "); ok && len(alerts) > 0 {
			a := &alerts[len(alerts)-1]
			m := threshold.FindStringSubmatch(expr)
			if m == nil {
				t.Fatalf("alert %s: %q does not end in a comparison with a number", a.name, expr)
			}
			a.expr, a.figure = expr, m[1]
		}
	}
	for _, a := range alerts {
		if a.expr == "" {
			t.Fatalf("alert %s has no expr line", a.name)
		}
	}
	return alerts
}

// kitVars is what the dashboard's variables and Grafana's own stand for
// in a query: every job, instance and tube.
var kitVars = strings.NewReplacer("$job", ".*", "$instance", ".*", "$tube", ".*", "$__rate_interval", "20s")

// labelValues is a variable's query: label_values(SELECTOR, LABEL).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// kitQuery is a query to run: what it comes from, and the PromQL.
type kitQuery struct{ from, expr string }

// dashboardQueries lists every panel's queries and every variable's (its
// label_values selector) with the variables filled in.
func dashboardQueries(t *testing.T) []kitQuery {
	t.Helper()
	b, err := os.ReadFile(kitDashboard)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
			Panels  []json.RawMessage
		}
		Templating struct {
			List []struct {
				Name, Type string
				Query      json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", kitDashboard, err)
	}
	var qs []kitQuery
	for _, p := range dash.Panels {
		if len(p.Panels) > 0 {
			t.Fatalf("row %q holds panels of its own: keep rows open so that this test sees them", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				t.Fatalf("panel %q has a query without expr", p.Title)
			}
			qs = append(qs, kitQuery{"panel " + p.Title, kitVars.Replace(tg.Expr)})
		}
	}
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Fatalf("variable %s: %q is not label_values(SELECTOR, LABEL)", v.Name, q.Query)
		}
		qs = append(qs, kitQuery{"variable " + v.Name, fmt.Sprintf("count by (%s) (%s)", m[2], kitVars.Replace(m[1]))})
	}
	return qs
}

// promServer is a Prometheus started for a test.
type promServer struct {
	base string
	out  *syncBuffer
}

// startPrometheus runs Debian's prometheus on a free loopback port with
// its storage in a temporary directory, scraping each job's targets every
// second and evaluating the rules file every second.
func startPrometheus(t *testing.T, bin string, jobs map[string][]string, rules string) *promServer {
	t.Helper()
	dir := t.TempDir()
	rulesAbs, err := filepath.Abs(rules)
	if err != nil {
		t.Fatal(err)
	}
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\nrule_files:\n  - %q\nscrape_configs:\n", rulesAbs)
	names := make([]string, 0, len(jobs))
	for name := range jobs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		quoted := make([]string, len(jobs[name]))
		for i, a := range jobs[name] {
			quoted[i] = strconv.Quote(a)
		}
		fmt.Fprintf(&cfg, "  - job_name: %q\n    static_configs:\n      - targets: [%s]\n", name, strings.Join(quoted, ", "))
	}
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	// The free port may be taken before prometheus binds it: try another.
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		out := &syncBuffer{}
		cmd := exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
			"--web.listen-address="+addr, "--log.level=warn")
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		stop := func() { _ = cmd.Process.Kill(); <-exited } // once or more
		t.Cleanup(stop)
		ps := &promServer{base: "http://" + addr, out: out}
		ready := false
		waitFor(t, 60*time.Second, "prometheus to be ready", func() bool {
			select {
			case <-exited:
				return true
			default:
			}
			resp, err := http.Get(ps.base + "/-/ready")
			if err != nil {
				return false
			}
			resp.Body.Close()
			ready = resp.StatusCode == http.StatusOK
			return ready
		})
		if ready {
			return ps
		}
		if attempt == 3 || !strings.Contains(out.String(), "address already in use") {
			t.Fatalf("prometheus exited:\n%s", out.String())
		}
	}
}

// get fetches an API path and decodes its data.
func (p *promServer) get(t *testing.T, path string, data any) {
	t.Helper()
	code, body := httpGet(t, p.base+path)
	var r struct {
		Status string
		Error  string
		Data   json.RawMessage
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || code != http.StatusOK || r.Status != "success" {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal(r.Data, data); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, r.Data)
	}
}

// hasData runs an instant query: true when it returns a sample.
func (p *promServer) hasData(t *testing.T, expr string) bool {
	t.Helper()
	var d struct {
		ResultType string
		Result     json.RawMessage
	}
	p.get(t, "/api/v1/query?query="+url.QueryEscape(expr), &d)
	if d.ResultType == "scalar" || d.ResultType == "string" {
		return true
	}
	var res []json.RawMessage
	if err := json.Unmarshal(d.Result, &res); err != nil {
		t.Fatalf("query %s: %v", expr, err)
	}
	return len(res) > 0
}

// awaitData polls until every query returns data; it fails naming those
// that still return none.
func (p *promServer) awaitData(t *testing.T, qs []kitQuery) {
	t.Helper()
	pending := qs
	deadline := time.Now().Add(90 * time.Second)
	for {
		var still []kitQuery
		for _, q := range pending {
			if !p.hasData(t, q.expr) {
				still = append(still, q)
			}
		}
		if pending = still; len(pending) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, q := range pending {
				fmt.Fprintf(&b, "\n  %s: %s", q.from, q.expr)
			}
			var d struct {
				ActiveTargets []struct {
					ScrapeURL, Health, LastError string
				}
			}
			p.get(t, "/api/v1/targets", &d)
			for _, tg := range d.ActiveTargets {
				fmt.Fprintf(&b, "\ntarget %s: %s %s", tg.ScrapeURL, tg.Health, tg.LastError)
			}
			t.Fatalf("%d of %d queries return no data after 90 s:%s", len(pending), len(qs), b.String())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// awaitRules polls until Prometheus has evaluated every rule of the file,
// and fails on any rule whose evaluation failed.
func (p *promServer) awaitRules(t *testing.T, alerts []kitAlert) {
	t.Helper()
	waitFor(t, 60*time.Second, "every rule evaluated", func() bool {
		var d struct {
			Groups []struct {
				Rules []struct{ Name, Health, LastError string }
			}
		}
		p.get(t, "/api/v1/rules", &d)
		seen := 0
		for _, g := range d.Groups {
			for _, r := range g.Rules {
				if r.Health == "err" {
					t.Fatalf("rule %s: %s", r.Name, r.LastError)
				}
				if r.Health == "ok" {
					seen++
				}
			}
		}
		return seen == len(alerts)
	})
}

func TestPrometheusKitQueriesReturnData(t *testing.T) {
	bin := ciTool(t, "prometheus", "prometheus")
	t.Parallel()
	alerts := kitAlerts(t)
	queries := dashboardQueries(t)

	// A server with a binlog and TLS, and a tube whose jobs are put,
	// reserved, deleted and paused, so that it has every per-tube series.
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := "127.0.0.1:" + strconv.Itoa(port)
	single := startTLSServer(t, "-b", t.TempDir(), "--http", httpAddr, "--http-plain")
	c := single.dial(t)
	mustSend(t, c, "use q\r\n")
	expect(t, c, "USING q\r\n")
	put(t, c, 0, 0, 60, "one", 1)
	put(t, c, 0, 0, 60, "two", 2)
	mustSend(t, c, "watch q\r\nreserve\r\ndelete 1\r\npause-tube q 600\r\n")
	expect(t, c, "WATCHING 2\r\nRESERVED 1 3\r\none\r\nDELETED\r\nPAUSED\r\n")
	single.mustDialTLS(t)

	tc := startTestCluster(t, 3)
	lead := tc.leader()
	if _, d := putUntilInserted(t, lead.srv.addr, "x", 30*time.Second); d < 0 {
		t.Fatal("no put on the cluster")
	}
	var nodes []string
	for _, nd := range tc.nodes {
		nodes = append(nodes, nd.http)
	}

	prom := startPrometheus(t, bin, map[string][]string{"beanpole": {httpAddr}, "cluster": nodes}, kitRules)
	var figures []kitQuery
	for _, a := range alerts {
		if a.name != "BeanpoleBinlogFailed" { // shown once the binlog has failed, below
			figures = append(figures, kitQuery{"alert " + a.name, a.figure})
		}
	}
	prom.awaitData(t, append(queries, figures...))
	prom.awaitRules(t, alerts)

	// beanstalkd_binlog_failed is there only once the binlog failed: make
	// a write fail (as binlog_failure_test.go does) and see the alert fire.
	limitFileSize(t, single.pid(), 64)
	put3 := single.dial(t)
	mustSend(t, put3, "put 0 0 60 4\r\nlost\r\n")
	expect(t, put3, "INTERNAL_ERROR\r\n")
	for _, a := range alerts {
		if a.name == "BeanpoleBinlogFailed" {
			prom.awaitData(t, []kitQuery{{"alert " + a.name, a.figure}})
		}
	}
	waitFor(t, 60*time.Second, "BeanpoleBinlogFailed to fire", func() bool {
		var d struct {
			Alerts []struct {
				Labels map[string]string
				State  string
			}
		}
		prom.get(t, "/api/v1/alerts", &d)
		for _, a := range d.Alerts {
			if a.Labels["alertname"] == "BeanpoleBinlogFailed" && a.State == "firing" {
				return true
			}
		}
		return false
	})
	t.Logf("%d dashboard queries (panels and variables) and %d alert figures returned data", len(queries), len(alerts))
}
