package e2e

// The HTTP side (--http): /metrics carries every numeric key of `stats`
// and `stats-tube` with the values the protocol reports, tubes past
// --metrics-max-tubes are summed into one series, /healthz answers while
// the process serves, /readyz tells a load balancer the truth (503 while
// draining or stopping), and a port that cannot be bound is refused at
// start. None of it exists in C beanstalkd.

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sys/unix"
)

// startHTTPServer starts a server with --http on a free port of its own
// and returns it with the base URL.
func startHTTPServer(t *testing.T, extra ...string) (*server, string) {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s := startServer(t, append([]string{"--http", addr}, extra...)...)
	return s, "http://" + addr
}

// httpGet fetches url and returns the status and body.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, b := httpDo(t, req, true)
	return resp.StatusCode, string(b)
}

// httpDo sends req, following redirects or not, and returns the response
// with its whole body read.
func httpDo(t *testing.T, req *http.Request, followRedirects bool) (*http.Response, []byte) {
	t.Helper()
	c := &http.Client{Timeout: defaultTimeout}
	if !followRedirects {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	resp, body := fetch(t, c, req)
	return resp, []byte(body)
}

// fetch sends req and returns the response with its whole body.
func fetch(t *testing.T, c *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	return resp, string(b)
}

// scrape reads /metrics with Prometheus's own text parser.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := httpGet(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %q", code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics is not the Prometheus text format: %v", err)
	}
	return fams
}

// metric is the sample of family name with label tube ("": none), or nil.
func metric(fams map[string]*dto.MetricFamily, name, tube string) *dto.Metric {
	for _, m := range fams[name].GetMetric() {
		got := ""
		for _, l := range m.GetLabel() {
			if l.GetName() == "tube" {
				got = l.GetValue()
			}
		}
		if got == tube {
			return m
		}
	}
	return nil
}

