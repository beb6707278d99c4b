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
}

// Metric names.
//
// Every numeric key of `stats` becomes beanstalkd_<key> and every numeric
// key of `stats-tube` beanstalkd_tube_<key>{tube="..."}, with dashes as
// underscores (beanstalkd_current_jobs_ready, beanstalkd_cmd_put,
// beanstalkd_tube_current_jobs_ready{tube="default"}): the names the
// beanstalkd exporters give them, so existing dashboards keep working. The
// cumulative ones (cmd-*, total-*, job-timeouts, rusage-*, binlog-records-*)
// are counters, the rest gauges. The strings (version, id, hostname, os,
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

// collector takes one snapshot per scrape, from the server's sources.
type collector struct {
	src      *atomic.Pointer[sources]
	maxTubes int
}

// Describe sends nothing: the series depend on the tubes there are (an
// unchecked collector).
func (c *collector) Describe(chan<- *prometheus.Desc) {}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	p := c.src.Load()
	if p == nil {
		return
	}
	src := p.stats
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
		emit(ch, "beanstalkd_"+metricName(key), key, v)
	})
	ch <- prometheus.MustNewConstMetric(
		prometheus.NewDesc("beanstalkd_info", "The server's identity, from stats; always 1.", nil, info),
		prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(
		prometheus.NewDesc("beanpole_connections_refused_total",
			"Connections closed as soon as accepted: out of descriptors, or keeping the last ones for the binlog.", nil, nil),
		prometheus.CounterValue, float64(src.Refused()))
	ch <- prometheus.MustNewConstMetric(
		prometheus.NewDesc("beanpole_connections_closed_total",
			"Connections served and since closed (total-connections less current-connections).", nil, nil),
		prometheus.CounterValue, float64(st.TotalConnections-st.CurrentConnections))
	in, out := src.Bytes()
	ch <- prometheus.MustNewConstMetric(
		prometheus.NewDesc("beanpole_read_bytes_total", "Protocol bytes read from clients and consumed.", nil, nil),
		prometheus.CounterValue, float64(in))
	ch <- prometheus.MustNewConstMetric(
		prometheus.NewDesc("beanpole_written_bytes_total", "Protocol bytes written to clients.", nil, nil),
		prometheus.CounterValue, float64(out))
	descLoop := prometheus.NewDesc("beanpole_loop_connections", "Open connections served by each event loop.", []string{"loop"}, nil)
	for i, n := range src.LoopConnections(nil) {
		ch <- prometheus.MustNewConstMetric(descLoop, prometheus.GaugeValue, float64(n), strconv.Itoa(i))
	}
	if bl, ok := src.Binlog(); ok {
		collectBinlog(ch, &bl)
	}

	var (
		ts          codec.TubeStats
		folded      int
		other       = make([]float64, len(tubeKeys))
		oWait, oRun engine.Histogram
		oOldest     time.Duration
		oLat        bool
	)
	for i, name := range src.TubeNames(nil) {
		if !src.TubeStats(name, &ts) {
			continue // gone since it was listed
		}
		oldest, _ := src.OldestReady(name)
		wait, run, lat := src.Latency(name)
		if i < c.maxTubes {
			tube := string(name)
			for k := range tubeKeys {
				ch <- prometheus.MustNewConstMetric(tubeKeys[k].desc, tubeKeys[k].typ, float64(tubeKeys[k].get(&ts)), tube)
			}
			emitLatency(ch, tube, oldest, lat, &wait, &run)
			continue
		}
		folded++
		for k := range tubeKeys {
			other[k] += float64(tubeKeys[k].get(&ts))
		}
		oWait.Add(wait)
		oRun.Add(run)
		oOldest = max(oOldest, oldest)
		oLat = oLat || lat
	}
	if folded > 0 {
		for k := range tubeKeys {
			if key := tubeKeys[k].key; key != "pause" && key != "pause-time-left" {
				ch <- prometheus.MustNewConstMetric(tubeKeys[k].desc, tubeKeys[k].typ, other[k], otherTube)
			}
		}
		emitLatency(ch, otherTube, oOldest, oLat, &oWait, &oRun)
	}
	ch <- prometheus.MustNewConstMetric(
		prometheus.NewDesc("beanstalkd_tubes_folded",
			"Tubes summed into tube=\""+otherTube+"\" (beyond --metrics-max-tubes).", nil, nil),
		prometheus.GaugeValue, float64(folded))
}

