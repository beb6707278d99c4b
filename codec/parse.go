package codec

import (
	"bytes"
	"math"
	"strconv"
)

// prefixes is upstream's which_cmd table: the byte string each Op is
// recognised by, as a case-sensitive prefix of the line. The Op constants are
// declared in which_cmd's order, so walking ops upwards is trying prefixes in
// upstream's order, which decides e.g. that "stats-job" (no space) is a
// malformed "stats" and "quitx" is a quit. Note the trailing spaces: "put"
// alone matches nothing, "put " is a put. beanpole's own commands come last
// and follow the same rules.
var prefixes = [NumOps]string{
	OpPut:                "put ",
	OpPeek:               "peek ",
	OpPeekReady:          "peek-ready",
	OpPeekDelayed:        "peek-delayed",
	OpPeekBuried:         "peek-buried",
	OpReserveWithTimeout: "reserve-with-timeout ",
	OpReserveJob:         "reserve-job ",
	OpReserve:            "reserve",
	OpDelete:             "delete ",
	OpRelease:            "release ",
	OpBury:               "bury ",
	OpKick:               "kick ",
	OpKickJob:            "kick-job ",
	OpTouch:              "touch ",
	OpStatsJob:           "stats-job ",
	OpStatsTube:          "stats-tube ",
	OpStats:              "stats",
	OpUse:                "use ",
	OpWatch:              "watch ",
	OpIgnore:             "ignore ",
	OpListTubesWatched:   "list-tubes-watched",
	OpListTubeUsed:       "list-tube-used",
	OpListTubes:          "list-tubes",
	OpQuit:               "quit",
	OpPauseTube:          "pause-tube",
	OpCancelWait:         cancelWait,
	OpUnreserve:          "beanpole-unreserve ",
	OpPeekWatched:        "beanpole-peek-watched",
}

// byFirstByte lists, for each possible first byte of a line, the ops whose
// prefix starts with it, in which_cmd order. Two prefixes with different
// first bytes can never both match, so trying only this short list gives the
// same answer as upstream's 25 strncmp calls at a fraction of the cost.
var byFirstByte = func() (t [256][]Op) {
	for op := OpNone + 1; op < NumOps; op++ {
		c := prefixes[op][0]
		t[c] = append(t[c], op)
	}
	return t
}()

// String is the command's name as it appears on the wire (without the
// trailing space some prefixes carry), or "unknown" for OpNone.
func (op Op) String() string {
	if op == OpNone || op >= NumOps {
		return "unknown"
	}
	p := prefixes[op]
	if p[len(p)-1] == ' ' {
		p = p[:len(p)-1]
	}
	return p
}

// whichCmd is upstream's which_cmd: the first op whose prefix starts line.
func whichCmd(line []byte) Op {
	if len(line) == 0 {
		return OpNone
	}
	for _, op := range byFirstByte[line[0]] {
		p := prefixes[op]
		if len(line) >= len(p) && string(line[:len(p)]) == p {
			return op
		}
	}
	return OpNone
}

