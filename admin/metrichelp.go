package admin

// statsHelp explains each numeric key of `stats` and `stats-tube` in its
// metric's HELP, as beanstalkd's protocol.txt describes the key (the
// per-tube ones for the tube alone). TestEveryStatsKeyHasHelp checks that
// no key is left without.
var statsHelp = map[string]string{
	"current-jobs-urgent":      "Ready jobs with priority below 1024.",
	"current-jobs-ready":       "Jobs in the ready queue.",
	"current-jobs-reserved":    "Jobs reserved by clients.",
	"current-jobs-delayed":     "Delayed jobs.",
	"current-jobs-buried":      "Buried jobs.",
	"cmd-put":                  "put commands received.",
	"cmd-peek":                 "peek commands received.",
	"cmd-peek-ready":           "peek-ready commands received.",
	"cmd-peek-delayed":         "peek-delayed commands received.",
	"cmd-peek-buried":          "peek-buried commands received.",
	"cmd-reserve":              "reserve commands received.",
	"cmd-reserve-with-timeout": "reserve-with-timeout commands received.",
	"cmd-delete":               "delete commands received.",
	"cmd-release":              "release commands received.",
	"cmd-use":                  "use commands received.",
	"cmd-watch":                "watch commands received.",
	"cmd-ignore":               "ignore commands received.",
	"cmd-bury":                 "bury commands received.",
	"cmd-kick":                 "kick commands received.",
	"cmd-touch":                "touch commands received.",
	"cmd-stats":                "stats commands received.",
	"cmd-stats-job":            "stats-job commands received.",
	"cmd-stats-tube":           "stats-tube commands received.",
	"cmd-list-tubes":           "list-tubes commands received.",
	"cmd-list-tube-used":       "list-tube-used commands received.",
	"cmd-list-tubes-watched":   "list-tubes-watched commands received.",
	"cmd-pause-tube":           "pause-tube commands received.",
	"job-timeouts":             "Times a reserved job's TTR ran out and it went back to ready.",
	"total-jobs":               "Jobs created.",
	"max-job-size":             "The largest job body accepted, in bytes (-z).",
	"current-tubes":            "Tubes that exist.",
	"current-connections":      "Open client connections.",
	"current-producers":        "Open connections that have issued at least one put.",
	"current-workers":          "Open connections that have issued at least one reserve.",
	"current-waiting":          "Open connections waiting in a reserve.",
	"total-connections":        "Client connections accepted.",
	"pid":                      "The server's process id.",
	"rusage-utime":             "User CPU time of the process, in seconds.",
	"rusage-stime":             "System CPU time of the process, in seconds.",
	"uptime":                   "Seconds since the server started.",
	"binlog-oldest-index":      "Index of the oldest binlog file still needed.",
	"binlog-current-index":     "Index of the binlog file being written.",
	"binlog-records-migrated":  "Binlog records written again to free old files (compaction).",
	"binlog-records-written":   "Records written to the binlog.",
	"binlog-max-size":          "Size of each binlog file, in bytes (-s).",
	"binlog-failed":            "1 once a binlog write or fsync failed: changes are refused.",
	"draining":                 "1 in drain mode (SIGUSR1): puts are refused.",
	"job-memory-bytes":         "Memory charged against the ceiling (--max-job-memory), in bytes.",
	"job-memory-limit":         "The ceiling on memory clients can make the server hold (--max-job-memory), in bytes; 0: none.",
	"current-using":            "Open connections using the tube.",
	"current-watching":         "Open connections watching the tube.",
	"pause":                    "Seconds the tube was last paused for.",
	"pause-time-left":          "Seconds until the tube's pause ends.",
}

// helpFor is a key's HELP: its explanation, then the key it comes from.
func helpFor(cmd, key string) string {
	h, ok := statsHelp[key]
	if !ok {
		h = "The " + cmd + " key " + key + "."
	}
	return h + " (" + cmd + ": " + key + ")"
}