// What upstream cannot give, per tube (the folded tubes: the oldest of
// their oldest, their histograms summed).
var (
	descOldest = prometheus.NewDesc("beanpole_tube_oldest_ready_seconds",
		"Age of the tube's oldest ready job (0 with none).", []string{"tube"}, nil)
	descWait = prometheus.NewDesc("beanpole_tube_ready_to_reserve_seconds",
		"Time from a job becoming ready (put, kick, release, delay or TTR run out) to the reserve that took it.", []string{"tube"}, nil)
	descRun = prometheus.NewDesc("beanpole_tube_reserve_to_delete_seconds",
		"Time from a job's reserve (or last touch) to its delete by the worker holding it.", []string{"tube"}, nil)
)

func emitLatency(ch chan<- prometheus.Metric, tube string, oldest time.Duration, lat bool, wait, run *engine.Histogram) {
	ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, oldest.Seconds(), tube)
	if !lat {
		return
	}
	for _, h := range []struct {
		d *prometheus.Desc
		h *engine.Histogram
	}{{descWait, wait}, {descRun, run}} {
		buckets := make(map[float64]uint64, len(engine.LatencyBounds))
		var n uint64
		for i, b := range engine.LatencyBounds {
			n += h.h.Counts[i]
			buckets[b.Seconds()] = n
		}
		n += h.h.Counts[len(engine.LatencyBounds)]
		ch <- prometheus.MustNewConstHistogram(h.d, n, h.h.Sum.Seconds(), buckets, tube)
	}
}

func emit(ch chan<- prometheus.Metric, name, key string, v float64) {
	ch <- prometheus.MustNewConstMetric(
		prometheus.NewDesc(name, "stats: "+key, nil, nil), valueType(key), v)
}

// tubeKeys are the numeric keys of stats-tube, in its order, read straight
// from the struct (TestTubeKeysAreStatsTube checks them against the
// reply): a scrape of 10,000 tubes is 140,000 of them, so no text is
// written and parsed back, and each description is made once.
var tubeKeys = func() []tubeKey {
	keys := []tubeKey{
		{key: "current-jobs-urgent", get: func(t *codec.TubeStats) uint64 { return t.CurrentJobsUrgent }},
		{key: "current-jobs-ready", get: func(t *codec.TubeStats) uint64 { return t.CurrentJobsReady }},
		{key: "current-jobs-reserved", get: func(t *codec.TubeStats) uint64 { return t.CurrentJobsReserved }},
		{key: "current-jobs-delayed", get: func(t *codec.TubeStats) uint64 { return t.CurrentJobsDelayed }},
		{key: "current-jobs-buried", get: func(t *codec.TubeStats) uint64 { return t.CurrentJobsBuried }},
		{key: "total-jobs", get: func(t *codec.TubeStats) uint64 { return t.TotalJobs }},
		{key: "current-using", get: func(t *codec.TubeStats) uint64 { return t.CurrentUsing }},
		{key: "current-watching", get: func(t *codec.TubeStats) uint64 { return t.CurrentWatching }},
		{key: "current-waiting", get: func(t *codec.TubeStats) uint64 { return t.CurrentWaiting }},
		{key: "cmd-delete", get: func(t *codec.TubeStats) uint64 { return t.CmdDelete }},
		{key: "cmd-pause-tube", get: func(t *codec.TubeStats) uint64 { return t.CmdPauseTube }},
		{key: "pause", get: func(t *codec.TubeStats) uint64 { return t.Pause }},
		{key: "pause-time-left", get: func(t *codec.TubeStats) uint64 { return t.PauseTimeLeft }},
	}
	for i := range keys {
		k := &keys[i]
		k.typ = valueType(k.key)
		k.desc = prometheus.NewDesc("beanstalkd_tube_"+metricName(k.key), "stats-tube: "+k.key, []string{"tube"}, nil)
	}
	return keys
}()

type tubeKey struct {
	key  string
	get  func(*codec.TubeStats) uint64
	typ  prometheus.ValueType
	desc *prometheus.Desc
}

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
