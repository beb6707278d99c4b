package codec

import (
	"math"
	"strconv"
)

// cParse is a second, deliberately naive model of upstream's dispatch_cmd
// parsing, written to follow the C code's shape rather than Parse's: it works
// on a NUL-terminated copy of the line with byte offsets standing in for
// char pointers, recognises commands with a strncmp loop over which_cmd's
// list, and converts numbers with strconv instead of by hand. FuzzParse
// checks that Parse and cParse agree on every input, so a slip in either one
// shows up as a disagreement.
func cParse(line []byte) (Status, Command) {
	var cmd Command
	buf := append(append([]byte(nil), line...), 0)

	// strlen(c->cmd) != c->cmd_len - 2
	if cStrlen(buf, 0) != len(line) {
		return BadFormat, cmd
	}

	type entry struct {
		s  string
		op Op
	}
	// which_cmd, in upstream's order, spelled out again on purpose.
	table := []entry{
		{"put ", OpPut}, {"peek ", OpPeek}, {"peek-ready", OpPeekReady},
		{"peek-delayed", OpPeekDelayed}, {"peek-buried", OpPeekBuried},
		{"reserve-with-timeout ", OpReserveWithTimeout},
		{"reserve-job ", OpReserveJob}, {"reserve", OpReserve},
		{"delete ", OpDelete}, {"release ", OpRelease}, {"bury ", OpBury},
		{"kick ", OpKick}, {"kick-job ", OpKickJob}, {"touch ", OpTouch},
		{"stats-job ", OpStatsJob}, {"stats-tube ", OpStatsTube},
		{"stats", OpStats}, {"use ", OpUse}, {"watch ", OpWatch},
		{"ignore ", OpIgnore}, {"list-tubes-watched", OpListTubesWatched},
		{"list-tube-used", OpListTubeUsed}, {"list-tubes", OpListTubes},
		{"quit", OpQuit}, {"pause-tube", OpPauseTube},
		// beanpole's own, after upstream's.
		{"beanpole-cancel-wait", OpCancelWait}, {"beanpole-unreserve ", OpUnreserve},
		{"beanpole-peek-watched", OpPeekWatched},
	}
	plen := 0
	for _, e := range table {
		if cStrncmp(buf, e.s) {
			cmd.Op, plen = e.op, len(e.s)
			break
		}
	}
	cmdLen := len(line) // c->cmd_len - 2
	p := plen           // c->cmd + LEN

	switch cmd.Op {
	case OpPut:
		var v [4]uint64
		end := p
		for i := range v {
			var ok bool
			if v[i], end, ok = cReadUint(buf, end, math.MaxUint32); !ok {
				return BadFormat, Command{Op: OpPut}
			}
		}
		cmd.Pri, cmd.Delay, cmd.TTR, cmd.Bytes = uint32(v[0]), uint32(v[1]), uint32(v[2]), uint32(v[3])
		if buf[end] != 0 {
			return PutTrailingGarbage, cmd
		}
		return OK, cmd

	case OpPeekReady, OpPeekDelayed, OpPeekBuried, OpReserve, OpStats,
		OpListTubesWatched, OpListTubeUsed, OpListTubes, OpCancelWait, OpPeekWatched:
		if cmdLen != plen {
			return BadFormat, Command{Op: cmd.Op}
		}
		return OK, cmd

	case OpPeek, OpReserveJob, OpDelete, OpKickJob, OpTouch, OpStatsJob, OpUnreserve:
		id, end, ok := cReadUint(buf, p, math.MaxUint64)
		if !ok || buf[end] != 0 {
			return BadFormat, Command{Op: cmd.Op}
		}
		cmd.ID = id
		return OK, cmd

	case OpReserveWithTimeout:
		t, _, ok := cReadUint(buf, p, math.MaxUint32)
		if !ok || t > math.MaxInt32 {
			return BadFormat, Command{Op: cmd.Op}
		}
		cmd.Timeout = uint32(t)
		return OK, cmd

	case OpRelease, OpBury:
		id, end, ok := cReadUint(buf, p, math.MaxUint64)
		if !ok {
			return BadFormat, Command{Op: cmd.Op}
		}
		pri, end, ok := cReadUint(buf, end, math.MaxUint32)
		if !ok {
			return BadFormat, Command{Op: cmd.Op}
		}
		cmd.ID, cmd.Pri = id, uint32(pri)
		if cmd.Op == OpRelease {
			var d uint64
			if d, end, ok = cReadUint(buf, end, math.MaxUint32); !ok {
				return BadFormat, Command{Op: cmd.Op}
			}
			cmd.Delay = uint32(d)
		}
		if buf[end] != 0 {
			return BadFormat, Command{Op: cmd.Op}
		}
		return OK, cmd

	case OpKick:
		n, ok := cStrtoul(buf, p)
		if !ok {
			return BadFormat, Command{Op: cmd.Op}
		}
		cmd.Bound = uint32(n) // count is an unsigned int
		return OK, cmd

	case OpUse, OpWatch, OpIgnore, OpStatsTube:
		name := buf[p:cmdLen]
		if !cIsValidTube(buf, p) {
			return BadFormat, Command{Op: cmd.Op}
		}
		cmd.Tube = name
		return OK, cmd

	case OpQuit:
		return OK, cmd

	case OpPauseTube:
		// read_tube_name
		for buf[p] == ' ' {
			p++
		}
		n := cStrspn(buf, p)
		if n == 0 {
			return BadFormat, Command{Op: cmd.Op}
		}
		d, end, ok := cReadUint(buf, p+n, math.MaxUint32)
		if !ok || buf[end] != 0 {
			return BadFormat, Command{Op: cmd.Op}
		}
		cmd.Delay = uint32(d)
		buf[p+n] = 0 // *delay_buf = '\0'
		cmd.Tube = line[p : p+n]
		if !cIsValidTube(buf, p) {
			return PauseTubeBadName, cmd
		}
		return OK, cmd
	}
	return Unknown, Command{}
}

