// Package codec is the beanstalk text protocol: command-line parsing with
// beanstalkd's exact rules, reply encoding and the YAML stats payloads.
// Everything here is a pure function over byte slices: no I/O, no
// allocation on the hot path, easy to fuzz.
package codec

// Op identifies a parsed command. The order of the constants is the order in
// which upstream's which_cmd tries its prefixes; Parse relies on it.
// beanpole's own commands, for internal connections only (Internal), follow
// upstream's: none of upstream's prefixes starts with theirs' "be".
type Op uint8

const (
	OpNone Op = iota
	OpPut
	OpPeek
	OpPeekReady
	OpPeekDelayed
	OpPeekBuried
	OpReserveWithTimeout
	OpReserveJob
	OpReserve
	OpDelete
	OpRelease
	OpBury
	OpKick
	OpKickJob
	OpTouch
	OpStatsJob
	OpStatsTube
	OpStats
	OpUse
	OpWatch
	OpIgnore
	OpListTubesWatched
	OpListTubeUsed
	OpListTubes
	OpQuit
	OpPauseTube
	// beanpole-cancel-wait: cancels the internal connection's parked
	// reserve (see the loop package).
	OpCancelWait
	// beanpole-unreserve <id>: gives back a job the internal connection
	// reserved, counting no release.
	OpUnreserve
	// beanpole-peek-watched: the job a reserve would take now from the
	// connection's watched tubes, without reserving it.
	OpPeekWatched
	NumOps
)

// Internal reports whether op is one of beanpole's own commands, which
// only internal connections (a router's, loop.Server.ServeInternal) may
// use: to any other connection they are unknown, as they are to upstream.
func (op Op) Internal() bool { return op >= OpCancelWait && op < NumOps }

// CancelWaitLine is the whole line of beanpole-cancel-wait.
const CancelWaitLine = cancelWait + "\r\n"

const cancelWait = "beanpole-cancel-wait"

// Status is the outcome of parsing one command line.
type Status uint8

const (
	// OK: Command holds a well-formed command.
	OK Status = iota
	// BadFormat: the command was recognised but its arguments are wrong.
	// Reply BAD_FORMAT; a put line in this state does not consume a body.
	BadFormat
	// Unknown: no command matched. Reply UNKNOWN_COMMAND.
	Unknown
	// PutTrailingGarbage: a put whose four numbers parsed but which has
	// trailing bytes after <bytes>. Upstream counts it in cmd-put and checks
	// the size limit first (JOB_TOO_BIG after discarding bytes+2), and only
	// then answers BAD_FORMAT without consuming a body.
	PutTrailingGarbage
	// PauseTubeBadName: a pause-tube whose name run and delay parsed but
	// whose name is not a valid tube name (it starts with '-', or is longer
	// than 200 bytes). Upstream increments cmd-pause-tube before it checks
	// the name, so the caller counts the command, then answers BAD_FORMAT.
	// Tube and Delay are filled. Any other malformed pause-tube is BadFormat.
	PauseTubeBadName
)

// Command is one parsed command line. Tube aliases the parsed line and is
// only valid while that line is.
type Command struct {
	Op      Op
	ID      uint64 // peek, reserve-job, delete, release, bury, kick-job, touch, stats-job, beanpole-unreserve
	Pri     uint32 // put, release, bury
	Delay   uint32 // put, release, pause-tube (seconds)
	TTR     uint32 // put (seconds, as given: the server raises 0 to 1)
	Bytes   uint32 // put body length, without the trailing CRLF
	Timeout uint32 // reserve-with-timeout (seconds, <= INT_MAX)
	Bound   uint32 // kick (strtoul semantics, truncated to 32 bits)
	Tube    []byte // use, watch, ignore, stats-tube, pause-tube
}
