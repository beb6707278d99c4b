package codec

import (
	"slices"
	"strconv"
)

// The YAML replies are fixed-format text, not general YAML: the key
// order, the number formats and which strings are double-quoted are what
// upstream 1.13's printf formats (STATS_FMT, STATS_TUBE_FMT, STATS_JOB_FMT
// and do_list_tubes) produce, and clients parse them by position as often as
// by key. Quoted strings are written as they are, without escaping, as
// upstream does; tube names cannot contain a quote or a backslash anyway.
//
// Each encoder appends the complete reply "OK <n>\r\n---\n...\n\r\n", where
// n counts the payload without its final CRLF. None allocates once dst has
// room for the reply: the payload is written first and then moved right to
// make room for the header, whose width depends on the payload's length.

// statsCmds is the cmd-* block of `stats`, in upstream's order (which is not
// protocol.txt's: cmd-touch comes after cmd-kick). reserve-job and kick-job
// are counted by upstream but never shown, so they have no entry here.
var statsCmds = [...]struct {
	key string
	op  Op
}{
	{"cmd-put: ", OpPut},
	{"cmd-peek: ", OpPeek},
	{"cmd-peek-ready: ", OpPeekReady},
	{"cmd-peek-delayed: ", OpPeekDelayed},
	{"cmd-peek-buried: ", OpPeekBuried},
	{"cmd-reserve: ", OpReserve},
	{"cmd-reserve-with-timeout: ", OpReserveWithTimeout},
	{"cmd-delete: ", OpDelete},
	{"cmd-release: ", OpRelease},
	{"cmd-use: ", OpUse},
	{"cmd-watch: ", OpWatch},
	{"cmd-ignore: ", OpIgnore},
	{"cmd-bury: ", OpBury},
	{"cmd-kick: ", OpKick},
	{"cmd-touch: ", OpTouch},
	{"cmd-stats: ", OpStats},
	{"cmd-stats-job: ", OpStatsJob},
	{"cmd-stats-tube: ", OpStatsTube},
	{"cmd-list-tubes: ", OpListTubes},
	{"cmd-list-tube-used: ", OpListTubeUsed},
	{"cmd-list-tubes-watched: ", OpListTubesWatched},
	{"cmd-pause-tube: ", OpPauseTube},
}

// yamlStart is the document marker every payload begins with.
const yamlStart = "---\n"

// AppendStats appends the complete reply to `stats`.
func AppendStats(dst []byte, s *ServerStats) []byte {
	start := len(dst)
	dst = append(dst, yamlStart...)
	dst = appendUint(dst, "current-jobs-urgent: ", s.CurrentJobsUrgent)
	dst = appendUint(dst, "current-jobs-ready: ", s.CurrentJobsReady)
	dst = appendUint(dst, "current-jobs-reserved: ", s.CurrentJobsReserved)
	dst = appendUint(dst, "current-jobs-delayed: ", s.CurrentJobsDelayed)
	dst = appendUint(dst, "current-jobs-buried: ", s.CurrentJobsBuried)
	for _, c := range statsCmds {
		dst = appendUint(dst, c.key, s.Cmd[c.op])
	}
	dst = appendUint(dst, "job-timeouts: ", s.JobTimeouts)
	dst = appendUint(dst, "total-jobs: ", s.TotalJobs)
	dst = appendUint(dst, "max-job-size: ", s.MaxJobSize)
	dst = appendUint(dst, "current-tubes: ", s.CurrentTubes)
	dst = appendUint(dst, "current-connections: ", s.CurrentConnections)
	dst = appendUint(dst, "current-producers: ", s.CurrentProducers)
	dst = appendUint(dst, "current-workers: ", s.CurrentWorkers)
	dst = appendUint(dst, "current-waiting: ", s.CurrentWaiting)
	dst = appendUint(dst, "total-connections: ", s.TotalConnections)
	dst = appendInt(dst, "pid: ", int64(s.PID))
	dst = appendQuoted(dst, "version: ", s.Version) // quoted in 1.12 too
	dst = appendRusage(dst, "rusage-utime: ", s.RusageUtimeSec, s.RusageUtimeUsec)
	dst = appendRusage(dst, "rusage-stime: ", s.RusageStimeSec, s.RusageStimeUsec)
	dst = appendUint(dst, "uptime: ", s.Uptime)
	dst = appendUint(dst, "binlog-oldest-index: ", s.BinlogOldestIndex)
	dst = appendUint(dst, "binlog-current-index: ", s.BinlogCurrentIndex)
	dst = appendUint(dst, "binlog-records-migrated: ", s.BinlogRecordsMigrated)
	dst = appendUint(dst, "binlog-records-written: ", s.BinlogRecordsWritten)
	dst = appendUint(dst, "binlog-max-size: ", s.BinlogMaxSize)
	if s.BinlogFailed {
		dst = appendString(dst, "binlog-failed: ", "true")
	}
	dst = appendString(dst, "draining: ", strconv.FormatBool(s.Draining))
	dst = appendString(dst, "id: ", s.ID) // the instance id is never quoted
	dst = appendQuoted(dst, "hostname: ", s.Hostname)
	dst = appendQuoted(dst, "os: ", s.OS)
	dst = appendQuoted(dst, "platform: ", s.Platform)
	dst = appendUint(dst, "job-memory-bytes: ", s.JobMemoryBytes)
	dst = appendUint(dst, "job-memory-limit: ", s.JobMemoryLimit)
	return frameOK(dst, start)
}

