package admin

import (
	"bytes"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/beanpole/beanpole/codec"
	"github.com/beanpole/beanpole/engine"
	"github.com/beanpole/beanpole/persist"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// Source is what the metrics are read from: the same figures `stats`,
// `list-tubes` and `stats-tube` report.
type Source interface {
	ServerStats(st *codec.ServerStats)
	// Refused counts connections closed as soon as accepted (out of
	// descriptors), Bytes the protocol's bytes in and out: beanstalkd has
	// neither.
	Refused() uint64
	Bytes() (in, out uint64)
	// LoopConnections appends each event loop's open connections to dst.
	LoopConnections(dst []int64) []int64
	// Binlog is the binlog's own figures; false without -b.
	Binlog() (persist.Stats, bool)
	TubeNames(dst [][]byte) [][]byte
	TubeStats(name []byte, st *codec.TubeStats) bool
	// OldestReady is the age of the tube's oldest ready job (0: none);
	// Latency its histograms (see engine.Latency), false until the tube's
	// first reserve: an idle tube costs no histogram series.
	OldestReady(name []byte) (time.Duration, bool)
	Latency(name []byte) (wait, run engine.Histogram, ok bool)
	// Memory is the bytes of one kind charged against the memory ceiling.
	Memory(k engine.MemKind) int64
}

// tlsSource is a Source that may serve TLS: TLSHandshakeFailures counts
// the failed handshakes, false without a TLS listener; TLSHandshakesShed
// the connections closed unstarted for too many handshakes in progress;
// TLSConnections the TLS connections open.
type tlsSource interface {
	TLSHandshakeFailures() (uint64, bool)
	TLSHandshakesShed() uint64
	TLSConnections() int64
}

// Metric names.
//
// Every numeric key of `stats` becomes beanstalkd_<key> and every numeric
// key of `stats-tube` beanstalkd_tube_<key>{tube="..."}, with dashes as
// underscores (beanstalkd_current_jobs_ready, beanstalkd_cmd_put,
// beanstalkd_tube_current_jobs_ready{tube="default"}): the names the
// beanstalkd exporters give them, so existing dashboards keep working. The
// cumulative ones (cmd-*, total-*, job-timeouts, rusage-*, binlog-records-*)
// are counters, the rest gauges. With --metrics-total-names the counters'
// names end in _total (beanstalkd_cmd_put_total), as Prometheus's
// conventions (and promtool check metrics) want; docs/operating.md says why
// both exist. The strings (version, id, hostname, os,
// platform) are the labels of beanstalkd_info, 1. draining and
// binlog-failed are 0 or 1. No label is called instance: Prometheus sets
// that one itself.
//
// Tubes beyond the first maxTubes (in list-tubes order) are summed into
// tube="_other" (pause and pause-time-left, which do not add up, are left
// out there), and beanstalkd_tubes_folded says how many: 100,000 tubes
// must not become millions of series in a Prometheus server.

// otherTube labels the sum of the folded tubes.
const otherTube = "_other"

// collector takes one snapshot per scrape, from the server's sources: the
// server-wide series through Collect, the per-tube ones with writeTubes.
type collector struct {
	src      func() Source // nil: nothing to read yet
	maxTubes int
	http     *limitListener
	// totalNames: the counters of stats and stats-tube end in _total.
	totalNames bool
	// flushed counts the jobs the dashboard's flush deleted.
	flushed atomic.Uint64
}

// statName is the metric name of a stats or stats-tube key (prefix
// beanstalkd_ or beanstalkd_tube_).
func (c *collector) statName(prefix, key string) string {
	n := prefix + metricName(key)
	if c.totalNames && valueType(key) == prometheus.CounterValue {
		n += "_total"
	}
	return n
}

// Describe sends nothing: the series depend on the tubes there are (an
// unchecked collector).
func (c *collector) Describe(chan<- *prometheus.Desc) {}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	src := c.src()
	if src == nil {
		return
	}
	var st codec.ServerStats
	src.ServerStats(&st)
	info := map[string]string{}
	eachStat(codec.AppendStats(nil, &st), func(key string, v float64, s string, isNum bool) {
		if !isNum {
			switch key {
			case "version", "id", "hostname", "os", "platform":
				info[key] = s
			}
			return
		}
		ch <- prometheus.MustNewConstMetric(
			prometheus.NewDesc(c.statName("beanstalkd_", key), helpFor("stats", key), nil, nil), valueType(key), v)
	})
	ch <- prometheus.MustNewConstMetric(
		prometheus.NewDesc("beanstalkd_info", "The server's identity, from stats; always 1.", nil, info),
		prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(
		prometheus.NewDesc("beanpole_connections_refused_total",
			"Connections closed as soon as accepted: out of descriptors, or keeping the last ones for the binlog.", nil, nil),
		prometheus.CounterValue, float64(src.Refused()))
	if t, ok := src.(tlsSource); ok {
		if n, on := t.TLSHandshakeFailures(); on {
			ch <- prometheus.MustNewConstMetric(
				prometheus.NewDesc("beanpole_tls_handshake_failures_total",
					"TLS handshakes (--tls-listen) that failed or timed out.", nil, nil),
				prometheus.CounterValue, float64(n))
			ch <- prometheus.MustNewConstMetric(
				prometheus.NewDesc("beanpole_tls_handshakes_shed_total",
					"TLS connections (--tls-listen) closed unanswered, or their handshakes cut short for another address's, because 1,024 handshakes, or a quarter of the open-file limit, were in progress.", nil, nil),
				prometheus.CounterValue, float64(t.TLSHandshakesShed()))
			ch <- prometheus.MustNewConstMetric(
				prometheus.NewDesc("beanpole_tls_connections",
					"TLS connections open (--tls-listen), handshake done; they count in current-connections too.", nil, nil),
				prometheus.GaugeValue, float64(t.TLSConnections()))
		}
	}
	ch <- prometheus.MustNewConstMetric(
		prometheus.NewDesc("beanpole_connections_closed_total",
			"Connections served and since closed (total-connections less current-connections).", nil, nil),
		prometheus.CounterValue, float64(st.TotalConnections-st.CurrentConnections))
	ch <- prometheus.MustNewConstMetric(
		prometheus.NewDesc("beanpole_flushed_jobs_total",
			"Jobs deleted by the dashboard's flush of a tube (no protocol command deletes them: not in cmd-delete).", nil, nil),
		prometheus.CounterValue, float64(c.flushed.Load()))
	in, out := src.Bytes()
	ch <- prometheus.MustNewConstMetric(
		prometheus.NewDesc("beanpole_read_bytes_total", "Protocol bytes read from clients and consumed.", nil, nil),
		prometheus.CounterValue, float64(in))
	ch <- prometheus.MustNewConstMetric(
		prometheus.NewDesc("beanpole_written_bytes_total", "Protocol bytes written to clients.", nil, nil),
		prometheus.CounterValue, float64(out))
	for k := engine.MemKind(0); k < engine.NumMemKinds; k++ {
		ch <- prometheus.MustNewConstMetric(descMemory, prometheus.GaugeValue, float64(src.Memory(k)), engine.MemKindNames[k])
	}
	var nofile unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &nofile) == nil {
		ch <- prometheus.MustNewConstMetric(
			prometheus.NewDesc("beanpole_open_files_limit",
				"The open-file limit (soft RLIMIT_NOFILE, read at each scrape): every connection, protocol or HTTP, takes a descriptor of it.", nil, nil),
			prometheus.GaugeValue, float64(nofile.Cur))
	}
	ch <- prometheus.MustNewConstMetric(
		prometheus.NewDesc("beanpole_http_connections", "HTTP connections open (--http).", nil, nil),
		prometheus.GaugeValue, float64(c.http.open.Load()))
	ch <- prometheus.MustNewConstMetric(
		prometheus.NewDesc("beanpole_http_connections_refused_total",
			"HTTP connections closed as soon as accepted: past --http-max-conns, or near the open-file limit.", nil, nil),
		prometheus.CounterValue, float64(c.http.refused.Load()))
	ch <- prometheus.MustNewConstMetric(
		prometheus.NewDesc("beanpole_http_connections_evicted_total",
			"HTTP connections closed to make room for another at --http-max-conns: idle ones first, then those of an address past its share.", nil, nil),
		prometheus.CounterValue, float64(c.http.evicted.Load()))
	descLoop := prometheus.NewDesc("beanpole_loop_connections", "Open connections served by each event loop.", []string{"loop"}, nil)
	for i, n := range src.LoopConnections(nil) {
		ch <- prometheus.MustNewConstMetric(descLoop, prometheus.GaugeValue, float64(n), strconv.Itoa(i))
	}
	if bl, ok := src.Binlog(); ok {
		collectBinlog(ch, &bl)
	}
}