func cStrlen(buf []byte, p int) int {
	n := 0
	for buf[p+n] != 0 {
		n++
	}
	return n
}

// cStrncmp is strncmp(buf, s, strlen(s)) == 0.
func cStrncmp(buf []byte, s string) bool {
	for i := 0; i < len(s); i++ {
		if buf[i] != s[i] {
			return false
		}
	}
	return true
}

const cNameChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-+/;.$_()"

// cStrspn is strspn(buf+p, NAME_CHARS).
func cStrspn(buf []byte, p int) int {
	n := 0
	for buf[p+n] != 0 && containsByte(cNameChars, buf[p+n]) {
		n++
	}
	return n
}

func containsByte(s string, c byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return true
		}
	}
	return false
}

// cIsValidTube is is_valid_tube(buf+p, MAX_TUBE_NAME_LEN-1).
func cIsValidTube(buf []byte, p int) bool {
	n := cStrlen(buf, p)
	return 0 < n && n <= 200 && cStrspn(buf, p) == n && buf[p] != '-'
}

// cReadUint is read_u64/read_u32 with an end pointer: it returns the offset
// after the digits. The caller checks buf[end] where upstream passes NULL.
func cReadUint(buf []byte, p int, max uint64) (uint64, int, bool) {
	for buf[p] == ' ' {
		p++
	}
	if buf[p] < '0' || '9' < buf[p] {
		return 0, p, false
	}
	end := p
	for '0' <= buf[end] && buf[end] <= '9' {
		end++
	}
	v, err := strconv.ParseUint(string(buf[p:end]), 10, 64)
	if err != nil || v > max {
		return 0, p, false
	}
	return v, end, true
}

// cStrtoul is glibc's strtoul(buf+p, &end, 10) followed by upstream's
// "end == start || errno" check.
func cStrtoul(buf []byte, p int) (uint64, bool) {
	q := p
	for buf[q] == ' ' || buf[q] == '\t' || buf[q] == '\n' || buf[q] == '\v' || buf[q] == '\f' || buf[q] == '\r' {
		q++
	}
	neg := false
	if buf[q] == '+' || buf[q] == '-' {
		neg = buf[q] == '-'
		q++
	}
	end := q
	for '0' <= buf[end] && buf[end] <= '9' {
		end++
	}
	if end == q {
		return 0, false // no conversion: end is set back to the start
	}
	v, err := strconv.ParseUint(string(buf[q:end]), 10, 64)
	if err != nil {
		return 0, false // ERANGE
	}
	if neg {
		v = -v
	}
	return v, true
}
