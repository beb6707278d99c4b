package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"math/rand"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestHistQuantiles(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, gen := range []func() int64{
		func() int64 { return rng.Int63n(100) },                                 // exact buckets
		func() int64 { return 20_000 + rng.Int63n(5_000) },                      // narrow
		func() int64 { return int64(math.Exp(rng.NormFloat64()*1.5) * 50_000) }, // long tail
	} {
		var h Hist
		xs := make([]int64, 20000)
		for i := range xs {
			xs[i] = gen()
			h.Record(xs[i])
		}
		if h.Count() != uint64(len(xs)) {
			t.Fatalf("count %d", h.Count())
		}
		for _, q := range []float64{0.001, 0.5, 0.9, 0.99, 0.999, 1} {
			got, want := h.Quantile(q), exactQuantile(xs, q)
			if math.Abs(got-want) > 0.01*want+1 {
				t.Errorf("q%.3f: got %.1f want %.1f", q, got, want)
			}
		}
	}
}

func TestHistEdges(t *testing.T) {
	var h Hist
	if h.Quantile(0.5) != 0 || h.Mean() != 0 {
		t.Fatal("empty histogram")
	}
	h.Record(-5) // clamped to 0
	h.Record(math.MaxInt64)
	if h.Quantile(1) != float64(math.MaxInt64) || h.Quantile(0.5) != 0 {
		t.Fatalf("extremes: %v %v", h.Quantile(0.5), h.Quantile(1))
	}
	var a, b Hist
	for i := int64(1); i <= 100; i++ {
		a.Record(i * 1000)
		b.Record(i * 1000)
	}
	a.Merge(&b)
	if a.Count() != 200 || math.Abs(a.Quantile(0.5)-50_000) > 500 {
		t.Fatalf("merge: n=%d p50=%v", a.Count(), a.Quantile(0.5))
	}
	for i := 0; i < histBuckets; i++ { // buckets are contiguous
		lo, hi := histBounds(i)
		if i+1 < histBuckets {
			nlo, _ := histBounds(i + 1)
			if nlo != hi {
				t.Fatalf("bucket %d: hi %v next lo %v", i, hi, nlo)
			}
		}
		if lo < 1e18 && histIndex(int64(lo)) != i {
			t.Fatalf("bucket %d: index(lo=%v) = %d", i, lo, histIndex(int64(lo)))
		}
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{math.NaN(), 7}, 7},
		{[]float64{5}, 5},
	} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median(nil) should be NaN")
	}
}

func TestParseReply(t *testing.T) {
	var r Reply
	for _, c := range []struct {
		in   string
		kind Kind
		id   uint64
		n    uint64
		body string
		used int
	}{
		{"INSERTED 42\r\n", KInserted, 42, 0, "", 13},
		{"INSERTED 42\r\nDELETED\r\n", KInserted, 42, 0, "", 13},
		{"BURIED 7\r\n", KBuriedID, 7, 0, "", 10},
		{"BURIED\r\n", KBuried, 0, 0, "", 8},
		{"DELETED\r\n", KDeleted, 0, 0, "", 9},
		{"RESERVED 5 3\r\nabc\r\n", KReserved, 5, 3, "abc", 19},
		{"RESERVED 5 4\r\na\r\nb\r\n", KReserved, 5, 4, "a\r\nb", 20},
		{"RESERVED 9 0\r\n\r\n", KReserved, 9, 0, "", 16},
		{"FOUND 1 1\r\nx\r\n", KFound, 1, 1, "x", 14},
		{"OK 4\r\n---\n\r\n", KOK, 0, 4, "---\n", 12},
		{"WATCHING 3\r\n", KWatching, 0, 3, "", 12},
		{"USING foo\r\n", KUsing, 0, 0, "", 11},
		{"TIMED_OUT\r\n", KTimedOut, 0, 0, "", 11},
		{"DEADLINE_SOON\r\n", KDeadlineSoon, 0, 0, "", 15},
		{"KICKED 2\r\n", KKicked, 0, 2, "", 10},
		{"BAD_FORMAT\r\n", KBadFormat, 0, 0, "", 12},
		{"UNKNOWN_COMMAND\r\n", KUnknownCommand, 0, 0, "", 17},
		{"JOB_TOO_BIG\r\n", KJobTooBig, 0, 0, "", 13},
	} {
		used, need, err := ParseReply([]byte(c.in), &r)
		if err != nil || need != 0 {
			t.Errorf("%q: err %v need %d", c.in, err, need)
			continue
		}
		if used != c.used || r.Kind != c.kind || r.ID != c.id || r.N != c.n || string(r.Body) != c.body {
			t.Errorf("%q: used %d kind %v id %d n %d body %q", c.in, used, r.Kind, r.ID, r.N, r.Body)
		}
	}
	if ParseReply([]byte("USING foo\r\n"), &r); string(r.Name) != "foo" {
		t.Errorf("USING name %q", r.Name)
	}
}

