package codec

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"testing"
	"unsafe"
)

// FuzzParse checks, for any line:
//   - Parse never panics and never writes to the line;
//   - it agrees with cParse, the C-shaped model of upstream, on the status,
//     the op and (when the command is to be acted on) every field;
//   - Tube, when set, is a subslice of line whose capacity ends with it;
//   - an accepted command, written back in canonical form, parses to the
//     same command (so the fields hold what the line said, not a near miss).
//
// The seed corpus is in testdata/fuzz/FuzzParse, one or more lines per
// command; run `go test -run='^$' -fuzz=FuzzParse ./codec` to explore.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"put 0 0 0 0", "pause-tube foo 1", "kick -1", "beanpole-cancel-wait", "beanpole-unreserve 1"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		orig := bytes.Clone(line)
		var cmd Command
		st := Parse(line, &cmd)
		if !bytes.Equal(line, orig) {
			t.Fatalf("Parse modified its input: %q -> %q", orig, line)
		}
		if st > PauseTubeBadName {
			t.Fatalf("%q: status %d out of range", line, st)
		}
		if cmd.Op >= NumOps {
			t.Fatalf("%q: op %d out of range", line, cmd.Op)
		}

		wantSt, want := cParse(line)
		if st != wantSt || cmd.Op != want.Op {
			t.Fatalf("%q: Parse = %v %v, C model = %v %v", line, st, cmd.Op, wantSt, want.Op)
		}
		if st == OK || st == PutTrailingGarbage || st == PauseTubeBadName {
			if !sameCommand(cmd, want) {
				t.Fatalf("%q: Parse = %+v, C model = %+v", line, cmd, want)
			}
		}
		if st == Unknown && cmd.Op != OpNone {
			t.Fatalf("%q: Unknown with op %v", line, cmd.Op)
		}

		if cmd.Tube != nil {
			if !isSubslice(cmd.Tube, line) {
				t.Fatalf("%q: Tube %q does not alias the line", line, cmd.Tube)
			}
			if cap(cmd.Tube) != len(cmd.Tube) {
				t.Fatalf("%q: Tube capacity %d reaches past its length %d", line, cap(cmd.Tube), len(cmd.Tube))
			}
		}

		if st != OK {
			return
		}
		if cmd.Op == OpReserveWithTimeout && cmd.Timeout > math.MaxInt32 {
			t.Fatalf("%q: timeout %d above INT_MAX", line, cmd.Timeout)
		}
		if cmd.Tube != nil && !ValidTubeName(cmd.Tube) {
			t.Fatalf("%q: OK with invalid tube %q", line, cmd.Tube)
		}
		canon := formatCommand(&cmd)
		var again Command
		if st2 := Parse(canon, &again); st2 != OK || !sameCommand(cmd, again) {
			t.Fatalf("%q: canonical form %q parses to %v %+v, want OK %+v", line, canon, st2, again, cmd)
		}
	})
}

// sameCommand compares two commands, tube names by content.
func sameCommand(a, b Command) bool {
	return a.Op == b.Op && a.ID == b.ID && a.Pri == b.Pri && a.Delay == b.Delay &&
		a.TTR == b.TTR && a.Bytes == b.Bytes && a.Timeout == b.Timeout &&
		a.Bound == b.Bound && bytes.Equal(a.Tube, b.Tube)
}

// isSubslice reports whether sub lies within s's bytes.
func isSubslice(sub, s []byte) bool {
	if len(sub) == 0 || len(s) == 0 {
		return len(sub) == 0
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(sub)))
	return lo <= p && p+uintptr(len(sub)) <= lo+uintptr(len(s))
}

// formatCommand writes cmd back as the plainest line that means the same.
func formatCommand(c *Command) []byte {
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	var s string
	switch c.Op {
	case OpPut:
		s = fmt.Sprintf("put %d %d %d %d", c.Pri, c.Delay, c.TTR, c.Bytes)
	case OpPeek, OpReserveJob, OpDelete, OpKickJob, OpTouch, OpStatsJob, OpUnreserve:
		s = c.Op.String() + " " + u(c.ID)
	case OpReserveWithTimeout:
		s = "reserve-with-timeout " + u(uint64(c.Timeout))
	case OpRelease:
		s = fmt.Sprintf("release %d %d %d", c.ID, c.Pri, c.Delay)
	case OpBury:
		s = fmt.Sprintf("bury %d %d", c.ID, c.Pri)
	case OpKick:
		s = "kick " + u(uint64(c.Bound))
	case OpUse, OpWatch, OpIgnore, OpStatsTube:
		s = c.Op.String() + " " + string(c.Tube)
	case OpPauseTube:
		s = fmt.Sprintf("pause-tube %s %d", c.Tube, c.Delay)
	default:
		s = c.Op.String()
	}
	return []byte(s)
}
