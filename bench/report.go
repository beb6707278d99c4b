package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"unicode/utf8"
)

// fmtNum formats a figure with three-ish significant digits and k/M/G
// suffixes; NaN prints as "-".
func fmtNum(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "-"
	}
	a := math.Abs(x)
	switch {
	case a >= 1e9:
		return fmt.Sprintf("%.2fG", x/1e9)
	case a >= 1e6:
		return fmt.Sprintf("%.2fM", x/1e6)
	case a >= 1e5:
		return fmt.Sprintf("%.0fk", x/1e3)
	case a >= 1e4:
		return fmt.Sprintf("%.1fk", x/1e3)
	case a >= 100:
		return fmt.Sprintf("%.0f", x)
	case a >= 10:
		return fmt.Sprintf("%.1f", x)
	case a == 0:
		return "0"
	}
	return fmt.Sprintf("%.2f", x)
}

// formatTable lays out cells in aligned columns; right[i] right-aligns
// column i. Widths count runes.
func formatTable(header []string, rows [][]string, right []bool) string {
	w := make([]int, len(header))
	for i, h := range header {
		w[i] = utf8.RuneCountInString(h)
	}
	for _, r := range rows {
		for i, c := range r {
			if i < len(w) {
				w[i] = max(w[i], utf8.RuneCountInString(c))
			}
		}
	}
	var b strings.Builder
	line := func(cells []string) {
		for i := range w {
			c := ""
			if i < len(cells) {
				c = cells[i]
			}
			pad := strings.Repeat(" ", w[i]-utf8.RuneCountInString(c))
			if i > 0 {
				b.WriteString("  ")
			}
			if i < len(right) && right[i] {
				b.WriteString(pad + c)
			} else if i == len(w)-1 {
				b.WriteString(c)
			} else {
				b.WriteString(c + pad)
			}
		}
		b.WriteString("\n")
	}
	line(header)
	total := 0
	for _, x := range w {
		total += x
	}
	b.WriteString(strings.Repeat("-", total+2*(len(w)-1)) + "\n")
	for _, r := range rows {
		line(r)
	}
	return b.String()
}

// clientBound is the client CPU share (% of one core) above which a row is
// flagged: the single-threaded load generator may then be the bottleneck.
const clientBound = 90

// cell returns the primary value cell of one contender.
func cell(cr *CtResult, key string) (string, float64) {
	switch {
	case cr == nil:
		return "-", math.NaN()
	case cr.Failed:
		return "FAIL", math.NaN()
	case cr.NA != "":
		return "n/a", math.NaN()
	}
	v, ok := cr.Median[key]
	if !ok {
		return "-", math.NaN()
	}
	return fmtNum(v), v
}

func pair(a, b *CtResult, key string) string {
	get := func(cr *CtResult) string {
		if cr == nil || cr.Median == nil {
			return "-"
		}
		v, ok := cr.Median[key]
		if !ok {
			return "-"
		}
		return fmtNum(v)
	}
	x, y := get(a), get(b)
	if x == "-" && y == "-" {
		return "-"
	}
	return x + " / " + y
}

// ratio is beanpole ÷ beanstalkd, NaN when either is missing.
func ratio(a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return math.NaN()
	}
	return a / b
}

func fmtRatio(r float64) string {
	if math.IsNaN(r) {
		return "n/a"
	}
	return fmt.Sprintf("%.2fx", r)
}

