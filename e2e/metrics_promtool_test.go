package e2e

// /metrics as Prometheus's own linter sees it: with --metrics-total-names
// promtool check metrics has nothing to say about a real scrape (every
// family explained by its HELP, every counter named _total); by default
// the only thing it says is that the beanstalkd exporters' counter names
// lack _total, which is the compatibility docs/operating.md describes.
// And the dashboard's flush, which no protocol command counts, is counted.

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// promtoolCheck runs promtool check metrics on a scrape of base and
// returns its complaints, one a line.
func promtoolCheck(t *testing.T, promtool, base string) []string {
	t.Helper()
	code, body := httpGet(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %q", code, body)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	out, _ := cmd.CombinedOutput()
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// busy gives a server every kind of series: a binlog's, tubes with
// latency histograms, a job flushed by the dashboard.
func busy(t *testing.T, s *server, base string) {
	t.Helper()
	c := s.dial(t)
	mustSend(t, c, "use q\r\n")
	expect(t, c, "USING q\r\n")
	put(t, c, 0, 0, 60, "one", 1)
	put(t, c, 0, 0, 60, "two", 2)
	put(t, c, 0, 0, 60, "three", 3)
	mustSend(t, c, "watch q\r\nreserve\r\n")
	expect(t, c, "WATCHING 2\r\nRESERVED 1 3\r\none\r\n")
	mustSend(t, c, "delete 1\r\n")
	expect(t, c, "DELETED\r\n")
	if code, _, msg := post(t, base, "/tube/flush?name=q", withToken("state", "ready")); code != http.StatusSeeOther {
		t.Fatalf("flush: %d %s", code, msg)
	}
}

func TestMetricsPassPromtoolWithTotalNames(t *testing.T) {
	promtool := ciTool(t, "promtool", "prometheus")
	t.Parallel()
	s, base := startDashboard(t, "-b", t.TempDir(), "--metrics-total-names")
	busy(t, s, base)
	if lines := promtoolCheck(t, promtool, base); len(lines) != 0 {
		t.Errorf("promtool check metrics, --metrics-total-names:\n%s", strings.Join(lines, "\n"))
	}
	fams := scrape(t, base)
	for name, want := range map[string]float64{
		"beanstalkd_cmd_put_total":      3,
		"beanstalkd_total_jobs_total":   3,
		"beanpole_flushed_jobs_total":   2,
		"beanstalkd_current_jobs_ready": 0,
	} {
		if got, ok := value(t, fams, name, ""); !ok || got != want {
			t.Errorf("%s = %v (%v), want %v", name, got, ok, want)
		}
	}
	if got, ok := value(t, fams, "beanstalkd_binlog_records_written_total", ""); !ok || got < 3 {
		t.Errorf("beanstalkd_binlog_records_written_total = %v (%v), want at least the 3 puts", got, ok)
	}
	if got, ok := value(t, fams, "beanstalkd_tube_cmd_delete_total", "q"); !ok || got != 1 {
		t.Errorf("beanstalkd_tube_cmd_delete_total{tube=\"q\"} = %v (%v), want 1", got, ok)
	}
	if _, ok := fams["beanstalkd_cmd_put"]; ok {
		t.Error("--metrics-total-names still serves beanstalkd_cmd_put")
	}
}

func TestMetricsDefaultNamesAreTheExporters(t *testing.T) {
	promtool := ciTool(t, "promtool", "prometheus")
	t.Parallel()
	s, base := startDashboard(t, "-b", t.TempDir())
	busy(t, s, base)
	suffix := regexp.MustCompile(`^beanstalkd_[a-z_]+ counter metrics should have "_total" suffix$`)
	n := 0
	for _, l := range promtoolCheck(t, promtool, base) {
		if !suffix.MatchString(l) {
			t.Errorf("promtool check metrics, default names: %s", l)
		}
		n++
	}
	if n == 0 {
		t.Error("promtool found no exporter-style counter names: are they gone?")
	}
	fams := scrape(t, base)
	if got, ok := value(t, fams, "beanstalkd_cmd_put", ""); !ok || got != 3 {
		t.Errorf("beanstalkd_cmd_put = %v (%v), want 3", got, ok)
	}
	if got, ok := value(t, fams, "beanpole_flushed_jobs_total", ""); !ok || got != 2 {
		t.Errorf("beanpole_flushed_jobs_total = %v (%v), want 2", got, ok)
	}
}

// The Prometheus rule docs/operating.md gives, which renames the
// exporters' counter names to _total ones, is valid for promtool.
func TestMetricsDocumentedRelabelRuleIsValid(t *testing.T) {
	promtool := ciTool(t, "promtool", "prometheus")
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "operating.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	if !ok {
		t.Fatal("docs/operating.md has no yaml block")
	}
	conf, _, _ := strings.Cut(rest, "```")
	f := filepath.Join(t.TempDir(), "prometheus.yml")
	if err := os.WriteFile(f, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(promtool, "check", "config", f).CombinedOutput(); err != nil {
		t.Errorf("promtool check config on docs/operating.md's block: %v\n%s", err, b)
	}
}
