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

// The tube series are read from the struct, not from the reply: they must
// be the reply's numeric keys, in its order, with its values.
func TestTubeKeysAreStatsTube(t *testing.T) {
	st := &codec.TubeStats{Name: []byte("t"), CurrentJobsUrgent: 1, CurrentJobsReady: 2, CurrentJobsReserved: 3,
		CurrentJobsDelayed: 4, CurrentJobsBuried: 5, TotalJobs: 6, CurrentUsing: 7, CurrentWatching: 8,
		CurrentWaiting: 9, CmdDelete: 10, CmdPauseTube: 11, Pause: 12, PauseTimeLeft: 13}
	var keys []string
	var vals []float64
	eachStat(codec.AppendTubeStats(nil, st), func(key string, v float64, _ string, isNum bool) {
		if isNum {
			keys = append(keys, key)
			vals = append(vals, v)
		}
	})
	if len(keys) != len(tubeKeys) {
		t.Fatalf("stats-tube has %d numeric keys, tubeKeys %d", len(keys), len(tubeKeys))
	}
	for i, k := range tubeKeys {
		if k.key != keys[i] || float64(k.get(st)) != vals[i] {
			t.Errorf("tubeKeys[%d] = %s %v, stats-tube has %s %v", i, k.key, k.get(st), keys[i], vals[i])
		}
	}
}

// Every numeric key of stats and stats-tube has a HELP text of its own.
func TestEveryStatsKeyHasHelp(t *testing.T) {
	st := codec.ServerStats{BinlogFailed: true}
	eachStat(codec.AppendStats(nil, &st), func(key string, _ float64, _ string, isNum bool) {
		if _, ok := statsHelp[key]; isNum && !ok {
			t.Errorf("stats key %s has no help", key)
		}
	})
	for _, k := range tubeKeys {
		if _, ok := statsHelp[k.key]; !ok {
			t.Errorf("stats-tube key %s has no help", k.key)
		}
	}
}