// tableRows builds the report cells, one row per RowDef.
func tableRows(results []*VarResult) ([]string, [][]string, []bool) {
	header := []string{"scenario", "unit", "beanpole", "beanstalkd", "bp/bs", "p50 µs", "p99 µs", "p99.9 µs", "client CPU %", "server CPU µs/op"}
	right := []bool{false, false, true, true, true, true, true, true, true, true}
	var rows [][]string
	for _, vr := range results {
		bp, bs := vr.Res[0], vr.Res[1]
		for _, rd := range vr.V.Rows {
			key := rd.Key + rd.Metric
			ca, va := cell(bp, key)
			cb, vb := cell(bs, key)
			unit := rd.Unit + " (lo)"
			if rd.Higher {
				unit = rd.Unit + " (hi)"
			}
			row := []string{rd.Title, unit, ca, cb, fmtRatio(ratio(va, vb)), "-", "-", "-", "-", "-"}
			if rd.Lat {
				row[5] = pair(bp, bs, rd.Key+"p50")
				row[6] = pair(bp, bs, rd.Key+"p99")
				row[7] = pair(bp, bs, rd.Key+"p999")
			}
			if !rd.NoCPU {
				row[8] = pair(bp, bs, rd.Key+"cpu")
				if clientBusy(bp, rd.Key) || clientBusy(bs, rd.Key) {
					row[8] += " *"
				}
				row[9] = pair(bp, bs, rd.Key+"srvus")
			}
			rows = append(rows, row)
		}
	}
	return header, rows, right
}

func clientBusy(cr *CtResult, key string) bool {
	if cr == nil || cr.Median == nil {
		return false
	}
	return cr.Median[key+"cpu"] >= clientBound
}

// renderTable returns the whole text report.
func renderTable(results []*VarResult, meta *Meta) string {
	var b strings.Builder
	header, rows, right := tableRows(results)
	fmt.Fprintf(&b, "\nbeanpole vs beanstalkd — %s; medians of %d reps; %v windows after %v warm-up; pinning: %s\n",
		meta.Started, meta.Reps, meta.Options.Duration, meta.Options.Warmup, meta.Pinning)
	fmt.Fprintf(&b, "beanpole: %s (%s)\nbeanstalkd: %s (%s)\n%d CPUs, Linux %s, %s, open-file limit %d\n\n",
		meta.Paths["beanpole"], meta.Versions["beanpole"], meta.Paths["beanstalkd"], meta.Versions["beanstalkd"],
		meta.CPUs, meta.Kernel, meta.Go, meta.NoFile)
	b.WriteString(formatTable(header, rows, right))
	b.WriteString("\n(hi)/(lo): higher/lower is better; bp/bs = beanpole ÷ beanstalkd. Pairs are beanpole / beanstalkd.\n")
	b.WriteString("Latency is per command unless the scenario says otherwise; client CPU is the load generator's own\n")
	fmt.Fprintf(&b, "CPU (%% of one core, all threads); * = client above %d%%, it may be the bottleneck.\n", clientBound)

	var notes []string
	for _, vr := range results {
		var parts []string
		for ci, cr := range vr.Res {
			if n := cr.Median["tcp_retrans"]; n > 0 || cr.Median["net_drops"] > 0 {
				parts = append(parts, fmt.Sprintf("%s %s drops/%s retransmits", vr.V.names()[ci],
					fmtNum(cr.Median["net_drops"]), fmtNum(n)))
			}
		}
		if len(parts) > 0 {
			notes = append(notes, fmt.Sprintf("loopback: %s (median per run, system-wide): %s", vr.V.Name, strings.Join(parts, ", ")))
		}
	}
	if len(notes) > 0 {
		b.WriteString("loopback: packet drops (netdev_max_backlog overflow) cause TCP retransmits that stall a connection\n")
		b.WriteString("for a retransmission timeout; they inflate p99/p99.9 and fan-out times of the runs listed below.\n")
	}
	for _, vr := range results {
		for ci, cr := range vr.Res {
			name := vr.V.names()[ci]
			if cr.NA != "" {
				notes = append(notes, fmt.Sprintf("n/a: %s on %s: %s", vr.V.Name, name, oneLine(cr.NA)))
			}
			for _, e := range cr.Errors {
				notes = append(notes, fmt.Sprintf("FAILED: %s on %s: %s", vr.V.Name, name, oneLine(e)))
			}
		}
	}
	sort.Strings(notes)
	for _, n := range notes {
		b.WriteString(n + "\n")
	}
	if strings.HasPrefix(meta.Versions["beanstalkd"], "beanstalkd ") { // the targets are against C
		b.WriteString(renderTargets(results, int(meta.NoFile)-fdMargin-2, meta.Options.PinAll))
	}
	return b.String()
}