func TestParseReplyPartial(t *testing.T) {
	var r Reply
	full := "RESERVED 12 10\r\n0123456789\r\n"
	for i := 0; i < len(full); i++ {
		used, need, err := ParseReply([]byte(full[:i]), &r)
		if err != nil || used != 0 {
			t.Fatalf("prefix %d: used %d err %v", i, used, err)
		}
		if i >= 16 && need != len(full) {
			t.Fatalf("prefix %d: need %d, want %d", i, need, len(full))
		}
		if i < 16 && need <= i {
			t.Fatalf("prefix %d: need %d", i, need)
		}
	}
	if used, _, err := ParseReply([]byte(full), &r); err != nil || used != len(full) {
		t.Fatalf("full: %d %v", used, err)
	}
}

func TestParseReplyErrors(t *testing.T) {
	var r Reply
	for _, in := range []string{
		"INSERTED\r\n",
		"INSERTED x\r\n",
		"INSERTED -1\r\n",
		"INSERTED 1 2\r\n",
		"INSERTED 99999999999999999999999\r\n",
		"RESERVED 1\r\n",
		"RESERVED 1 3\r\nabcXY",
		"HELLO\r\n",
		"DELETED 5\r\n",
		"DELETED\n",
		"USING \r\n",
		"OK 99999999999\r\n",
		strings.Repeat("A", 300),
	} {
		if _, _, err := ParseReply([]byte(in), &r); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

func TestParseStats(t *testing.T) {
	m, err := ParseStats([]byte("---\ncurrent-jobs-ready: 0\nversion: \"1.12\"\nhostname: h\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m["current-jobs-ready"] != "0" || m["version"] != "1.12" || m["hostname"] != "h" {
		t.Fatalf("%v", m)
	}
	if n, err := statInt(m, "current-jobs-ready"); err != nil || n != 0 {
		t.Fatal(n, err)
	}
	if _, err := statInt(m, "missing"); err == nil {
		t.Fatal("missing key accepted")
	}
	if _, err := ParseStats([]byte("nope")); err == nil {
		t.Fatal("bad body accepted")
	}
}

func TestCommands(t *testing.T) {
	if got := string(appendPut(nil, 1024, 0, 120, 64)); got != "put 1024 0 120 64\r\n" {
		t.Error(got)
	}
	if got := string(appendIDCmd(nil, "delete", 17)); got != "delete 17\r\n" {
		t.Error(got)
	}
}

func TestLedger(t *testing.T) {
	l := NewLedger(40)
	s0, s1 := l.New(0, 0), l.New(0, 0)
	body := func(seq int) []byte { return append(l.AppendHead(nil, seq), l.Filler(seq)...) }
	if len(body(s1)) != 40 {
		t.Fatalf("body length %d", len(body(s1)))
	}
	// a job may be delivered before its INSERTED is processed
	if seq, err := l.Reserved(7, body(s1)); err != nil || seq != s1 {
		t.Fatal(seq, err)
	}
	if err := l.Inserted(s1, 7); err != nil {
		t.Fatal(err)
	}
	if err := l.Inserted(s0, 7); err == nil {
		t.Fatal("duplicate id accepted")
	}
	if err := l.Inserted(s0, 6); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserved(7, body(s1)); err == nil {
		t.Fatal("second delivery accepted")
	}
	bad := body(s0)
	bad[30] ^= 1
	if _, err := l.Reserved(6, bad); err == nil {
		t.Fatal("corrupt body accepted")
	}
	if _, err := l.Reserved(6, body(s0)[:39]); err == nil {
		t.Fatal("short body accepted")
	}
	if _, err := l.Reserved(8, body(s0)); err == nil {
		t.Fatal("wrong id accepted")
	}
	if err := l.CheckAllDone(); err == nil {
		t.Fatal("incomplete ledger passed")
	}
	if left, err := l.CheckConsistent(); err == nil {
		t.Fatalf("reserved-but-not-deleted passed (left %d)", left)
	}
	if err := l.Deleted(s1); err != nil {
		t.Fatal(err)
	}
	if left, err := l.CheckConsistent(); err != nil || left != 1 {
		t.Fatal(left, err)
	}
	if _, err := l.Reserved(6, body(s0)); err != nil {
		t.Fatal(err)
	}
	if err := l.Deleted(s0); err != nil {
		t.Fatal(err)
	}
	if err := l.CheckAllDone(); err != nil {
		t.Fatal(err)
	}
	var ids idSet
	if !ids.Add(1<<40) || ids.Add(1<<40) || !ids.Add(3) || ids.Add(3) {
		t.Fatal("idSet")
	}
}

func TestFormatTable(t *testing.T) {
	got := formatTable([]string{"name", "µs"}, [][]string{{"a", "1"}, {"long name", "1234"}}, []bool{false, true})
	want := "" +
		"name         µs\n" +
		"---------------\n" +
		"a             1\n" +
		"long name  1234\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

func TestFmtNum(t *testing.T) {
	for x, want := range map[float64]string{
		0: "0", 1.234: "1.23", 12.34: "12.3", 123.4: "123", 12345: "12.3k", 123456: "123k",
		1234567: "1.23M", 2.5e9: "2.50G", math.NaN(): "-",
	} {
		if got := fmtNum(x); got != want {
			t.Errorf("fmtNum(%v) = %q, want %q", x, got, want)
		}
	}
	if fmtRatio(ratio(3, 2)) != "1.50x" || fmtRatio(ratio(1, 0)) != "n/a" || fmtRatio(ratio(math.NaN(), 1)) != "n/a" {
		t.Error("ratio")
	}
}

func TestTableRows(t *testing.T) {
	v := &Variant{Name: "x", Rows: []RowDef{{Title: "x", Metric: "rate", Unit: "jobs/s", Higher: true, Lat: true}}}
	res := []*VarResult{{V: v, Res: [2]*CtResult{
		{Median: Metrics{"rate": 2000, "p50": 10, "p99": 20, "p999": 30, "cpu": 95, "srvus": 5}},
		{NA: "no binlog"},
	}}}
	_, rows, _ := tableRows(res)
	r := rows[0]
	if r[2] != "2000" || r[3] != "n/a" || r[4] != "n/a" || r[5] != "10.0 / -" || !strings.HasSuffix(r[8], "*") {
		t.Fatalf("%q", r)
	}
	res[0].Res[1] = &CtResult{Median: Metrics{"rate": 1000}}
	_, rows, _ = tableRows(res)
	if rows[0][4] != "2.00x" {
		t.Fatalf("%q", rows[0])
	}
}

func TestNiceStep(t *testing.T) {
	for x, want := range map[float64]float64{0.7: 1, 3: 5, 12: 20, 4000: 5000, 100: 100} {
		if got := niceStep(x); math.Abs(got-want) > 1e-9 {
			t.Errorf("niceStep(%v) = %v, want %v", x, got, want)
		}
	}
}

func TestTickLabel(t *testing.T) {
	for x, want := range map[float64]string{0: "0", 2.5: "2.5", 5000: "5000", 12500: "12.5k", 25000: "25k", 1.5e6: "1.5M", 19698: "19.7k"} {
		if got := tickLabel(x); got != want {
			t.Errorf("tickLabel(%v) = %q, want %q", x, got, want)
		}
	}
}

func TestSelectVariants(t *testing.T) {
	o := &Options{Size: 64, Conns: []int{1, 10}, PipeConns: []int{1}, PipeWindow: 64, Tubes: []int{1, 1000},
		Idle: []int{1000}, Fanout: []int{1000}, Large: []int{65536}, Fsync: []int{50, 0}, Duration: time.Second}
	vs := buildVariants(o)
	got, err := selectVariants(vs, "1,binlog,tubes-1000")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range got {
		names = append(names, v.Name)
	}
	if strings.Join(names, " ") != "roundtrip-c1 roundtrip-c10 tubes-1000 binlog-f50 binlog-f0" {
		t.Fatal(names)
	}
	if _, err := selectVariants(vs, "nosuch"); err == nil {
		t.Fatal("unknown scenario accepted")
	}
	if got, _ := selectVariants(vs, ""); len(got) != len(vs) {
		t.Fatal("empty -only should keep all")
	}
}

// pendingBytes concatenates a connection's unsent output.
func pendingBytes(c *Conn) []byte {
	var b []byte
	for _, s := range c.segs {
		if s.ref != nil {
			b = append(b, s.ref...)
		} else {
			b = append(b, c.arena[s.a0:s.a1]...)
		}
	}
	return b
}

func TestOutputQueue(t *testing.T) {
	l := &Loop{}
	c := &Conn{l: l}
	var want []byte
	ref := []byte(strings.Repeat("R", 5000))
	rng := rand.New(rand.NewSource(2))
	for round := 0; round < 200; round++ {
		for k := rng.Intn(4); k >= 0; k-- {
			switch rng.Intn(3) {
			case 0:
				s := strings.Repeat("w", 1+rng.Intn(3000))
				c.Write([]byte(s))
				want = append(want, s...)
			case 1:
				c.WriteString("put 1 0 1 5\r\n")
				want = append(want, "put 1 0 1 5\r\n"...)
			case 2:
				c.WriteRef(ref)
				want = append(want, ref...)
			}
		}
		if c.nOut != len(want) || l.pending != 1 {
			t.Fatalf("round %d: nOut %d want %d pending %d", round, c.nOut, len(want), l.pending)
		}
		n := rng.Intn(len(want) + 1)
		if round%10 == 9 {
			n = len(want)
		}
		c.advance(n)
		want = want[n:]
		if got := pendingBytes(c); string(got) != string(want) {
			t.Fatalf("round %d: queue holds %d bytes, want %d", round, len(got), len(want))
		}
		if len(want) == 0 && (l.pending != 0 || len(c.arena) != 0) {
			t.Fatalf("round %d: not reset", round)
		}
		if len(c.arena) > 1<<20 {
			t.Fatalf("arena grew to %d", len(c.arena))
		}
	}
}

func TestPinnedCopiesFollowTheirOriginals(t *testing.T) {
	o := Options{Conns: []int{10, 50}, PipeConns: []int{1}, Idle: []int{100}, Large: []int{65536}, MemJobs: 10}
	vs := withPinnedCopies(buildVariants(&o), "roundtrip-c50,idle,nosuch")
	var names []string
	for _, v := range vs {
		names = append(names, v.Name)
		if v.Pinned != strings.HasSuffix(v.Name, "-pinned") {
			t.Errorf("%s: Pinned = %v", v.Name, v.Pinned)
		}
	}
	got := strings.Join(names, " ")
	for _, want := range []string{"roundtrip-c10 roundtrip-c50 roundtrip-c50-pinned pipeline-c1", "idle-100 idle-100-pinned large-64KiB"} {
		if !strings.Contains(got, want) {
			t.Errorf("variants %q, want %q in order", got, want)
		}
	}
	for _, v := range vs {
		if v.Pinned && !strings.HasSuffix(v.Rows[0].Title, " [pinned]") {
			t.Errorf("%s: row title %q", v.Name, v.Rows[0].Title)
		}
	}
}

func TestTargetsAreCheckedAgainstTheirRows(t *testing.T) {
	res := func(name string, bp, bs Metrics) *VarResult {
		return &VarResult{V: &Variant{Name: name}, Res: [2]*CtResult{{Median: bp}, {Median: bs}}}
	}
	out := renderTargets([]*VarResult{
		res("pipeline-c1-pinned", Metrics{"put.rate": 500e3, "put.srvus": 1, "drain.rate": 300e3, "drain.srvus": 2},
			Metrics{"put.rate": 100e3, "put.srvus": 12, "drain.rate": 50e3, "drain.srvus": 15}),
		res("idle-500", Metrics{"rss_per_conn": 0.5, "accept_ms": 90}, Metrics{"rss_per_conn": 0.9, "accept_ms": 100}),
	}, 500, false)
	for _, want := range []string{
		"pipelined puts, pinned ≥ 10× C  ", // the line, then its figures
		"5.00x  not met",
		"12.00x  MET", // server CPU per put: 12 times less than C's
		"7.50x  not met",
		"idle-500",
		"512 B  MET",
		"0.90x  MET", // accepting the most connections
		"not measured in this run",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("targets report lacks %q:\n%s", want, out)
		}
	}
}

func TestPinnedRunReadsPinnedTargetsFromPlainRows(t *testing.T) {
	vr := &VarResult{V: &Variant{Name: "roundtrip-c50"}, Res: [2]*CtResult{{Median: Metrics{"rate": 12}}, {Median: Metrics{"rate": 10}}}}
	out := renderTargets([]*VarResult{vr}, 500, true)
	if !regexp.MustCompile(`50 connections, pinned .* roundtrip-c50 +1\.20x  MET`).MatchString(out) {
		t.Errorf("pinned run: round trips at 50 not read from roundtrip-c50:\n%s", out)
	}
	if !regexp.MustCompile(`accept 10,000 connections, unpinned.* not measured`).MatchString(out) {
		t.Errorf("pinned run: an unpinned target was measured:\n%s", out)
	}
}

func TestClusterVariantsRunTheClusterAgainstCBeanpoleAloneAndItsOneGroup(t *testing.T) {
	o := Options{Conns: []int{50}, PipeConns: []int{1}, BinConns: 50, PipeWindow: 64}
	vs, err := selectVariants(withPinnedCopies(buildVariants(&o), defaultPinned), "cluster")
	if err != nil {
		t.Fatal(err)
	}
	cts := [2]Contender{{Name: "beanpole", Path: "/bp"}, {Name: "beanstalkd", Path: "/bs"}}
	want := map[string][2]Contender{
		"cluster-c50":                      {{Name: "cluster", Path: "/bp", Cluster: true}, cts[1]},
		"cluster-pipeline-c1":              {{Name: "cluster", Path: "/bp", Cluster: true}, cts[1]},
		"cluster-c50-vs-beanpole":          {{Name: "cluster", Path: "/bp", Cluster: true}, cts[0]},
		"cluster-pipeline-c1-vs-beanpole":  {{Name: "cluster", Path: "/bp", Cluster: true}, cts[0]},
		"cluster-groups3-c50":              {{Name: "cluster-groups3", Path: "/bp", Cluster: true, Nodes: 3, Groups: 3}, {Name: "cluster", Path: "/bp", Cluster: true}},
		"cluster-groups3-pipeline-c9":      {{Name: "cluster-groups3", Path: "/bp", Cluster: true, Nodes: 3, Groups: 3}, {Name: "cluster", Path: "/bp", Cluster: true}},
		"cluster-groups3-xres-c3":          {{Name: "cluster-groups3", Path: "/bp", Cluster: true, Nodes: 3, Groups: 3}, {Name: "cluster", Path: "/bp", Cluster: true}},
		"cluster6-groups6-r3-c50":          {{Name: "cluster6-groups6-r3", Path: "/bp", Cluster: true, Nodes: 6, Groups: 6, Replicas: 3}, {Name: "cluster", Path: "/bp", Cluster: true}},
		"cluster6-groups6-r3-pipeline-c36": {{Name: "cluster6-groups6-r3", Path: "/bp", Cluster: true, Nodes: 6, Groups: 6, Replicas: 3}, {Name: "cluster", Path: "/bp", Cluster: true}},
	}
	if len(vs) != len(want) {
		t.Fatalf("%d cluster variants, want %d (no pinned copies)", len(vs), len(want))
	}
	for _, v := range vs {
		if got := v.contenders(cts); got != want[v.Name] {
			t.Errorf("%s: contenders %+v, want %+v", v.Name, got, want[v.Name])
		}
		wantFlags := "-b D -f 0"
		if v.Groups > 0 {
			wantFlags = "" // both contenders are clusters
		}
		if f := strings.Join(v.Flags("D"), " "); f != wantFlags || !v.NeedDir {
			t.Errorf("%s: flags %q", v.Name, f)
		}
	}
	out := renderTargets([]*VarResult{
		{V: &Variant{Name: "cluster-c50"}, Res: [2]*CtResult{{Median: Metrics{"rate": 7400}}, {Median: Metrics{"rate": 3000}}}},
		{V: &Variant{Name: "cluster-pipeline-c1-vs-beanpole"}, Res: [2]*CtResult{{Median: Metrics{"put.rate": 30e3, "drain.rate": 40e3}},
			{Median: Metrics{"put.rate": 90e3, "drain.rate": 60e3}}}},
		{V: &Variant{Name: "cluster-groups3-pipeline-c9"}, Res: [2]*CtResult{{Median: Metrics{"put.rate": 70e3}}, {Median: Metrics{"put.rate": 50e3}}}},
		{V: &Variant{Name: "cluster6-groups6-r3-c50"}, Res: [2]*CtResult{{Median: Metrics{"rate": 85e3}}, {Median: Metrics{"rate": 50e3}}}},
		{V: &Variant{Name: "cluster-groups3-xres-c3"}, Res: [2]*CtResult{{Median: Metrics{"busy.p50": 250}}, {Median: Metrics{"busy.p50": 100}}}},
	}, 500, false)
	for _, re := range []string{`≥ 2× C -b -f 0 +cluster-c50 +2\.47x  MET`, `pipelined puts ≥ 0\.5× beanpole -b -f 0 +cluster-pipeline-c1-vs-beanpole +0\.33x  not met`,
		`reserve\+delete ≥ 0\.6× beanpole -b -f 0 +cluster-pipeline-c1-vs-beanpole +0\.67x  MET`,
		`reserve\+delete ≥ 0\.5× its pipelined puts +cluster-pipeline-c1-vs-beanpole +0\.67x  MET`,
		`reserve\+delete ≥ 2× C -b -f 0 .*not measured`,
		`round trips, 50 connections ≥ 0\.5× beanpole -b -f 0 .*not measured`,
		`3 groups: pipelined puts over the nodes ≥ 1\.3× 3 nodes, one group +cluster-groups3-pipeline-c9 +1\.40x  MET`,
		`3 groups: round trips, 50 connections over the nodes ≥ 1\.3× .*not measured`,
		`6 groups on 3 replicas: round trips, 50 connections over the nodes ≥ 1\.8× 3 nodes, one group +cluster6-groups6-r3-c50 +1\.70x  not met`,
		`6 groups on 3 replicas: pipelined puts over the nodes ≥ 1\.8× .*not measured`,
		`3 groups: reserve over tubes of every group, jobs ready: p50 ≤ 2× 3 nodes, one group +cluster-groups3-xres-c3 +2\.50x  not met`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("targets report lacks %q:\n%s", re, out)
		}
	}
}

func TestPerfCountsAreSummedFromItsCSV(t *testing.T) {
	out := "Events disabled\nEvents enabled\n4080,,syscalls:sys_enter_fsync,620920013,100.00,,\n12,,syscalls:sys_enter_fdatasync,620841631,100.00,,\n"
	if n, err := parsePerfCounts(out); n != 4092 || err != nil {
		t.Errorf("got %d, %v; want 4092", n, err)
	}
	for _, bad := range []string{"Events disabled\n", "<not counted>,,syscalls:sys_enter_fsync,0,100.00,,\n0,,syscalls:sys_enter_fdatasync,0,100.00,,\n"} {
		if _, err := parsePerfCounts(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestDocPageHasTheRunsTableCommandAndChart(t *testing.T) {
	dir := t.TempDir()
	page, err := renderDoc(filepath.Join(dir, "docs", "performance.md"), filepath.Join(dir, "bench", "results"),
		"beanpole vs beanstalkd\nscenario  unit\ntarget MET\n",
		[]string{"-beanpole", "/x/bin/beanpole", "-beanstalkd=/usr/bin/beanstalkd", "-out", "results", "-reps", "3", "-doc", "../docs/performance.md"}, 0.2)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"make bench BENCHARGS=\"-reps 3\"", "scenario  unit\ntarget MET\n```",
		"](../bench/results/chart.png)", "## The targets out of reach", "limited to\n0.2 of a core"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page has no %q", want)
		}
	}
	if strings.Contains(string(page), "{{") || strings.Contains(string(page), "/x/bin") {
		t.Errorf("the page has a template marker or a machine's path left in it")
	}
}

// The report names a binary built in the repository by its path there,
// not by the machine's directories; a system binary keeps its own.
func TestReportGivesBinariesInTheRepositoryRelative(t *testing.T) {
	root := t.TempDir()
	for _, f := range []struct{ path, text string }{
		{"go.mod", "// the repository\nmodule " + repoModule + "\n\ngo 1.26\n"},
		{"bench/go.mod", "module " + repoModule + "/bench\n"},
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, f.path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, f.path), []byte(f.text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bench := filepath.Join(root, "bench")
	for _, c := range []struct{ path, want string }{
		{filepath.Join(root, "bin", "beanpole"), "bin/beanpole"},
		{"../bin/beanpole", "bin/beanpole"},
		{"/usr/bin/beanstalkd", "/usr/bin/beanstalkd"},
		{filepath.Join(filepath.Dir(root), "elsewhere", "beanpole"), filepath.Join(filepath.Dir(root), "elsewhere", "beanpole")},
	} {
		path := c.path
		if !filepath.IsAbs(path) {
			path = filepath.Join(bench, path) // as given in bench/
		}
		if got := repoPath(path, bench); got != c.want {
			t.Errorf("repoPath(%s) = %s, want %s", c.path, got, c.want)
		}
	}
	if got := repoPath("/x/bin/beanpole", t.TempDir()); got != "/x/bin/beanpole" {
		t.Errorf("outside any repository: %s", got)
	}
	meta := &Meta{Paths: map[string]string{"beanpole": repoPath(filepath.Join(root, "bin", "beanpole"), bench), "beanstalkd": "/usr/bin/beanstalkd"},
		Versions: map[string]string{}}
	if out := renderTable(nil, meta); !strings.Contains(out, "beanpole: bin/beanpole (") || strings.Contains(out, root) {
		t.Errorf("the report gives the machine's path:\n%s", out)
	}
}

func TestTLSVariantsRunBeanpoleTLSAgainstStunnelAndItsOwnPlaintext(t *testing.T) {
	o := Options{Size: 64, LargeConns: 10, TLSConns: 50, TLSHsConns: 8, TLSIdle: 2000}
	vs, err := selectVariants(withPinnedCopies(buildVariants(&o), defaultPinned), "tls")
	if err != nil {
		t.Fatal(err)
	}
	cts := [2]Contender{{Name: "beanpole", Path: "/bp"}, {Name: "beanstalkd", Path: "/bs"}}
	bpTLS := Contender{Name: "beanpole-tls", Path: "/bp", TLS: true}
	stunnel := Contender{Name: "stunnel+C", Path: "/bs", TLS: true, Stunnel: true}
	want := map[string][2]Contender{
		"tls-c50":                  {bpTLS, stunnel},
		"tls-c50-vs-plain":         {bpTLS, cts[0]},
		"tls-large-64KiB-vs-plain": {bpTLS, cts[0]},
		"tls-handshake":            {bpTLS, stunnel},
		"tls-idle-2000":            {bpTLS, stunnel},
	}
	if len(vs) != len(want) {
		t.Fatalf("%d tls variants, want %d (no pinned copies)", len(vs), len(want))
	}
	for _, v := range vs {
		if got := v.contenders(cts); got != want[v.Name] {
			t.Errorf("%s: contenders %+v, want %+v", v.Name, got, want[v.Name])
		}
	}
	out := renderTargets([]*VarResult{
		{V: &Variant{Name: "tls-c50-vs-plain"}, Res: [2]*CtResult{{Median: Metrics{"rate": 30e3}}, {Median: Metrics{"rate": 40e3}}}},
		// beanpole's 24 KiB against stunnel's own 60, not stunnel+C's 61.
		{V: &Variant{Name: "tls-idle-2000"}, Res: [2]*CtResult{{Median: Metrics{"rss_per_conn": 24}}, {Median: Metrics{"rss_per_conn": 61, "tunnel_rss_per_conn": 60}}}},
	}, 500, false)
	for _, re := range []string{`≥ 0\.8× beanpole plaintext +tls-c50-vs-plain +0\.75x  not met`, `≤ 32 KiB +tls-idle-2000 +24576 B  MET`,
		`≤ stunnel's own +tls-idle-2000 +0\.40x  MET`, `≥ 2× C behind stunnel .*not measured`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("targets report lacks %q:\n%s", re, out)
		}
	}
}

// A spread run pairs every node with every data group once in each
// nodes×groups connections, on tubes of their own.
func TestSpreadTubesPairEveryNodeWithEveryGroup(t *testing.T) {
	for _, n := range []int{3, 6} {
		group := func(name string) int { // as route.GroupOfTube, counting from 0
			h := fnv.New32a()
			h.Write([]byte(name))
			return int(h.Sum32() % uint32(n))
		}
		seen := map[string]bool{}
		pairs := map[[2]int]int{}
		for i := range 50 {
			name := spreadTube(i, n, n)
			if seen[name] {
				t.Fatalf("%d nodes, connection %d: tube %s is another connection's", n, i, name)
			}
			seen[name] = true
			if i < n*n {
				pairs[[2]int{i % n, group(name)}]++
			}
		}
		if len(pairs) != n*n {
			t.Errorf("%d nodes: the first %d connections pair nodes and groups as %v, want each pair once", n, n*n, pairs)
		}
	}
}

// fakeNode answers what dialRun sends (list-tube-used, use, watch, ignore
// default) as a server would, and sends the tube each connection used on
// used.
func fakeNode(t *testing.T, used chan<- string) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					f := strings.Fields(sc.Text())
					var reply string
					switch {
					case len(f) == 1 && f[0] == "list-tube-used":
						reply = "USING default"
					case len(f) == 2 && f[0] == "use":
						reply = "USING " + f[1]
						used <- f[1]
					case len(f) == 2 && f[0] == "watch":
						reply = "WATCHING 2"
					case len(f) == 2 && f[0] == "ignore" && f[1] == "default":
						reply = "WATCHING 1"
					default:
						reply = "UNKNOWN_COMMAND"
					}
					if _, err := c.Write([]byte(reply + "\r\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestSpreadRunDialsConnectionIToNodeIModNOnItsOwnTube(t *testing.T) {
	var used [3]chan string
	var nodes [3]*Server
	for k := range nodes {
		used[k] = make(chan string, 8)
		nodes[k] = &Server{Port: fakeNode(t, used[k])}
	}
	nodes[0].group = nodes[1:]
	l, err := NewLoop(nodes[0].Port, 1024)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const conns = 7
	cs, err := dialRun(&RunCtx{Srv: nodes[0], L: l, Spread: 3}, conns)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != conns {
		t.Fatalf("%d connections, want %d", len(cs), conns)
	}
	for k := range nodes {
		want := map[string]bool{}
		for i := k; i < conns; i += 3 {
			want[spreadTube(i, 3, 3)] = true
		}
		// Every use was answered, so each node has sent its tubes.
		got := map[string]bool{}
		for len(used[k]) > 0 {
			got[<-used[k]] = true
		}
		if !maps.Equal(got, want) {
			t.Errorf("node %d: connections used %v, want %v", k, got, want)
		}
	}
}

// groupsView is what a fake node answers to GET /cluster/groups: group 0
// on every node, and data group g on its replicas members from node g-1
// on; leader[g] is the index of the node that leads g (in term 10+g), and
// each node that does not host g names it with the state "elsewhere".
func groupsView(nodes, replicas, node int, leader []int) []map[string]any {
	var out []map[string]any
	for g, l := range leader {
		st := map[string]any{"group": g, "leader": fmt.Sprintf("n%d", l+1), "state": "follower", "term": 10 + g}
		if l == node {
			st["state"] = "leader"
		}
		if g > 0 && (node-(g-1)+nodes)%nodes >= replicas {
			st["state"], st["term"] = "elsewhere", 0
		}
		out = append(out, st)
	}
	return out
}

// fakeGroupsNodes serves each node's view of the groups (view) on
// /cluster/groups, to the token "tok" only, and returns their addresses.
func fakeGroupsNodes(t *testing.T, nodes int, view func(node int) []map[string]any) []string {
	var web []string
	for k := range nodes {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/cluster/groups" || r.Header.Get("Authorization") != "Bearer tok" {
				http.Error(w, "no", http.StatusForbidden)
				return
			}
			_ = json.NewEncoder(w).Encode(view(k))
		}))
		t.Cleanup(srv.Close)
		web = append(web, strings.TrimPrefix(srv.URL, "http://"))
	}
	return web
}