// scrapeRow is one tube's (or the folded tubes') figures in a scrape.
type scrapeRow struct {
	name      string
	ts        codec.TubeStats
	oldest    time.Duration
	wait, run engine.Histogram
	lat       bool
	other     bool // the folded tubes: no pause or pause-time-left
}

// writeTubes writes the per-tube series in the text format, family after
// family: tens of thousands of tubes are hundreds of thousands of series,
// too many to go through prometheus.Metric values (a scrape of 20,000
// tubes took seconds and hundreds of megabytes that way). Each tube is
// read once, as a `stats-tube` reads it.
func (c *collector) writeTubes(out *bytes.Buffer) {
	src := c.src()
	if src == nil {
		return
	}
	var (
		rows   []scrapeRow
		o      = scrapeRow{name: otherTube, other: true}
		folded int
	)
	for i, name := range src.TubeNames(nil) {
		var r scrapeRow
		if !src.TubeStats(name, &r.ts) {
			continue // gone since it was listed
		}
		r.oldest, _ = src.OldestReady(name)
		r.wait, r.run, r.lat = src.Latency(name)
		if i < c.maxTubes {
			r.name = string(name)
			rows = append(rows, r)
			continue
		}
		folded++
		addTubeStats(&o.ts, &r.ts)
		o.wait.Add(r.wait)
		o.run.Add(r.run)
		o.oldest = max(o.oldest, r.oldest)
		o.lat = o.lat || r.lat
	}
	if folded > 0 {
		rows = append(rows, o)
	}
	var num []byte
	for k := range tubeKeys {
		tk := &tubeKeys[k]
		name := c.statName("beanstalkd_tube_", tk.key)
		writeHeader(out, name, helpFor("stats-tube", tk.key), tk.typ)
		for i := range rows {
			if rows[i].other && (tk.key == "pause" || tk.key == "pause-time-left") {
				continue
			}
			num = strconv.AppendUint(num[:0], tk.get(&rows[i].ts), 10)
			writeSample(out, name, "", rows[i].name, "", num)
		}
	}
	writeHeader(out, "beanpole_tube_oldest_ready_seconds", helpOldest, prometheus.GaugeValue)
	for i := range rows {
		num = strconv.AppendFloat(num[:0], rows[i].oldest.Seconds(), 'g', -1, 64)
		writeSample(out, "beanpole_tube_oldest_ready_seconds", "", rows[i].name, "", num)
	}
	for _, h := range []struct {
		name, help string
		get        func(*scrapeRow) *engine.Histogram
	}{
		{"beanpole_tube_ready_to_reserve_seconds", helpWait, func(r *scrapeRow) *engine.Histogram { return &r.wait }},
		{"beanpole_tube_reserve_to_delete_seconds", helpRun, func(r *scrapeRow) *engine.Histogram { return &r.run }},
	} {
		writeHeader(out, h.name, h.help, prometheus.UntypedValue)
		for i := range rows {
			if !rows[i].lat {
				continue
			}
			hist := h.get(&rows[i])
			var n uint64
			for j := range engine.LatencyBounds {
				n += hist.Counts[j]
				num = strconv.AppendUint(num[:0], n, 10)
				writeSample(out, h.name, "_bucket", rows[i].name, leText[j], num)
			}
			n += hist.Counts[len(engine.LatencyBounds)]
			num = strconv.AppendUint(num[:0], n, 10)
			writeSample(out, h.name, "_bucket", rows[i].name, "+Inf", num)
			num = strconv.AppendFloat(num[:0], hist.Sum.Seconds(), 'g', -1, 64)
			writeSample(out, h.name, "_sum", rows[i].name, "", num)
			num = strconv.AppendUint(num[:0], n, 10)
			writeSample(out, h.name, "_count", rows[i].name, "", num)
		}
	}
	writeHeader(out, "beanstalkd_tubes_folded", "Tubes summed into tube=\""+otherTube+"\" (beyond --metrics-max-tubes).", prometheus.GaugeValue)
	num = strconv.AppendInt(num[:0], int64(folded), 10)
	writeSample(out, "beanstalkd_tubes_folded", "", "", "", num)
}

