package main

import (
	"encoding/json"
	"math"
)

// Meta describes the environment of a benchmark run.
type Meta struct {
	Started  string            `json:"started"`
	Finished string            `json:"finished"`
	Seconds  float64           `json:"seconds"`
	Go       string            `json:"go"`
	CPUs     int               `json:"cpus"`
	Kernel   string            `json:"kernel"`
	NoFile   uint64            `json:"open_file_limit"`
	Pinning  string            `json:"pinning"`
	Reps     int               `json:"reps"`
	Options  Options           `json:"-"`
	Versions map[string]string `json:"versions"`
	Paths    map[string]string `json:"paths"`
}

type jsonOptions struct {
	Duration   string `json:"duration"`
	Warmup     string `json:"warmup"`
	Size       int    `json:"size"`
	Conns      []int  `json:"conns"`
	PipeWindow int    `json:"pipe_window"`
	PipeConns  []int  `json:"pipe_conns"`
	PipeMax    int    `json:"pipe_max"`
	Producers  int    `json:"producers"`
	Consumers  int    `json:"consumers"`
	PubTubes   int    `json:"pubsub_tubes"`
	ProdWindow int    `json:"prod_window"`
	Backlog    int    `json:"backlog"`
	Tubes      []int  `json:"tubes"`
	TubeCons   int    `json:"tube_consumers"`
	TubeProds  int    `json:"tube_producers"`
	Idle       []int  `json:"idle"`
	Fanout     []int  `json:"fanout"`
	Large      []int  `json:"large"`
	LargeConns int    `json:"large_conns"`
	BinConns   int    `json:"binlog_conns"`
	Fsync      []int  `json:"fsync"`
}

type jsonRow struct {
	Title      string   `json:"title"`
	Metric     string   `json:"metric"`
	Unit       string   `json:"unit"`
	Higher     bool     `json:"higher_is_better"`
	Beanpole   *float64 `json:"beanpole"`
	Beanstalkd *float64 `json:"beanstalkd"`
	Ratio      *float64 `json:"ratio"`
	Latency    string   `json:"latency,omitempty"`
}

type jsonContender struct {
	Median Metrics   `json:"median,omitempty"`
	Runs   []Metrics `json:"runs"`
	NA     string    `json:"na,omitempty"`
	Failed bool      `json:"failed,omitempty"`
	Errors []string  `json:"errors,omitempty"`
}

type jsonScenario struct {
	Name  string   `json:"name"`
	Group string   `json:"group"`
	Num   int      `json:"scenario"`
	Desc  string   `json:"description"`
	Flags []string `json:"server_flags"`
	// Contenders name who ran as "beanpole" and as "beanstalkd" in rows
	// and results: cluster scenarios run a beanpole cluster against C or
	// against beanpole on its own, tls scenarios beanpole over TLS against
	// C behind stunnel or against beanpole over plaintext.
	Contenders [2]string                 `json:"contenders"`
	Rows       []jsonRow                 `json:"rows"`
	Results    map[string]*jsonContender `json:"results"`
}

type jsonDoc struct {
	Meta      *Meta          `json:"meta"`
	Options   jsonOptions    `json:"options"`
	Metrics   string         `json:"metrics_legend"`
	Scenarios []jsonScenario `json:"scenarios"`
}

const metricsLegend = "per row key prefix: rate = ops/s in the window, ops, wall (s), cpu = client CPU % of one core, " +
	"srvcpu = server CPU %, srvus / cliUs = server / client CPU µs per op, p50/p99/p999/max = latency µs; " +
	"mbps = payload MB/s; idle: rss0_mib, rss_mib, rss_per_conn (KiB), accept_ms, accept_rate, accept_cpu, accept_srvcpu; " +
	"fanout: fanout_ms; every run: net_drops (loopback backlog drops) and tcp_retrans (retransmitted segments), system-wide deltas"

func finite(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

func cleanMetrics(m Metrics) Metrics {
	if m == nil {
		return nil
	}
	out := Metrics{}
	for k, v := range m {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			out[k] = v
		}
	}
	return out
}

func writeJSON(path string, meta *Meta, results []*VarResult) error {
	o := meta.Options
	doc := jsonDoc{Meta: meta, Metrics: metricsLegend, Options: jsonOptions{
		Duration: o.Duration.String(), Warmup: o.Warmup.String(), Size: o.Size, Conns: o.Conns,
		PipeWindow: o.PipeWindow, PipeConns: o.PipeConns, PipeMax: o.PipeMax, Producers: o.Producers,
		Consumers: o.Consumers, PubTubes: o.PubTubes, ProdWindow: o.ProdWindow, Backlog: o.Backlog,
		Tubes: o.Tubes, TubeCons: o.TubeCons, TubeProds: o.TubeProds, Idle: o.Idle, Fanout: o.Fanout,
		Large: o.Large, LargeConns: o.LargeConns, BinConns: o.BinConns, Fsync: o.Fsync,
	}}
	for _, vr := range results {
		s := jsonScenario{Name: vr.V.Name, Group: vr.V.Group, Num: vr.V.Num, Desc: vr.V.Desc, Flags: vr.Flags,
			Contenders: vr.V.names(),
			Results:    map[string]*jsonContender{}}
		for _, rd := range vr.V.Rows {
			key := rd.Key + rd.Metric
			_, a := cell(vr.Res[0], key)
			_, b := cell(vr.Res[1], key)
			row := jsonRow{Title: rd.Title, Metric: key, Unit: rd.Unit, Higher: rd.Higher,
				Beanpole: finite(a), Beanstalkd: finite(b), Ratio: finite(ratio(a, b))}
			if rd.Lat {
				row.Latency = rd.LatWhat
			}
			s.Rows = append(s.Rows, row)
		}
		for ci, cr := range vr.Res {
			jc := &jsonContender{Median: cleanMetrics(cr.Median), NA: cr.NA, Failed: cr.Failed, Errors: cr.Errors, Runs: []Metrics{}}
			for _, r := range cr.Runs {
				jc.Runs = append(jc.Runs, cleanMetrics(r))
			}
			s.Results[[2]string{"beanpole", "beanstalkd"}[ci]] = jc
		}
		doc.Scenarios = append(doc.Scenarios, s)
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(b, '\n'))
}