// value is the counter's or gauge's value of family name with label tube
// (or none).
func value(t *testing.T, fams map[string]*dto.MetricFamily, name, tube string) (float64, bool) {
	t.Helper()
	m := metric(fams, name, tube)
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue(), true
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

// checkAgainst checks that every numeric key of a stats map is in the
// scrape with the same value (prefix names the family, tube its label).
func checkAgainst(t *testing.T, fams map[string]*dto.MetricFamily, st map[string]string, prefix, tube string, skip ...string) {
	t.Helper()
	for k, v := range st {
		want, err := strconv.ParseFloat(v, 64)
		if err != nil || contains(skip, k) {
			continue
		}
		name := prefix + strings.ReplaceAll(k, "-", "_")
		got, ok := value(t, fams, name, tube)
		if !ok {
			t.Errorf("%s{tube=%q} missing from /metrics (stats key %s)", name, tube, k)
		} else if got != want {
			t.Errorf("%s{tube=%q} = %v, stats says %s", name, tube, got, v)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Jobs in every state over two tubes: /metrics agrees with `stats` and
// `stats-tube` key for key, counters are typed as counters, and the
// server's identity is in beanstalkd_info.
func TestHTTPMetricsMatchStats(t *testing.T) {
	skipUnlessBeanpole(t, "--http is beanpole's")
	t.Parallel()
	s, base := startHTTPServer(t, "-b", t.TempDir())
	c := s.dial(t)
	mustSend(t, c, "use mail\r\n")
	expect(t, c, "USING mail\r\n")
	for i := 1; i <= 4; i++ {
		put(t, c, 10, 0, 60, "job", uint64(i))
	}
	put(t, c, 10, 100, 60, "later", 5)
	mustSend(t, c, "watch mail\r\nreserve\r\n")
	expect(t, c, "WATCHING 2\r\nRESERVED 1 3\r\njob\r\n")
	mustSend(t, c, "bury 1 0\r\nreserve\r\n")
	expect(t, c, "BURIED\r\nRESERVED 2 3\r\njob\r\n")
	mustSend(t, c, "pause-tube mail 30\r\n")
	expect(t, c, "PAUSED\r\n")

	st, mail, dflt := stats(t, c), statsTube(t, c, "mail"), statsTube(t, c, "default")
	fams := scrape(t, base)
	// Time moves and the stats commands themselves count between the
	// two readings: those keys are checked for presence, not value.
	moving := []string{"uptime", "rusage-utime", "rusage-stime", "cmd-stats-tube", "pause-time-left"}
	checkAgainst(t, fams, st, "beanstalkd_", "", moving...)
	checkAgainst(t, fams, mail, "beanstalkd_tube_", "mail", moving...)
	checkAgainst(t, fams, dflt, "beanstalkd_tube_", "default", moving...)
	for _, name := range []string{"beanstalkd_uptime", "beanstalkd_rusage_utime", "beanstalkd_cmd_stats_tube"} {
		if _, ok := value(t, fams, name, ""); !ok {
			t.Errorf("%s missing", name)
		}
	}
	if left, ok := value(t, fams, "beanstalkd_tube_pause_time_left", "mail"); !ok || left < 1 || left > 30 {
		t.Errorf("beanstalkd_tube_pause_time_left{tube=mail} = %v %v, want 1..30", left, ok)
	}
	for name, want := range map[string]dto.MetricType{
		"beanstalkd_cmd_put": dto.MetricType_COUNTER, "beanstalkd_total_jobs": dto.MetricType_COUNTER,
		"beanstalkd_job_timeouts": dto.MetricType_COUNTER, "beanstalkd_current_jobs_ready": dto.MetricType_GAUGE,
		"beanstalkd_tube_cmd_delete": dto.MetricType_COUNTER, "beanstalkd_tube_current_jobs_buried": dto.MetricType_GAUGE,
	} {
		if f := fams[name]; f == nil || f.GetType() != want {
			t.Errorf("%s: type %v, want %v", name, f.GetType(), want)
		}
	}
	// The binlog's own figures: the puts above were written before they
	// were acknowledged.
	for _, name := range []string{"beanpole_binlog_writes_total", "beanpole_binlog_written_bytes_total",
		"beanpole_binlog_write_seconds_total", "beanpole_binlog_segments", "beanpole_binlog_disk_bytes"} {
		if v, ok := value(t, fams, name, ""); !ok || v <= 0 {
			t.Errorf("%s = %v %v, want > 0", name, v, ok)
		}
	}
	info := fams["beanstalkd_info"]
	if info == nil || len(info.GetMetric()) != 1 {
		t.Fatalf("beanstalkd_info: %v", info)
	}
	labels := map[string]string{}
	for _, l := range info.GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["id"] != st["id"] || labels["version"] != strings.Trim(st["version"], `"`) || labels["instance"] != "" {
		t.Errorf("beanstalkd_info labels %v; stats id %s version %s", labels, st["id"], st["version"])
	}
}

// Tubes past --metrics-max-tubes are summed into tube="_other", and a
// gauge says how many were folded.
func TestHTTPMetricsFoldTubesPastTheCap(t *testing.T) {
	skipUnlessBeanpole(t, "--http is beanpole's")
	t.Parallel()
	s, base := startHTTPServer(t, "--metrics-max-tubes", "2")
	c := s.dial(t)
	// list-tubes order: default, then the tubes as created.
	id := uint64(0)
	for i, tube := range []string{"a", "b", "c"} {
		mustSend(t, c, fmt.Sprintf("use %s\r\n", tube))
		expect(t, c, fmt.Sprintf("USING %s\r\n", tube))
		for k := 0; k <= i; k++ {
			id++
			put(t, c, 0, 0, 60, "x", id)
		}
	}
	fams := scrape(t, base)
	for tube, want := range map[string]float64{"default": 0, "a": 1, "_other": 5} {
		if got, ok := value(t, fams, "beanstalkd_tube_current_jobs_ready", tube); !ok || got != want {
			t.Errorf("current_jobs_ready{tube=%q} = %v %v, want %v", tube, got, ok, want)
		}
	}
	for _, tube := range []string{"b", "c"} {
		if _, ok := value(t, fams, "beanstalkd_tube_current_jobs_ready", tube); ok {
			t.Errorf("tube %q has its own series past the cap", tube)
		}
	}
	if got, _ := value(t, fams, "beanstalkd_tubes_folded", ""); got != 2 {
		t.Errorf("beanstalkd_tubes_folded = %v, want 2", got)
	}
	if _, ok := value(t, fams, "beanpole_binlog_writes_total", ""); ok {
		t.Error("binlog figures without -b")
	}
	if _, ok := value(t, fams, "beanstalkd_tube_pause", "_other"); ok {
		t.Error("pause does not add up, yet _other has it")
	}
}

// /healthz answers while the process serves; /readyz is 200 while it
// serves, 503 once draining (SIGUSR1), and never 200 before the binlog
// is replayed.
func TestHTTPHealthAndReadiness(t *testing.T) {
	skipUnlessBeanpole(t, "--http is beanpole's")
	t.Parallel()
	s, base := startHTTPServer(t)
	if code, body := httpGet(t, base+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	waitFor(t, defaultTimeout, "/readyz to say ready", func() bool {
		code, body := httpGet(t, base+"/readyz")
		if code != http.StatusOK && !strings.HasPrefix(body, "starting") {
			t.Fatalf("/readyz before ready: %d %q", code, body)
		}
		return code == http.StatusOK && body == "ready\n"
	})
	if err := s.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, defaultTimeout, "/readyz to say draining", func() bool {
		code, body := httpGet(t, base+"/readyz")
		return code == http.StatusServiceUnavailable && strings.HasPrefix(body, "draining")
	})
	if code, _ := httpGet(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz while draining: %d", code)
	}
	if code, _ := httpGet(t, base+"/debug/pprof/"); code != http.StatusNotFound {
		t.Fatalf("/debug/pprof/ without --http-pprof: %d", code)
	}
	if code, _ := httpGet(t, base+"/nope"); code != http.StatusNotFound {
		t.Fatalf("/nope: %d", code)
	}
}

// --http-pprof adds the profiler.
func TestHTTPPprof(t *testing.T) {
	skipUnlessBeanpole(t, "--http is beanpole's")
	t.Parallel()
	_, base := startHTTPServer(t, "--http-pprof")
	if code, body := httpGet(t, base+"/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Fatalf("/debug/pprof/: %d", code)
	}
}

// A --http address that cannot be bound stops the server at start, like
// the protocol's own listener (exit 111), naming the option.
func TestHTTPAddressInUseIsRefused(t *testing.T) {
	skipUnlessBeanpole(t, "--http is beanpole's")
	t.Parallel()
	ln, err := listenFresh()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	cmd := serverCommand("-l", "127.0.0.1", "-p", strconv.Itoa(port), "--http", ln.Addr().String())
	done := make(chan struct{})
	var out []byte
	go func() { out, _ = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the server kept running with its --http address taken")
	}
	expectNoRace(t, cmd, string(out))
	if code := cmd.ProcessState.ExitCode(); code != 111 || !strings.Contains(string(out), "--http") {
		t.Fatalf("exit %d, output %q; want 111 naming --http", code, out)
	}
}

// Connections closed as soon as accepted, for lack of descriptors, are
// counted in beanpole_connections_refused_total.
func TestHTTPCountsRefusedConnections(t *testing.T) {
	skipUnlessBeanpole(t, "--http is beanpole's")
	t.Parallel()
	s, base := startHTTPServer(t, "-b", t.TempDir())
	fams := scrape(t, base)
	if got, ok := value(t, fams, "beanpole_connections_refused_total", ""); !ok || got != 0 {
		t.Fatalf("refused before any: %v %v", got, ok)
	}
	nofile := uint64(max(64, procFDs(t, s.pid())+20))
	if err := unix.Prlimit(s.pid(), unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: nofile, Max: nofile}, nil); err != nil {
		t.Skipf("prlimit: %v", err)
	}
	refused := 0
	for i := 0; i < int(nofile) && refused < 3; i++ {
		c := s.dial(t)
		mustSend(t, c, listUsed)
		deadline := time.Now().Add(defaultTimeout)
		for len(c.buf) < usingLen && c.fill(deadline) == nil {
		}
		if c.eof != nil && len(c.buf) == 0 {
			refused++
		}
	}
	if refused == 0 {
		t.Fatalf("no connection refused under %d descriptors", nofile)
	}
	// A scrape needs a descriptor too: let a few connections go first.
	if got, _ := value(t, scrapeWhenPossible(t, base), "beanpole_connections_refused_total", ""); got < float64(refused) {
		t.Fatalf("beanpole_connections_refused_total %v, %d refused", got, refused)
	}
}

// scrapeWhenPossible retries a scrape that fails for lack of descriptors.
func scrapeWhenPossible(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	deadline := time.Now().Add(defaultTimeout)
	for {
		resp, err := http.Get(base + "/metrics")
		if err == nil {
			resp.Body.Close()
			return scrape(t, base)
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The protocol's bytes in and out are counted exactly: what the client
// sent and what it received.
func TestHTTPCountsBytes(t *testing.T) {
	skipUnlessBeanpole(t, "--http is beanpole's")
	t.Parallel()
	s, base := startHTTPServer(t)
	c := s.dial(t)
	in := listUsed + "put 0 0 60 5\r\nhello\r\n"
	mustSend(t, c, in)
	out := usingDflt + "INSERTED 1\r\n"
	expect(t, c, out)
	// The server counts a write once the syscall returns, which can be
	// after the client has read the bytes: poll until it shows, then
	// require both counts exact.
	var r, w float64
	waitFor(t, defaultTimeout, "the written bytes counted", func() bool {
		fams := scrape(t, base)
		r, _ = value(t, fams, "beanpole_read_bytes_total", "")
		w, _ = value(t, fams, "beanpole_written_bytes_total", "")
		return w >= float64(len(out))
	})
	if r != float64(len(in)) || w != float64(len(out)) {
		t.Fatalf("read %v written %v; want %d and %d", r, w, len(in), len(out))
	}
}

// What upstream cannot give: the age of a tube's oldest ready job, and
// histograms of the time from ready to reserve and from reserve to delete,
// for each tube that has had a job reserved, the folded ones summed into
// _other.
func TestHTTPLatencyAndOldestReady(t *testing.T) {
	skipUnlessBeanpole(t, "--http is beanpole's")
	t.Parallel()
	s, base := startHTTPServer(t, "--metrics-max-tubes", "2")
	c := s.dial(t)
	mustSend(t, c, "use a\r\nwatch a\r\nignore default\r\n")
	expect(t, c, "USING a\r\nWATCHING 2\r\nWATCHING 1\r\n")
	start := time.Now()
	put(t, c, 0, 0, 60, "old", 1)
	put(t, c, 0, 0, 60, "next", 2)
	time.Sleep(1100 * time.Millisecond)
	mustSend(t, c, "reserve\r\n")
	expect(t, c, "RESERVED 1 3\r\nold\r\n")
	mustSend(t, c, "delete 1\r\n")
	expect(t, c, "DELETED\r\n")
	// Tubes b and c are folded into _other: a job waits in c.
	mustSend(t, c, "use b\r\nuse c\r\n")
	expect(t, c, "USING b\r\nUSING c\r\n")
	put(t, c, 0, 0, 60, "in c", 3)
	put(t, c, 0, 0, 60, "done in c", 4)
	mustSend(t, c, "reserve-job 4\r\ndelete 4\r\n")
	expect(t, c, "RESERVED 4 9\r\ndone in c\r\nDELETED\r\n")

	fams := scrape(t, base)
	age, ok := value(t, fams, "beanpole_tube_oldest_ready_seconds", "a")
	if !ok || age < 1 || age > time.Since(start).Seconds()+1 {
		t.Errorf("oldest_ready_seconds{tube=a} = %v %v, want job 2's age, over 1 s", age, ok)
	}
	if got, ok := value(t, fams, "beanpole_tube_oldest_ready_seconds", "_other"); !ok || got > 1 {
		t.Errorf("oldest_ready_seconds{tube=_other} = %v %v", got, ok)
	}
	for _, name := range []string{"beanpole_tube_ready_to_reserve_seconds", "beanpole_tube_reserve_to_delete_seconds"} {
		h := histogram(fams, name, "a")
		if h == nil || h.GetSampleCount() != 1 {
			t.Fatalf("%s{tube=a}: %v, want one observation", name, h)
		}
		if name == "beanpole_tube_ready_to_reserve_seconds" && h.GetSampleSum() < 1 {
			t.Errorf("%s{tube=a}: sum %v, want the 1.1 s job 1 waited", name, h.GetSampleSum())
		}
		if histogram(fams, name, "_other") == nil {
			t.Errorf("%s{tube=_other} missing", name)
		}
		// A tube that never had a job reserved costs no histogram series.
		if histogram(fams, name, "default") != nil {
			t.Errorf("%s{tube=default}: a histogram for a tube with no reserve", name)
		}
	}
}

// histogram is the histogram of family name with label tube, or nil.
func histogram(fams map[string]*dto.MetricFamily, name, tube string) *dto.Histogram {
	return metric(fams, name, tube).GetHistogram()
}

// Connections opened (beanstalkd_total_connections) and closed.
func TestHTTPCountsClosedConnections(t *testing.T) {
	skipUnlessBeanpole(t, "--http is beanpole's")
	t.Parallel()
	s, base := startHTTPServer(t)
	s.dial(t) // stays open
	for range 3 {
		c := s.dial(t)
		mustSend(t, c, "quit\r\n")
		expectClosed(t, c)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		fams := scrape(t, base)
		closed, _ := value(t, fams, "beanpole_connections_closed_total", "")
		total, _ := value(t, fams, "beanstalkd_total_connections", "")
		if closed == 3 && total == 4 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("closed %v of %v connections, want 3 of 4", closed, total)
		}
	}
}