// AppendTubeStats appends the complete reply to `stats-tube`.
func AppendTubeStats(dst []byte, t *TubeStats) []byte {
	start := len(dst)
	dst = append(dst, yamlStart...)
	dst = appendQuoted(dst, "name: ", t.Name)
	dst = appendUint(dst, "current-jobs-urgent: ", t.CurrentJobsUrgent)
	dst = appendUint(dst, "current-jobs-ready: ", t.CurrentJobsReady)
	dst = appendUint(dst, "current-jobs-reserved: ", t.CurrentJobsReserved)
	dst = appendUint(dst, "current-jobs-delayed: ", t.CurrentJobsDelayed)
	dst = appendUint(dst, "current-jobs-buried: ", t.CurrentJobsBuried)
	dst = appendUint(dst, "total-jobs: ", t.TotalJobs)
	dst = appendUint(dst, "current-using: ", t.CurrentUsing)
	dst = appendUint(dst, "current-watching: ", t.CurrentWatching)
	dst = appendUint(dst, "current-waiting: ", t.CurrentWaiting)
	dst = appendUint(dst, "cmd-delete: ", t.CmdDelete)
	dst = appendUint(dst, "cmd-pause-tube: ", t.CmdPauseTube)
	dst = appendUint(dst, "pause: ", t.Pause)
	dst = appendUint(dst, "pause-time-left: ", t.PauseTimeLeft)
	return frameOK(dst, start)
}

// AppendJobStats appends the complete reply to `stats-job`.
func AppendJobStats(dst []byte, j *JobStats) []byte {
	start := len(dst)
	dst = append(dst, yamlStart...)
	dst = appendUint(dst, "id: ", j.ID)
	dst = appendQuoted(dst, "tube: ", j.Tube)
	dst = appendString(dst, "state: ", j.State)
	dst = appendUint(dst, "pri: ", uint64(j.Pri))
	dst = appendUint(dst, "age: ", j.Age)
	dst = appendUint(dst, "delay: ", j.Delay)
	dst = appendUint(dst, "ttr: ", j.TTR)
	dst = appendUint(dst, "time-left: ", j.TimeLeft)
	dst = appendUint(dst, "file: ", j.File)
	dst = appendUint(dst, "reserves: ", j.Reserves)
	dst = appendUint(dst, "timeouts: ", j.Timeouts)
	dst = appendUint(dst, "releases: ", j.Releases)
	dst = appendUint(dst, "buries: ", j.Buries)
	dst = appendUint(dst, "kicks: ", j.Kicks)
	return frameOK(dst, start)
}

// AppendTubeList appends the complete reply to `list-tubes` or
// `list-tubes-watched`: one "- <name>\n" line per tube, in the given order.
// Names are not quoted, in 1.13 either.
func AppendTubeList(dst []byte, names [][]byte) []byte {
	dst = slices.Grow(dst, TubeListSize(names))
	dst = AppendTubeListHead(dst, names)
	for _, name := range names {
		dst = AppendTubeListItem(dst, name)
	}
	return AppendTubeListEnd(dst)
}