// With --replicas a node names the leader of a group it does not host,
// with no term: six nodes, six groups on three replicas, each node
// leading one, are spread; a node naming another leader, a member naming
// another term, or one node leading more than its share are not.
func TestLeadsSpreadOverReplicasTakeTheLeadersNamedElsewhere(t *testing.T) {
	const nodes, replicas = 6, 3
	spread := []int{0, 0, 1, 2, 3, 4, 5} // group 0, then each data group at its first member
	hc := &http.Client{Timeout: 5 * time.Second}
	n := &Server{}
	web := fakeGroupsNodes(t, nodes, func(k int) []map[string]any { return groupsView(nodes, replicas, k, spread) })
	if sig := leadsSpread(hc, web, "tok", n); sig != "n1@10 n1@11 n2@12 n3@13 n4@14 n5@15 n6@16 " || n.dataLeads != 1 {
		t.Errorf("spread leads: %q, %d data leads at most; want every group's leader and term, 1", sig, n.dataLeads)
	}
	for what, view := range map[string]func(k int) []map[string]any{
		"a node not hosting group 3 names another leader": func(k int) []map[string]any {
			v := groupsView(nodes, replicas, k, spread)
			if k == 5 {
				v[3]["leader"] = "n4"
			}
			return v
		},
		"a member of group 2 names another term": func(k int) []map[string]any {
			v := groupsView(nodes, replicas, k, spread)
			if k == 2 {
				v[2]["term"] = 99
			}
			return v
		},
		"n1 leads three data groups": func(k int) []map[string]any {
			return groupsView(nodes, replicas, k, []int{0, 0, 0, 0, 3, 4, 5})
		},
	} {
		web := fakeGroupsNodes(t, nodes, view)
		if sig := leadsSpread(hc, web, "tok", &Server{}); sig != "" {
			t.Errorf("%s: leads taken as spread (%q)", what, sig)
		}
	}
}