// Parse parses one command line, given without its CRLF, into cmd with
// upstream beanstalkd's exact rules. The caller has
// already found the CRLF and enforced the 224-byte line limit.
//
// cmd is overwritten. On OK (and on PutTrailingGarbage and PauseTubeBadName,
// see those) the fields that belong to cmd.Op are filled. On BadFormat cmd.Op
// is the recognised command (OpNone for an embedded NUL), for logging only:
// upstream counts nothing and replies BAD_FORMAT; the other fields are then
// unspecified. On Unknown cmd.Op is OpNone. cmd.Tube aliases line,
// with its capacity clipped so appending to it cannot write into line.
//
// Parse does not allocate.
func Parse(line []byte, cmd *Command) Status {
	*cmd = Command{}
	// Upstream NUL-terminates the line and compares strlen with the length
	// it read ("check for possible maliciousness"): an embedded NUL is
	// BAD_FORMAT before the command is even looked at.
	if bytes.IndexByte(line, 0) >= 0 {
		return BadFormat
	}
	op := whichCmd(line)
	cmd.Op = op
	args := line[len(prefixes[op]):]
	var ok bool

	switch op {
	case OpNone:
		return Unknown

	case OpPut:
		// pri, delay and ttr may be followed by anything readU32 will skip
		// or reject next; <bytes> is read without the end check, because
		// upstream counts the put and applies the size limit before it
		// looks for trailing garbage.
		var rest []byte
		if cmd.Pri, rest, ok = readU32(args); !ok {
			return BadFormat
		}
		if cmd.Delay, rest, ok = readU32(rest); !ok {
			return BadFormat
		}
		if cmd.TTR, rest, ok = readU32(rest); !ok {
			return BadFormat
		}
		if cmd.Bytes, rest, ok = readU32(rest); !ok {
			return BadFormat
		}
		if len(rest) != 0 {
			return PutTrailingGarbage
		}
		return OK

	case OpPeekReady, OpPeekDelayed, OpPeekBuried, OpReserve, OpStats,
		OpListTubesWatched, OpListTubeUsed, OpListTubes, OpCancelWait, OpPeekWatched:
		// Commands without arguments: upstream compares the whole line
		// length with the prefix, so "stats " and "statsx" are BAD_FORMAT.
		if len(args) != 0 {
			return BadFormat
		}
		return OK

	case OpPeek, OpReserveJob, OpDelete, OpKickJob, OpTouch, OpStatsJob, OpUnreserve:
		var rest []byte
		cmd.ID, rest, ok = readU64(args)
		if !strict(rest, ok) {
			return BadFormat
		}
		return OK

	case OpReserveWithTimeout:
		// 1.13: read_u32 with an end pointer that is never checked, so
		// "5abc" and "5 6" mean 5; the timeout is then an int.
		cmd.Timeout, _, ok = readU32(args)
		if !ok || cmd.Timeout > math.MaxInt32 {
			return BadFormat
		}
		return OK

	case OpRelease:
		var rest []byte
		if cmd.ID, rest, ok = readU64(args); !ok {
			return BadFormat
		}
		if cmd.Pri, rest, ok = readU32(rest); !ok {
			return BadFormat
		}
		cmd.Delay, rest, ok = readU32(rest)
		if !strict(rest, ok) {
			return BadFormat
		}
		return OK

	case OpBury:
		var rest []byte
		if cmd.ID, rest, ok = readU64(args); !ok {
			return BadFormat
		}
		cmd.Pri, rest, ok = readU32(rest)
		if !strict(rest, ok) {
			return BadFormat
		}
		return OK

	case OpKick:
		if cmd.Bound, ok = readKickBound(args); !ok {
			return BadFormat
		}
		return OK

	case OpUse, OpWatch, OpIgnore, OpStatsTube:
		// The name is everything after the single space of the prefix:
		// a second space, a trailing space or a tab makes it invalid.
		if !ValidTubeName(args) {
			return BadFormat
		}
		cmd.Tube = args[:len(args):len(args)]
		return OK

	case OpQuit:
		// Only the prefix matters: "quitx" and "quit now" quit too.
		return OK

	case OpPauseTube:
		// No space in the prefix: "pause-tubefoo 10" pauses foo.
		name, rest, ok := readTubeName(args)
		if !ok {
			return BadFormat
		}
		cmd.Delay, rest, ok = readU32(rest)
		if !strict(rest, ok) {
			cmd.Delay = 0
			return BadFormat
		}
		cmd.Tube = name
		if !ValidTubeName(name) {
			return PauseTubeBadName
		}
		return OK
	}
	// Unreachable: every op has a case above. Kept so that adding an Op
	// without parsing it fails closed.
	*cmd = Command{}
	return Unknown
}

// String names the status, for logs and test failures.
func (s Status) String() string {
	switch s {
	case OK:
		return "OK"
	case BadFormat:
		return "BadFormat"
	case Unknown:
		return "Unknown"
	case PutTrailingGarbage:
		return "PutTrailingGarbage"
	case PauseTubeBadName:
		return "PauseTubeBadName"
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}
