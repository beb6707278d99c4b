package admin

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/beanpole/beanpole/codec"
	"github.com/beanpole/beanpole/engine"
	"github.com/beanpole/beanpole/persist"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sys/unix"
)

// fakeSource has n tubes, each with a ready job and latency histograms.
type fakeSource struct{ names [][]byte }

func newFakeSource(n int) *fakeSource {
	f := &fakeSource{}
	for i := range n {
		f.names = append(f.names, []byte("tube-"+strconv.Itoa(i)))
	}
	return f
}

func (f *fakeSource) ServerStats(st *codec.ServerStats)        { st.CurrentJobsReady = uint64(len(f.names)) }
func (f *fakeSource) Refused() uint64                          { return 0 }
func (f *fakeSource) Memory(engine.MemKind) int64              { return 0 }
func (f *fakeSource) LoopConnections(dst []int64) []int64      { return dst }
func (f *fakeSource) Bytes() (in, out uint64)                  { return 0, 0 }
func (f *fakeSource) Binlog() (persist.Stats, bool)            { return persist.Stats{}, false }
func (f *fakeSource) TubeNames(dst [][]byte) [][]byte          { return append(dst, f.names...) }
func (f *fakeSource) OldestReady([]byte) (time.Duration, bool) { return time.Second, true }
func (f *fakeSource) TubeStats(name []byte, st *codec.TubeStats) bool {
	*st = codec.TubeStats{CurrentJobsReady: 1, TotalJobs: 3, CmdDelete: 2}
	return true
}
func (f *fakeSource) Latency([]byte) (wait, run engine.Histogram, ok bool) {
	wait.Counts[1], wait.Sum = 2, 3*time.Millisecond
	run.Counts[len(run.Counts)-1], run.Sum = 1, 2*time.Hour
	return wait, run, true
}

func newTestScraper(src Source, maxTubes int) *scraper {
	s := &Server{ln: &limitListener{max: 1}}
	s.src.Store(&sources{stats: src})
	c := &collector{src: s.metricsSource, maxTubes: maxTubes, http: s.ln}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	return &scraper{reg: reg, tubes: c}
}

// A scrape's cost grows with the tubes, not with their series: the
// per-tube series are written as text, not made into metric values.
func TestScrapeAllocatesLittlePerTube(t *testing.T) {
	const tubes = 2000
	s := newTestScraper(newFakeSource(tubes), tubes)
	allocs := testing.AllocsPerRun(3, func() {
		b, err := s.render()
		if err != nil {
			t.Fatal(err)
		}
		_ = b
	})
	t.Logf("%.2f allocations a tube", allocs/tubes)
	if per := allocs / tubes; per > 4 {
		t.Fatalf("%.1f allocations a tube (%v a scrape of %d tubes); want at most 4", per, allocs, tubes)
	}
}

// What is written parses as the text format, with the values the source
// gives, the folded tubes summed, and the histograms cumulative.
func TestScrapeTextParsesWithTheSourceValues(t *testing.T) {
	s := newTestScraper(newFakeSource(3), 2)
	b, err := s.render()
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(b.text))
	if err != nil {
		t.Fatalf("%v in:\n%s", err, b.text)
	}
	val := func(name, tube string) float64 {
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tube" && l.GetValue() == tube {
					return m.GetGauge().GetValue() + m.GetCounter().GetValue()
				}
			}
		}
		t.Fatalf("no %s{tube=%q} in:\n%s", name, tube, b.text)
		return 0
	}
	if v := val("beanstalkd_tube_total_jobs", "tube-1"); v != 3 {
		t.Errorf("total_jobs of tube-1 %v, want 3", v)
	}
	if v := val("beanstalkd_tube_cmd_delete", otherTube); v != 2 {
		t.Errorf("cmd_delete of the one folded tube %v, want 2", v)
	}
	if g := fams["beanstalkd_tubes_folded"].GetMetric()[0].GetGauge().GetValue(); g != 1 {
		t.Errorf("tubes_folded %v, want 1", g)
	}
	if strings.Contains(string(b.text), `beanstalkd_tube_pause{tube="_other"}`) {
		t.Errorf("pause written for the folded tubes")
	}
	h := fams["beanpole_tube_ready_to_reserve_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 2 || h.GetBucket()[0].GetCumulativeCount() != 0 || h.GetBucket()[1].GetCumulativeCount() != 2 {
		t.Errorf("ready_to_reserve histogram %v", h)
	}
	if fams["beanstalkd_current_jobs_ready"].GetMetric()[0].GetGauge().GetValue() != 3 {
		t.Errorf("server-wide series missing or wrong")
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if f := fams["beanpole_open_files_limit"]; f == nil || f.GetMetric()[0].GetGauge().GetValue() != float64(lim.Cur) {
		t.Errorf("beanpole_open_files_limit %v, want the soft RLIMIT_NOFILE %d", f, lim.Cur)
	}
}