// leText are the histograms' bucket bounds as the le label says them.
var leText = func() []string {
	s := make([]string, len(engine.LatencyBounds))
	for i, b := range engine.LatencyBounds {
		s[i] = strconv.FormatFloat(b.Seconds(), 'g', -1, 64)
	}
	return s
}()

// writeHeader writes a family's HELP and TYPE lines (histogram for
// UntypedValue, which no tube family is otherwise).
func writeHeader(out *bytes.Buffer, name, help string, typ prometheus.ValueType) {
	t := "gauge"
	switch typ {
	case prometheus.CounterValue:
		t = "counter"
	case prometheus.UntypedValue:
		t = "histogram"
	}
	out.WriteString("# HELP " + name + " ")
	out.WriteString(strings.NewReplacer("\\", `\\\\`, "\n", `\\n`).Replace(help))
	out.WriteString("\n# TYPE " + name + " " + t + "\n")
}

// writeSample writes one sample line: name+suffix{tube="..",le=".."} value,
// without the labels that are empty.
func writeSample(out *bytes.Buffer, name, suffix, tube, le string, v []byte) {
	out.WriteString(name)
	out.WriteString(suffix)
	if tube != "" {
		out.WriteString(`{tube="`)
		writeLabelValue(out, tube)
		out.WriteByte('"')
		if le != "" {
			out.WriteString(`,le="` + le + `"`)
		}
		out.WriteByte('}')
	}
	out.WriteByte(' ')
	out.Write(v)
	out.WriteByte('\n')
}

