package admin

import (
	"testing"

	"github.com/beanpole/beanpole/codec"
	"github.com/prometheus/client_golang/prometheus"
)

// eachStat reads back what codec writes: numbers, booleans as 0/1, and
// strings without their quotes, in the reply's order.
func TestEachStatReadsTheStatsReply(t *testing.T) {
	st := &codec.ServerStats{CurrentJobsReady: 3, Version: "0.1.0", Hostname: "h", Draining: true,
		RusageUtimeSec: 1, RusageUtimeUsec: 500000, BinlogFailed: true}
	st.Cmd[codec.OpPut] = 7
	got := map[string]float64{}
	strs := map[string]string{}
	var order []string
	eachStat(codec.AppendStats(nil, st), func(key string, v float64, s string, isNum bool) {
		order = append(order, key)
		if isNum {
			got[key] = v
		} else {
			strs[key] = s
		}
	})
	for k, want := range map[string]float64{"current-jobs-ready": 3, "cmd-put": 7, "draining": 1,
		"binlog-failed": 1, "rusage-utime": 1.5} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	if strs["version"] != "0.1.0" || strs["hostname"] != "h" {
		t.Errorf("strings: %v", strs)
	}
	if order[0] != "current-jobs-urgent" || order[len(order)-1] != "job-memory-limit" {
		t.Errorf("keys out of order: first %s, last %s", order[0], order[len(order)-1])
	}
}

func TestCumulativeKeysAreCounters(t *testing.T) {
	for key, want := range map[string]prometheus.ValueType{
		"cmd-put": prometheus.CounterValue, "total-jobs": prometheus.CounterValue,
		"job-timeouts": prometheus.CounterValue, "rusage-stime": prometheus.CounterValue,
		"binlog-records-written": prometheus.CounterValue, "current-jobs-ready": prometheus.GaugeValue,
		"uptime": prometheus.GaugeValue, "pause-time-left": prometheus.GaugeValue,
	} {
		if got := valueType(key); got != want {
			t.Errorf("%s: %v, want %v", key, got, want)
		}
	}
}
