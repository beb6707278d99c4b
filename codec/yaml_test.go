package codec

import (
	"fmt"
	"strings"
	"testing"
)

// The expected replies below are beanstalkd 1.12's, captured on the wire,
// with the strings 1.13 quotes (name, tube, hostname, os, platform) put in
// double quotes and the OK length grown to match; `stats` also ends with
// beanpole's two job-memory keys.

// sampleStats holds the values of the captured 1.12 `stats` reply.
func sampleStats() *ServerStats {
	s := &ServerStats{
		CurrentJobsUrgent: 1, CurrentJobsReady: 1,
		JobTimeouts: 0, TotalJobs: 1, MaxJobSize: 65535, CurrentTubes: 1,
		CurrentConnections: 1, CurrentProducers: 1, TotalConnections: 1,
		PID: 16788, Version: "1.12",
		RusageUtimeSec: 0, RusageUtimeUsec: 0,
		RusageStimeSec: 0, RusageStimeUsec: 12148,
		Uptime: 3, BinlogMaxSize: 10485760,
		ID: "019d2b8d3f9dd263", Hostname: "vm", OS: "#1 SMP PREEMPT_DYNAMIC @0", Platform: "x86_64",
		JobMemoryBytes: 74032, JobMemoryLimit: 8000000,
	}
	s.Cmd[OpPut] = 1
	s.Cmd[OpStats] = 1
	s.Cmd[OpStatsJob] = 1
	s.Cmd[OpStatsTube] = 1
	s.Cmd[OpListTubes] = 1
	return s
}

const sampleStatsReply = "OK 1012\r\n---\ncurrent-jobs-urgent: 1\ncurrent-jobs-ready: 1\ncurrent-jobs-reserved: 0\n" +
	"current-jobs-delayed: 0\ncurrent-jobs-buried: 0\ncmd-put: 1\ncmd-peek: 0\ncmd-peek-ready: 0\n" +
	"cmd-peek-delayed: 0\ncmd-peek-buried: 0\ncmd-reserve: 0\ncmd-reserve-with-timeout: 0\ncmd-delete: 0\n" +
	"cmd-release: 0\ncmd-use: 0\ncmd-watch: 0\ncmd-ignore: 0\ncmd-bury: 0\ncmd-kick: 0\ncmd-touch: 0\n" +
	"cmd-stats: 1\ncmd-stats-job: 1\ncmd-stats-tube: 1\ncmd-list-tubes: 1\ncmd-list-tube-used: 0\n" +
	"cmd-list-tubes-watched: 0\ncmd-pause-tube: 0\njob-timeouts: 0\ntotal-jobs: 1\nmax-job-size: 65535\n" +
	"current-tubes: 1\ncurrent-connections: 1\ncurrent-producers: 1\ncurrent-workers: 0\ncurrent-waiting: 0\n" +
	"total-connections: 1\npid: 16788\nversion: \"1.12\"\nrusage-utime: 0.000000\nrusage-stime: 0.012148\n" +
	"uptime: 3\nbinlog-oldest-index: 0\nbinlog-current-index: 0\nbinlog-records-migrated: 0\n" +
	"binlog-records-written: 0\nbinlog-max-size: 10485760\ndraining: false\nid: 019d2b8d3f9dd263\n" +
	"hostname: \"vm\"\nos: \"#1 SMP PREEMPT_DYNAMIC @0\"\nplatform: \"x86_64\"\n" +
	"job-memory-bytes: 74032\njob-memory-limit: 8000000\n\r\n"

func TestAppendStats(t *testing.T) {
	checkReply(t, "stats", AppendStats(nil, sampleStats()), sampleStatsReply)
}

// Every cmd-* key shows its own counter; reserve-job and kick-job are
// counted by the server but never shown.
func TestAppendStatsCmdCounters(t *testing.T) {
	s := sampleStats()
	for op := OpNone + 1; op < NumOps; op++ {
		s.Cmd[op] = 1000 + uint64(op)
	}
	got := string(AppendStats(nil, s))
	hidden := map[Op]bool{OpReserveJob: true, OpKickJob: true, OpQuit: true, OpCancelWait: true, OpUnreserve: true, OpPeekWatched: true}
	for op := OpNone + 1; op < NumOps; op++ {
		line := fmt.Sprintf("\ncmd-%s: %d\n", op, 1000+uint64(op))
		if hidden[op] == strings.Contains(got, line) {
			t.Errorf("stats for %v: contains %q = %v", op, line, !hidden[op])
		}
	}
	if strings.Contains(got, "reserve-job") || strings.Contains(got, "kick-job") {
		t.Errorf("stats shows a reserve-job or kick-job counter:\n%s", got)
	}
}