// writeLabelValue escapes a label value as the text format wants:
// backslash, double quote and line feed.
func writeLabelValue(out *bytes.Buffer, v string) {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\':
			out.WriteString(`\\`)
		case '"':
			out.WriteString(`\"`)
		case '\n':
			out.WriteString(`\n`)
		default:
			out.WriteByte(c)
		}
	}
}

// addTubeStats adds b's counts into a (pause and pause-time-left too,
// though they are not written for the sum).
func addTubeStats(a, b *codec.TubeStats) {
	for k := range tubeKeys {
		*tubeKeys[k].field(a) += *tubeKeys[k].field(b)
	}
}

var descMemory = prometheus.NewDesc("beanpole_memory_bytes",
	"Memory charged against the ceiling (--max-job-memory), by what holds it: jobs, tubes, put bodies and TLS records still arriving (partial_bodies), replies not yet read (replies).",
	[]string{"kind"}, nil)

// What upstream cannot give, per tube (the folded tubes: the oldest of
// their oldest, their histograms summed).
const (
	helpOldest = "Age of the tube's oldest ready job (0 with none)."
	helpWait   = "Time from a job becoming ready (put, kick, release, delay or TTR run out) to the reserve that took it."
	helpRun    = "Time from a job's reserve (or last touch) to its delete by the worker holding it."
)

// tubeKeys are the numeric keys of stats-tube, in its order, read straight
// from the struct (TestTubeKeysAreStatsTube checks them against the
// reply): a scrape of 10,000 tubes is 140,000 of them, so no text is
// written and parsed back.
var tubeKeys = func() []tubeKey {
	keys := []tubeKey{
		{key: "current-jobs-urgent", field: func(t *codec.TubeStats) *uint64 { return &t.CurrentJobsUrgent }},
		{key: "current-jobs-ready", field: func(t *codec.TubeStats) *uint64 { return &t.CurrentJobsReady }},
		{key: "current-jobs-reserved", field: func(t *codec.TubeStats) *uint64 { return &t.CurrentJobsReserved }},
		{key: "current-jobs-delayed", field: func(t *codec.TubeStats) *uint64 { return &t.CurrentJobsDelayed }},
		{key: "current-jobs-buried", field: func(t *codec.TubeStats) *uint64 { return &t.CurrentJobsBuried }},
		{key: "total-jobs", field: func(t *codec.TubeStats) *uint64 { return &t.TotalJobs }},
		{key: "current-using", field: func(t *codec.TubeStats) *uint64 { return &t.CurrentUsing }},
		{key: "current-watching", field: func(t *codec.TubeStats) *uint64 { return &t.CurrentWatching }},
		{key: "current-waiting", field: func(t *codec.TubeStats) *uint64 { return &t.CurrentWaiting }},
		{key: "cmd-delete", field: func(t *codec.TubeStats) *uint64 { return &t.CmdDelete }},
		{key: "cmd-pause-tube", field: func(t *codec.TubeStats) *uint64 { return &t.CmdPauseTube }},
		{key: "pause", field: func(t *codec.TubeStats) *uint64 { return &t.Pause }},
		{key: "pause-time-left", field: func(t *codec.TubeStats) *uint64 { return &t.PauseTimeLeft }},
	}
	for i := range keys {
		k := &keys[i]
		k.typ = valueType(k.key)
	}
	return keys
}()