// Scrapers that ask during a rendering share the next; one that asks
// after a rendering started gets a new one; while maxRetired replaced
// buffers are still being sent, no new rendering is made.
func TestScrapersShareRenderingsAndHoldFewBuffers(t *testing.T) {
	s := newTestScraper(newFakeSource(10), 10)
	t0 := time.Now()
	a, _, _ := s.get(t0, false)
	a2, _, _ := s.get(t0, false) // asked before a started
	if a2 != a {
		t.Fatalf("a scraper that asked before a rendering started got another")
	}
	var held []*scrapeBuf
	for range maxRetired + 3 {
		b, _, _ := s.get(time.Now(), true)
		held = append(held, b)
	}
	distinct := map[*scrapeBuf]bool{a: true}
	for _, b := range held {
		distinct[b] = true
	}
	if len(distinct) != maxRetired+1 {
		t.Fatalf("%d buffers held by scrapers that never finish; want %d", len(distinct), maxRetired+1)
	}
	for _, b := range held {
		s.release(b)
	}
	s.release(a)
	s.release(a2)
	if s.retired != 0 {
		t.Fatalf("%d buffers counted as retired once every scraper is done", s.retired)
	}
	if b, _, _ := s.get(time.Now(), false); distinct[b] {
		t.Fatalf("no new rendering once the old buffers were let go")
	}
}

// A source given to /metrics alone (a node of many groups) is scraped as
// SetSource's is, and /metrics answers 503 before either.
func TestMetricsSourceAloneIsScraped(t *testing.T) {
	s, err := Listen(Options{Addr: "127.0.0.1:0", MaxTubes: 10})
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	defer s.Close()
	get := func() (int, string) { return httpGet(t, s.URL()+"/metrics") }
	if code, _ := get(); code != http.StatusServiceUnavailable {
		t.Fatalf("/metrics before any source: %d", code)
	}
	s.SetMetricsSource(newFakeSource(3))
	code, body := get()
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %q", code, body)
	}
	for _, want := range []string{"\nbeanstalkd_current_jobs_ready 3\n", "\nbeanstalkd_tube_current_jobs_ready{tube=\"tube-2\"} 1\n"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// The dashboard says why it has nothing to show: starting, or, on a
// cluster node serving no engine of its own, that the node runs none.
func TestDashboardWithoutAnEngineSaysWhy(t *testing.T) {
	s, err := Listen(Options{Addr: "127.0.0.1:0", MaxTubes: 10})
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	defer s.Close()
	get := func() (int, string) { return httpGet(t, s.URL()+"/") }
	if code, body := get(); code != http.StatusServiceUnavailable || body != stateText[Starting]+"\n" {
		t.Fatalf("the dashboard while starting: %d %q", code, body)
	}
	s.SetState(Ready)
	if code, body := get(); code != http.StatusServiceUnavailable || body != noEngineText+"\n" {
		t.Fatalf("the dashboard of a node serving no engine: %d %q", code, body)
	}
}

// httpGet is url's status and body.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