func TestAppendStatsFields(t *testing.T) {
	s := sampleStats()
	s.Draining = true
	s.RusageUtimeSec, s.RusageUtimeUsec = 12, 999999
	s.RusageStimeSec, s.RusageStimeUsec = 3, 5
	s.Version = "1.13+beanpole"
	s.BinlogOldestIndex, s.BinlogCurrentIndex = 4, 7
	s.BinlogRecordsMigrated, s.BinlogRecordsWritten = 46, 1234
	got := string(AppendStats(nil, s))
	for _, want := range []string{
		"\ndraining: true\n", "\nrusage-utime: 12.999999\n", "\nrusage-stime: 3.000005\n",
		"\nversion: \"1.13+beanpole\"\n", "\nbinlog-oldest-index: 4\n", "\nbinlog-current-index: 7\n",
		"\nbinlog-records-migrated: 46\n", "\nbinlog-records-written: 1234\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("stats lacks %q:\n%s", want, got)
		}
	}
	checkFraming(t, got)
}

// printf's %06d with the sign inside the width, as upstream would print a
// (never seen) negative microsecond count.
func TestAppendZeroPadded(t *testing.T) {
	for _, tc := range []struct {
		v    int64
		want string
	}{{0, "000000"}, {5, "000005"}, {999999, "999999"}, {1234567, "1234567"}, {-5, "-00005"}, {-123456, "-123456"}} {
		if got := string(appendZeroPadded(nil, tc.v, 6)); got != tc.want {
			t.Errorf("appendZeroPadded(%d) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

func TestAppendTubeStats(t *testing.T) {
	ts := &TubeStats{
		Name: []byte("default"), CurrentJobsUrgent: 1, CurrentJobsReady: 1,
		TotalJobs: 1, CurrentUsing: 1, CurrentWatching: 1,
	}
	checkReply(t, "stats-tube", AppendTubeStats(nil, ts),
		"OK 267\r\n---\nname: \"default\"\ncurrent-jobs-urgent: 1\ncurrent-jobs-ready: 1\n"+
			"current-jobs-reserved: 0\ncurrent-jobs-delayed: 0\ncurrent-jobs-buried: 0\ntotal-jobs: 1\n"+
			"current-using: 1\ncurrent-watching: 1\ncurrent-waiting: 0\ncmd-delete: 0\ncmd-pause-tube: 0\n"+
			"pause: 0\npause-time-left: 0\n\r\n")

	// Field order with every value distinct.
	ts = &TubeStats{
		Name: []byte("tubea"), CurrentJobsUrgent: 1, CurrentJobsReady: 2, CurrentJobsReserved: 3,
		CurrentJobsDelayed: 4, CurrentJobsBuried: 5, TotalJobs: 6, CurrentUsing: 7,
		CurrentWatching: 8, CurrentWaiting: 9, CmdDelete: 10, CmdPauseTube: 11, Pause: 12, PauseTimeLeft: 13,
	}
	checkReply(t, "stats-tube", AppendTubeStats(nil, ts),
		"OK 269\r\n---\nname: \"tubea\"\ncurrent-jobs-urgent: 1\ncurrent-jobs-ready: 2\n"+
			"current-jobs-reserved: 3\ncurrent-jobs-delayed: 4\ncurrent-jobs-buried: 5\ntotal-jobs: 6\n"+
			"current-using: 7\ncurrent-watching: 8\ncurrent-waiting: 9\ncmd-delete: 10\ncmd-pause-tube: 11\n"+
			"pause: 12\npause-time-left: 13\n\r\n")
}

func TestAppendJobStats(t *testing.T) {
	js := &JobStats{ID: 1, Tube: []byte("default"), State: "ready", TTR: 10}
	checkReply(t, "stats-job", AppendJobStats(nil, js),
		"OK 146\r\n---\nid: 1\ntube: \"default\"\nstate: ready\npri: 0\nage: 0\ndelay: 0\nttr: 10\n"+
			"time-left: 0\nfile: 0\nreserves: 0\ntimeouts: 0\nreleases: 0\nburies: 0\nkicks: 0\n\r\n")

	js = &JobStats{
		ID: 18446744073709551615, Tube: []byte("t"), State: "reserved", Pri: 4294967295,
		Age: 2, Delay: 3, TTR: 4, TimeLeft: 5, File: 6, Reserves: 7, Timeouts: 8, Releases: 9, Buries: 10, Kicks: 11,
	}
	checkReply(t, "stats-job", AppendJobStats(nil, js),
		"OK 172\r\n---\nid: 18446744073709551615\ntube: \"t\"\nstate: reserved\npri: 4294967295\nage: 2\n"+
			"delay: 3\nttr: 4\ntime-left: 5\nfile: 6\nreserves: 7\ntimeouts: 8\nreleases: 9\nburies: 10\nkicks: 11\n\r\n")
}

func TestAppendTubeList(t *testing.T) {
	checkReply(t, "list-tubes", AppendTubeList(nil, [][]byte{[]byte("default")}),
		"OK 14\r\n---\n- default\n\r\n")
	// upstream's testserv.c case 52.
	checkReply(t, "list-tubes", AppendTubeList(nil, [][]byte{[]byte("default"), []byte("w"), []byte("u")}),
		"OK 22\r\n---\n- default\n- w\n- u\n\r\n")
	checkReply(t, "list-tubes", AppendTubeList(nil, nil), "OK 4\r\n---\n\r\n")
	long := strings.Repeat("x", 200)
	checkReply(t, "list-tubes", AppendTubeList(nil, [][]byte{[]byte(long)}),
		"OK 207\r\n---\n- "+long+"\n\r\n")
}

// The encoders append: what dst held stays in front, in every case where
// the payload had to be moved right for its header.
func TestYAMLAppendsAfterExisting(t *testing.T) {
	prefix := "INSERTED 1\r\n"
	for name, f := range map[string]func([]byte) []byte{
		"stats":      func(b []byte) []byte { return AppendStats(b, sampleStats()) },
		"stats-tube": func(b []byte) []byte { return AppendTubeStats(b, &TubeStats{Name: []byte("x")}) },
		"stats-job":  func(b []byte) []byte { return AppendJobStats(b, &JobStats{Tube: []byte("x"), State: "ready"}) },
		"list-tubes": func(b []byte) []byte { return AppendTubeList(b, [][]byte{[]byte("x")}) },
	} {
		for _, c := range []int{len(prefix), 4096} { // must grow / has room
			dst := append(make([]byte, 0, c), prefix...)
			alone := string(f(nil))
			got := string(f(dst))
			if got != prefix+alone {
				t.Errorf("%s (cap %d): got %q, want %q", name, c, got, prefix+alone)
			}
		}
	}
}

func TestYAMLAllocs(t *testing.T) {
	s, ts := sampleStats(), &TubeStats{Name: []byte("default")}
	js := &JobStats{Tube: []byte("default"), State: "ready"}
	names := [][]byte{[]byte("default"), []byte("foo")}
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() {
		b := AppendStats(buf[:0], s)
		b = AppendTubeStats(b, ts)
		b = AppendJobStats(b, js)
		_ = AppendTubeList(b, names)
	}); n != 0 {
		t.Fatalf("YAML encoders allocate: %v allocs per run", n)
	}
}

// checkReply compares a whole framed reply and its OK length.
func checkReply(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	if string(got) != want {
		t.Errorf("%s:\n got %q\nwant %q", what, got, want)
	}
	checkFraming(t, string(got))
}

// checkFraming checks "OK <n>\r\n<n bytes>\r\n" with the payload in the
// "---\n" + "key: value\n"* shape.
func checkFraming(t *testing.T, reply string) {
	t.Helper()
	var n int
	if _, err := fmt.Sscanf(reply, "OK %d\r\n", &n); err != nil {
		t.Fatalf("no OK header in %q", reply)
	}
	hdr := fmt.Sprintf("OK %d\r\n", n)
	body := reply[len(hdr):]
	if len(body) != n+2 || !strings.HasSuffix(body, "\n\r\n") || !strings.HasPrefix(body, "---\n") {
		t.Errorf("bad framing: header says %d, payload+CRLF is %d bytes: %q", n, len(body), reply)
	}
}