type tubeKey struct {
	key   string
	field func(*codec.TubeStats) *uint64
	typ   prometheus.ValueType
}

func (k *tubeKey) get(t *codec.TubeStats) uint64 { return *k.field(t) }

func metricName(key string) string { return strings.ReplaceAll(key, "-", "_") }

// valueType: the keys that only grow are counters.
func valueType(key string) prometheus.ValueType {
	for _, p := range []string{"cmd-", "total-", "rusage-", "binlog-records-"} {
		if strings.HasPrefix(key, p) {
			return prometheus.CounterValue
		}
	}
	if key == "job-timeouts" {
		return prometheus.CounterValue
	}
	return prometheus.GaugeValue
}

// eachStat calls fn for each "key: value" line of a stats reply (an OK
// frame around YAML), with the value as a number (booleans as 0 or 1)
// where it is one, else as a string without its quotes.
func eachStat(reply []byte, fn func(key string, v float64, s string, isNum bool)) {
	_, body, _ := bytes.Cut(reply, []byte("---\n"))
	for _, line := range bytes.Split(bytes.TrimSuffix(body, []byte("\r\n")), []byte("\n")) {
		k, val, ok := bytes.Cut(line, []byte(": "))
		if !ok {
			continue
		}
		s := string(val)
		switch s {
		case "true":
			fn(string(k), 1, s, true)
			continue
		case "false":
			fn(string(k), 0, s, true)
			continue
		}
		if v, err := strconv.ParseFloat(s, 64); err == nil {
			fn(string(k), v, s, true)
			continue
		}
		if uq, err := strconv.Unquote(s); err == nil {
			s = uq
		}
		fn(string(k), 0, s, false)
	}
}

// collectBinlog sends the binlog's figures beyond stats' binlog-* keys:
// group commits and fsyncs with the time they took (so that a rate of the
// seconds over a rate of the count is the mean latency), bytes written, and
// the files' size and live share.
func collectBinlog(ch chan<- prometheus.Metric, st *persist.Stats) {
	for _, m := range []struct {
		name, help string
		t          prometheus.ValueType
		v          float64
	}{
		{"beanpole_binlog_writes_total", "Group commits: one write of queued records.", prometheus.CounterValue, float64(st.Batches)},
		{"beanpole_binlog_write_seconds_total", "Time the group commits' writes took.", prometheus.CounterValue, float64(st.WriteNanos) / 1e9},
		{"beanpole_binlog_written_bytes_total", "Bytes the group commits wrote.", prometheus.CounterValue, float64(st.BytesWritten)},
		{"beanpole_binlog_fsyncs_total", "fsyncs of binlog files.", prometheus.CounterValue, float64(st.Fsyncs)},
		{"beanpole_binlog_fsync_seconds_total", "Time the fsyncs of the file being written took.", prometheus.CounterValue, float64(st.FsyncNanos) / 1e9},
		{"beanpole_binlog_disk_bytes", "Size of the binlog files, spares included.", prometheus.GaugeValue, float64(st.DiskBytes)},
		{"beanpole_binlog_live_bytes", "Bytes of the live jobs' latest full records.", prometheus.GaugeValue, float64(st.LiveBytes)},
		{"beanpole_binlog_segments", "Binlog files, spares included.", prometheus.GaugeValue, float64(st.Segments)},
		{"beanpole_binlog_disk_full", "1 while the last attempt to create a binlog file failed.", prometheus.GaugeValue, b2f(st.DiskFull)},
	} {
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(m.name, m.help, nil, nil), m.t, m.v)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