// AppendTubeListHead, then AppendTubeListItem for each name, then
// AppendTubeListEnd append what AppendTubeList does, for a caller that
// writes a long list out a part at a time.
func AppendTubeListHead(dst []byte, names [][]byte) []byte {
	// The length is easy to know up front here, so no move is needed.
	dst = AppendOKHeader(dst, uint64(tubeListPayload(names)))
	return append(dst, yamlStart...)
}

// AppendTubeListItem appends one name's line of a tube list.
func AppendTubeListItem(dst, name []byte) []byte {
	dst = append(dst, "- "...)
	dst = append(dst, name...)
	return append(dst, '\n')
}

// AppendTubeListEnd ends a tube list.
func AppendTubeListEnd(dst []byte) []byte { return append(dst, crlf...) }

// TubeListSize is the length of AppendTubeList's reply for names.
func TubeListSize(names [][]byte) int {
	n := tubeListPayload(names)
	return len("OK ") + decimalLen(uint64(n)) + len(crlf) + n + len(crlf)
}

func tubeListPayload(names [][]byte) int {
	n := len(yamlStart)
	for _, name := range names {
		n += len("- \n") + len(name)
	}
	return n
}

// frameOK turns the payload dst[start:] into a complete reply: it appends
// the final CRLF and inserts "OK <n>\r\n" in front of the payload.
func frameOK(dst []byte, start int) []byte {
	n := len(dst) - start
	dst = append(dst, crlf...)
	end := len(dst)
	hl := len("OK ") + decimalLen(uint64(n)) + len(crlf)
	dst = slices.Grow(dst, hl)[:end+hl]
	copy(dst[start+hl:], dst[start:end]) // copy is a memmove: overlap is fine
	h := append(dst[start:start], "OK "...)
	h = strconv.AppendUint(h, uint64(n), 10)
	_ = append(h, crlf...) // writes exactly the hl bytes freed above
	return dst
}

// decimalLen is the number of digits of v in base 10.
func decimalLen(v uint64) int {
	n := 1
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}

// appendUint appends "<key><v>\n"; key carries its ": ".
func appendUint(dst []byte, key string, v uint64) []byte {
	dst = append(dst, key...)
	dst = strconv.AppendUint(dst, v, 10)
	return append(dst, '\n')
}

// appendInt appends "<key><v>\n" for a signed value.
func appendInt(dst []byte, key string, v int64) []byte {
	dst = append(dst, key...)
	dst = strconv.AppendInt(dst, v, 10)
	return append(dst, '\n')
}

// appendString appends "<key><v>\n" with v as it is.
func appendString[T string | []byte](dst []byte, key string, v T) []byte {
	dst = append(dst, key...)
	dst = append(dst, v...)
	return append(dst, '\n')
}

// appendQuoted appends "<key>\"<v>\"\n", 1.13's style for names and
// uname strings.
func appendQuoted[T string | []byte](dst []byte, key string, v T) []byte {
	dst = append(dst, key...)
	dst = append(dst, '"')
	dst = append(dst, v...)
	return append(dst, '"', '\n')
}

// appendRusage appends "<key><sec>.<usec>\n" as printf's "%d.%06d" does with
// upstream's (int) casts of the timeval fields.
func appendRusage(dst []byte, key string, sec, usec int64) []byte {
	dst = append(dst, key...)
	dst = strconv.AppendInt(dst, int64(int32(sec)), 10)
	dst = append(dst, '.')
	dst = appendZeroPadded(dst, int64(int32(usec)), 6)
	return append(dst, '\n')
}

// appendZeroPadded is printf's "%0<width>d": the sign, if any, counts
// towards the width and the zeros go between it and the digits.
func appendZeroPadded(dst []byte, v int64, width int) []byte {
	var u uint64
	if v < 0 {
		dst = append(dst, '-')
		width--
		u = -uint64(v)
	} else {
		u = uint64(v)
	}
	for pad := width - decimalLen(u); pad > 0; pad-- {
		dst = append(dst, '0')
	}
	return strconv.AppendUint(dst, u, 10)
}
