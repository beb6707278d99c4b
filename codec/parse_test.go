package codec

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// parseCase is one line and what Parse must make of it. want is compared in
// full when st is OK, PutTrailingGarbage or PauseTubeBadName; for BadFormat
// and Unknown only want.Op is (the recognised command, or OpNone).
type parseCase struct {
	line string
	st   Status
	want Command
}

func bad(line string, op Op) parseCase    { return parseCase{line, BadFormat, Command{Op: op}} }
func unknown(line string) parseCase       { return parseCase{line, Unknown, Command{}} }
func ok(line string, c Command) parseCase { return parseCase{line, OK, c} }
func okOp(line string, op Op) parseCase   { return parseCase{line, OK, Command{Op: op}} }
func tube(op Op, name string) Command     { return Command{Op: op, Tube: []byte(name)} }

var (
	name200 = strings.Repeat("a", 200)
	name201 = strings.Repeat("a", 201)
	digits  = strings.Repeat("0123456789", 20) // 200 name bytes, all digits
)

// Command recognition, prefix quirks, NUL.
var recognitionCases = []parseCase{
	unknown(""),
	unknown("nont10knowncommand"), // upstream's testserv.c case 1
	unknown("PUT 0 0 0 0"),
	unknown("Stats"),
	unknown(" stats"),
	unknown("\tstats"),
	// Commands that take arguments need their trailing space.
	unknown("put"), unknown("peek"), unknown("delete"), unknown("release"),
	unknown("bury"), unknown("kick"), unknown("kick-job"), unknown("touch"),
	unknown("use"), unknown("watch"), unknown("ignore"), unknown("peek1"),
	unknown("list-tube-use"), unknown("list-tube"), unknown("pause-tub"),
	unknown("qui"), unknown("stat"), unknown("reserv"),
	// ...and with the space but nothing after it they are malformed.
	bad("put ", OpPut), bad("peek ", OpPeek), bad("delete ", OpDelete),
	bad("release ", OpRelease), bad("bury ", OpBury), bad("kick ", OpKick),
	bad("kick-job ", OpKickJob), bad("touch ", OpTouch),
	bad("stats-job ", OpStatsJob), bad("stats-tube ", OpStatsTube),
	bad("use ", OpUse), bad("watch ", OpWatch), bad("ignore ", OpIgnore),
	bad("reserve-job ", OpReserveJob), bad("reserve-with-timeout ", OpReserveWithTimeout),
	// Commands without arguments must match exactly.
	okOp("peek-ready", OpPeekReady), okOp("peek-delayed", OpPeekDelayed),
	okOp("peek-buried", OpPeekBuried), okOp("reserve", OpReserve),
	okOp("stats", OpStats), okOp("list-tubes", OpListTubes),
	okOp("list-tube-used", OpListTubeUsed), okOp("list-tubes-watched", OpListTubesWatched),
	bad("reserve ", OpReserve), bad("reservex", OpReserve), bad("stats ", OpStats),
	bad("statsx", OpStats), bad("list-tubesx", OpListTubes), bad("list-tubes ", OpListTubes),
	bad("list-tube-usedx", OpListTubeUsed), bad("list-tubes-watchedx", OpListTubesWatched),
	bad("list-tubes-watche", OpListTubes), bad("peek-readyX", OpPeekReady),
	bad("peek-delayed ", OpPeekDelayed), bad("peek-buriedx", OpPeekBuried),
	// Prefix fall-through: which_cmd's first match wins.
	bad("stats-job", OpStats), bad("stats-tube", OpStats), bad("stats-jobX 1", OpStats),
	bad("stats-tubes default", OpStats), bad("reserve-job", OpReserve),
	bad("reserve-with-timeout", OpReserve), bad("reserve-with-timeout5", OpReserve),
	unknown("peek-1"), // neither "peek " nor any "peek-..." prefix
	// quit only needs its prefix.
	okOp("quit", OpQuit), okOp("quitx", OpQuit), okOp("quit now", OpQuit), okOp("quit\r", OpQuit),
	// pause-tube has no space in its prefix.
	ok("pause-tubedefault 10", Command{Op: OpPauseTube, Tube: []byte("default"), Delay: 10}),
	bad("pause-tube", OpPauseTube),
	// An embedded NUL is BAD_FORMAT whatever the command (strlen check).
	bad("\x00", OpNone), bad("use a\x00b", OpNone), bad("stats\x00", OpNone),
	bad("\x00stats", OpNone), bad("put 0 0 0 1\x00", OpNone), bad("quit\x00", OpNone),
	bad("nonsense\x00", OpNone),
	// beanpole's own commands (internal connections only, which the loop
	// decides) follow the same rules: no argument, the line matches
	// exactly; an id, strict as delete's.
	okOp("beanpole-cancel-wait", OpCancelWait),
	bad("beanpole-cancel-wait ", OpCancelWait), bad("beanpole-cancel-waitx", OpCancelWait),
	unknown("beanpole-cancel-wai"), unknown("beanpole"), unknown("be"),
	okOp("beanpole-peek-watched", OpPeekWatched),
	bad("beanpole-peek-watched ", OpPeekWatched), bad("beanpole-peek-watchedx", OpPeekWatched),
	ok("beanpole-unreserve 7", Command{Op: OpUnreserve, ID: 7}),
	ok("beanpole-unreserve 18446744073709551615", Command{Op: OpUnreserve, ID: math.MaxUint64}),
	unknown("beanpole-unreserve"),
	bad("beanpole-unreserve ", OpUnreserve), bad("beanpole-unreserve 1 ", OpUnreserve),
	bad("beanpole-unreserve 1 2", OpUnreserve), bad("beanpole-unreserve -1", OpUnreserve),
	bad("beanpole-unreserve 18446744073709551616", OpUnreserve),
}

// Numbers.
var numberCases = []parseCase{
	ok("put 0 0 0 0", Command{Op: OpPut}),
	ok("put 1 2 3 4", Command{Op: OpPut, Pri: 1, Delay: 2, TTR: 3, Bytes: 4}),
	ok("put  1  0  0  1", Command{Op: OpPut, Pri: 1, Bytes: 1}),
	ok("put 00001 0 0 0", Command{Op: OpPut, Pri: 1}),
	ok("put 4294967295 0 100 1", Command{Op: OpPut, Pri: math.MaxUint32, TTR: 100, Bytes: 1}), // cttest_max_priority
	ok("put 4294967295 4294967295 4294967295 4294967295",
		Command{Op: OpPut, Pri: math.MaxUint32, Delay: math.MaxUint32, TTR: math.MaxUint32, Bytes: math.MaxUint32}),
	ok("put 0 0 0 1073741825", Command{Op: OpPut, Bytes: 1073741825}), // the size limit is the caller's
	ok("put 999999 0 0 0", Command{Op: OpPut, Pri: 999999}),
	bad("put 4294967296 0 100 1", OpPut), // cttest_too_big_priority
	bad("put 0 4294967296 0 0", OpPut),
	bad("put 0 0 4294967296 0", OpPut),
	bad("put 0 0 0 4294967296", OpPut), // cttest_job_size_invalid
	bad("put 0 0 0 18446744073709551616", OpPut),
	bad("put -1 0 100 1", OpPut),             // cttest_negative_priority
	bad("put -1kkdj9djjkd9 0 100 1", OpPut),  // cttest_garbage_priority
	bad("put 512 -1 100 0", OpPut),           // cttest_negative_delay
	bad("put 0 0 0 --!@#$%^&&**()0b", OpPut), // cttest_job_size_invalid
	bad("put 0 0 0", OpPut),
	bad("put 0 0 0 ", OpPut),
	bad("put +1 0 0 0", OpPut),
	bad("put 0x1 0 0 0", OpPut),
	bad("put 0\t0 0 0", OpPut),
	bad("put 0 0 0 \t1", OpPut),
	bad("put 1,0 0 0", OpPut),
	// Trailing garbage after <bytes>: the four numbers are filled, and the
	// caller checks the size limit before answering BAD_FORMAT.
	{"put 0 0 0 10b", PutTrailingGarbage, Command{Op: OpPut, Bytes: 10}}, // cttest_job_size_invalid
	{"put 0 0 0 20 garbage", PutTrailingGarbage, Command{Op: OpPut, Bytes: 20}},
	{"put 0 0 0 1 ", PutTrailingGarbage, Command{Op: OpPut, Bytes: 1}},
	{"put 0 0 0 1 x", PutTrailingGarbage, Command{Op: OpPut, Bytes: 1}},
	{"put 0 0 0 1 2", PutTrailingGarbage, Command{Op: OpPut, Bytes: 1}},
	{"put 5 6 7 8\r", PutTrailingGarbage, Command{Op: OpPut, Pri: 5, Delay: 6, TTR: 7, Bytes: 8}},

	// peek and the other strict single-id commands (upstream's
	// cttest_peek_not_found, cttest_peek_bad_format, cttest_touch_bad_format,
	// cttest_touch_not_found, cttest_bury_bad_format, cttest_kickjob_bad_format,
	// cttest_delete_bad_format, cttest_statsjob_ck_format).
	ok("peek 1", Command{Op: OpPeek, ID: 1}),
	ok("peek 0", Command{Op: OpPeek, ID: 0}),
	ok("peek 0001", Command{Op: OpPeek, ID: 1}),
	ok("peek  1", Command{Op: OpPeek, ID: 1}),
	ok("peek 18446744073709551615", Command{Op: OpPeek, ID: math.MaxUint64}),
	bad("peek 18446744073709551616", OpPeek),
	bad("peek 1844674407370955161600000000000000000000000000", OpPeek),
	bad("peek foo111", OpPeek),
	bad("peek 111foo", OpPeek),
	bad("peek 1 ", OpPeek),
	ok("delete 1", Command{Op: OpDelete, ID: 1}),
	ok("delete 01", Command{Op: OpDelete, ID: 1}),
	bad("delete 99 ", OpDelete),
	bad("delete 1 2", OpDelete),
	bad("delete +1", OpDelete),
	bad("delete -1", OpDelete),
	bad("delete 0x1", OpDelete),
	bad("delete \t1", OpDelete),
	bad("delete 18446744073709551616", OpDelete),
	bad("delete 1844674407370955161600000000000000000000000000", OpDelete),
	bad("delete foo111", OpDelete),
	bad("delete 111foo", OpDelete),
	ok("touch 1", Command{Op: OpTouch, ID: 1}),
	ok("touch 100000000000000", Command{Op: OpTouch, ID: 100000000000000}),
	bad("touch a111", OpTouch), bad("touch 111a", OpTouch), bad("touch !@#!@#", OpTouch),
	ok("kick-job 1", Command{Op: OpKickJob, ID: 1}),
	ok("kick-job 100", Command{Op: OpKickJob, ID: 100}),
	bad("kick-job a111", OpKickJob), bad("kick-job 111a", OpKickJob), bad("kick-job !@#!@#", OpKickJob),
	ok("stats-job 111", Command{Op: OpStatsJob, ID: 111}),
	bad("stats-job 111ABC", OpStatsJob), bad("stats-job 111 222", OpStatsJob),
	ok("reserve-job 2", Command{Op: OpReserveJob, ID: 2}),
	bad("reserve-job 2x", OpReserveJob), bad("reserve-job -2", OpReserveJob),

	// release <id> <pri> <delay> (upstream's cttest_reserve_job_ready,
	// cttest_release_bad_format, cttest_release_not_found).
	ok("release 1 1 1", Command{Op: OpRelease, ID: 1, Pri: 1, Delay: 1}),
	ok("release  2  3  4", Command{Op: OpRelease, ID: 2, Pri: 3, Delay: 4}),
	ok("release 18446744073709551615 4294967295 4294967295",
		Command{Op: OpRelease, ID: math.MaxUint64, Pri: math.MaxUint32, Delay: math.MaxUint32}),
	bad("release 18446744073709551616 1 1", OpRelease),
	bad("release 1844674407370955161600000000000000000000000000 1 1", OpRelease),
	bad("release foo111", OpRelease),
	bad("release 111foo", OpRelease),
	bad("release 18446744073709551615 abc 1", OpRelease),
	bad("release 18446744073709551615 1 abc", OpRelease),
	bad("release 1 4294967296 0", OpRelease),
	bad("release 1 0 4294967296", OpRelease),
	bad("release 1 2 3 ", OpRelease),
	bad("release 1 2", OpRelease),

	// bury <id> <pri> (cttest_bury_bad_format).
	ok("bury 1 0", Command{Op: OpBury, ID: 1}),
	ok("bury 1  4294967295", Command{Op: OpBury, ID: 1, Pri: math.MaxUint32}),
	bad("bury 111abc 2", OpBury), bad("bury 111", OpBury), bad("bury 111 222abc", OpBury),
	bad("bury 1 4294967296", OpBury), bad("bury 1 2 ", OpBury),

	// reserve-with-timeout: 1.13's read_u32, end never checked, <= INT_MAX.
	ok("reserve-with-timeout 0", Command{Op: OpReserveWithTimeout}),
	ok("reserve-with-timeout 000", Command{Op: OpReserveWithTimeout}),
	ok("reserve-with-timeout  0", Command{Op: OpReserveWithTimeout}),
	ok("reserve-with-timeout 0abc", Command{Op: OpReserveWithTimeout}),
	ok("reserve-with-timeout 0 1", Command{Op: OpReserveWithTimeout}),
	ok("reserve-with-timeout 5abc", Command{Op: OpReserveWithTimeout, Timeout: 5}),
	ok("reserve-with-timeout 1 ", Command{Op: OpReserveWithTimeout, Timeout: 1}),
	ok("reserve-with-timeout 2147483647", Command{Op: OpReserveWithTimeout, Timeout: math.MaxInt32}),
	bad("reserve-with-timeout 2147483648", OpReserveWithTimeout),
	bad("reserve-with-timeout 4294967295", OpReserveWithTimeout),
	bad("reserve-with-timeout 4294967296", OpReserveWithTimeout),
	bad("reserve-with-timeout 18446744073709551616", OpReserveWithTimeout),
	bad("reserve-with-timeout abc", OpReserveWithTimeout),
	bad("reserve-with-timeout -1", OpReserveWithTimeout),
	bad("reserve-with-timeout -0", OpReserveWithTimeout),
	bad("reserve-with-timeout +1", OpReserveWithTimeout),
	bad("reserve-with-timeout \t1", OpReserveWithTimeout),

	// kick: strtoul, truncated to 32 bits.
	ok("kick 1", Command{Op: OpKick, Bound: 1}),
	ok("kick 10", Command{Op: OpKick, Bound: 10}),
	ok("kick 5abc", Command{Op: OpKick, Bound: 5}),
	ok("kick 1 2", Command{Op: OpKick, Bound: 1}),
	ok("kick 0x10", Command{Op: OpKick, Bound: 0}),
	ok("kick -1", Command{Op: OpKick, Bound: math.MaxUint32}),
	ok("kick -0", Command{Op: OpKick, Bound: 0}),
	ok("kick +7", Command{Op: OpKick, Bound: 7}),
	ok("kick \t 7", Command{Op: OpKick, Bound: 7}),
	ok("kick \v\f\r\n9", Command{Op: OpKick, Bound: 9}),
	ok("kick  -2", Command{Op: OpKick, Bound: math.MaxUint32 - 1}),
	ok("kick 4294967295", Command{Op: OpKick, Bound: math.MaxUint32}),
	ok("kick 4294967296", Command{Op: OpKick, Bound: 0}),
	ok("kick 4294967297", Command{Op: OpKick, Bound: 1}),
	ok("kick 18446744073709551615", Command{Op: OpKick, Bound: math.MaxUint32}),
	ok("kick -18446744073709551615", Command{Op: OpKick, Bound: 1}),
	ok("kick 000000000000000000000000000000000000000000042", Command{Op: OpKick, Bound: 42}),
	bad("kick 18446744073709551616", OpKick),
	bad("kick -18446744073709551616", OpKick),
	bad("kick abc", OpKick),
	bad("kick -", OpKick),
	bad("kick +", OpKick),
	bad("kick - 1", OpKick),
	bad("kick +-1", OpKick),
	bad("kick  ", OpKick),
}

// Tube names.
var tubeCases = []parseCase{
	ok("use x_y", tube(OpUse, "x_y")), // cttest_underscore
	ok("use a", tube(OpUse, "a")),
	ok("use a-", tube(OpUse, "a-")),
	ok("use ABCXYZabcxyz0189-+/;.$_()", tube(OpUse, "ABCXYZabcxyz0189-+/;.$_()")),
	ok("use "+name200, tube(OpUse, name200)),
	ok("use "+digits, tube(OpUse, digits)), // cttest_use_tube_long
	bad("use "+digits+"Z", OpUse),          // cttest_use_tube_long: 201 bytes
	bad("use "+name201, OpUse),
	bad("use  a", OpUse),
	bad("use a ", OpUse),
	bad("use a b", OpUse),
	bad("use a\tb", OpUse),
	bad("use -a", OpUse),
	bad("use a*b", OpUse),
	bad("use a:b", OpUse),
	bad("use \xc3\xa9", OpUse),
	ok("watch w", tube(OpWatch, "w")),
	bad("watch -w", OpWatch), bad("watch w ", OpWatch),
	ok("ignore default", tube(OpIgnore, "default")),
	bad("ignore  default", OpIgnore),
	ok("stats-tube default", tube(OpStatsTube, "default")),
	ok("stats-tube "+name200, tube(OpStatsTube, name200)),
	bad("stats-tube "+name201, OpStatsTube),
	bad("stats-tube -x", OpStatsTube),

	// pause-tube: read_tube_name, then a strict delay.
	ok("pause-tube foo 10", Command{Op: OpPauseTube, Tube: []byte("foo"), Delay: 10}),
	ok("pause-tube  foo  10", Command{Op: OpPauseTube, Tube: []byte("foo"), Delay: 10}),
	ok("pause-tube foo 0", Command{Op: OpPauseTube, Tube: []byte("foo")}),
	ok("pause-tube default 86400", Command{Op: OpPauseTube, Tube: []byte("default"), Delay: 86400}),
	ok("pause-tube a-b 1", Command{Op: OpPauseTube, Tube: []byte("a-b"), Delay: 1}),
	ok("pause-tube "+name200+" 4294967295", Command{Op: OpPauseTube, Tube: []byte(name200), Delay: math.MaxUint32}), // cttest_longest_command
	bad("pause-tube foo\t1", OpPauseTube),
	bad("pause-tube foo 1 ", OpPauseTube),
	bad("pause-tube foo 1x", OpPauseTube),
	bad("pause-tube foo", OpPauseTube),
	bad("pause-tube x", OpPauseTube),
	bad("pause-tube foo10", OpPauseTube), // the digits belong to the name
	bad("pause-tube foo*bar 1", OpPauseTube),
	bad("pause-tube *foo 1", OpPauseTube),
	bad("pause-tube\tfoo 1", OpPauseTube),
	bad("pause-tube  ", OpPauseTube),
	bad("pause-tube default 4294967296", OpPauseTube),
	bad("pause-tube default -1", OpPauseTube),
	bad("pause-tube default +1", OpPauseTube),
	// The name is checked after upstream counted the command.
	{"pause-tube -foo 1", PauseTubeBadName, Command{Op: OpPauseTube, Tube: []byte("-foo"), Delay: 1}},
	{"pause-tube-foo 10", PauseTubeBadName, Command{Op: OpPauseTube, Tube: []byte("-foo"), Delay: 10}},
	{"pause-tube " + name201 + " 1", PauseTubeBadName, Command{Op: OpPauseTube, Tube: []byte(name201), Delay: 1}},
}

func TestParse(t *testing.T) {
	for _, set := range []struct {
		name  string
		cases []parseCase
	}{{"recognition", recognitionCases}, {"numbers", numberCases}, {"tubes", tubeCases}} {
		t.Run(set.name, func(t *testing.T) {
			for _, tc := range set.cases {
				checkParse(t, tc)
			}
		})
	}
}

func checkParse(t *testing.T, tc parseCase) {
	t.Helper()
	line := []byte(tc.line)
	cmd := Command{ID: 99, Tube: []byte("stale")} // Parse must overwrite it
	st := Parse(line, &cmd)
	if st != tc.st {
		t.Errorf("Parse(%q) = %v, want %v", tc.line, st, tc.st)
		return
	}
	switch st {
	case OK, PutTrailingGarbage, PauseTubeBadName:
		if !sameCommand(cmd, tc.want) {
			t.Errorf("Parse(%q) = %+v, want %+v", tc.line, cmd, tc.want)
		}
	default:
		if cmd.Op != tc.want.Op {
			t.Errorf("Parse(%q): op %v, want %v", tc.line, cmd.Op, tc.want.Op)
		}
	}
	// The C-shaped model must agree too: it is FuzzParse's oracle, so this
	// keeps the oracle honest against the hand-checked table.
	if cst, c := cParse(line); cst != st || c.Op != cmd.Op ||
		(st != BadFormat && st != Unknown && !sameCommand(c, cmd)) {
		t.Errorf("cParse(%q) = %v %+v, Parse = %v %+v", tc.line, cst, c, st, cmd)
	}
}

// The longest valid command line is 224 bytes with its CRLF (upstream's
// LINE_BUF_SIZE); the loop enforces the limit, Parse must accept the line.
func TestLongestCommand(t *testing.T) {
	line := "pause-tube " + name200 + " 4294967295"
	if len(line)+2 != 224 {
		t.Fatalf("longest line is %d bytes with CRLF, want 224", len(line)+2)
	}
	var cmd Command
	if st := Parse([]byte(line), &cmd); st != OK || string(cmd.Tube) != name200 || cmd.Delay != math.MaxUint32 {
		t.Fatalf("Parse(longest) = %v %+v", st, cmd)
	}
}

func TestInternalOps(t *testing.T) {
	for op := OpNone; op <= NumOps; op++ {
		if want := op == OpCancelWait || op == OpUnreserve || op == OpPeekWatched; op.Internal() != want {
			t.Errorf("%v.Internal() = %v, want %v", op, !want, want)
		}
	}
	var cmd Command
	if st := Parse([]byte(CancelWaitLine[:len(CancelWaitLine)-2]), &cmd); st != OK || cmd.Op != OpCancelWait ||
		CancelWaitLine[len(CancelWaitLine)-2:] != "\r\n" {
		t.Fatalf("CancelWaitLine %q parses to %v %v", CancelWaitLine, st, cmd.Op)
	}
}

// Tube points into the line (no copy) and cannot be appended into it.
func TestParseTubeAliasesLine(t *testing.T) {
	for _, line := range []string{"use foo", "watch foo", "ignore foo", "stats-tube foo", "pause-tube  foo 1"} {
		buf := []byte(line + "\r\nmore")
		l := buf[:len(line)]
		var cmd Command
		if st := Parse(l, &cmd); st != OK {
			t.Fatalf("Parse(%q) = %v", line, st)
		}
		if !isSubslice(cmd.Tube, l) || string(cmd.Tube) != "foo" {
			t.Fatalf("Parse(%q): Tube %q does not alias the line", line, cmd.Tube)
		}
		if cap(cmd.Tube) != 3 {
			t.Fatalf("Parse(%q): cap(Tube) = %d, want 3", line, cap(cmd.Tube))
		}
		_ = append(cmd.Tube, 'X')
		if !bytes.Equal(buf, []byte(line+"\r\nmore")) {
			t.Fatalf("appending to Tube wrote into the line: %q", buf)
		}
	}
}

// The Op constants must be in which_cmd's order: Parse tries prefixes in Op
// order. This is upstream's list, copied from prot.c by hand.
func TestPrefixOrder(t *testing.T) {
	upstream := []string{
		"put ", "peek ", "peek-ready", "peek-delayed", "peek-buried",
		"reserve-with-timeout ", "reserve-job ", "reserve", "delete ",
		"release ", "bury ", "kick ", "kick-job ", "touch ", "stats-job ",
		"stats-tube ", "stats", "use ", "watch ", "ignore ",
		"list-tubes-watched", "list-tube-used", "list-tubes", "quit",
		"pause-tube",
	}
	if int(OpCancelWait)-1 != len(upstream) {
		t.Fatalf("%d ops before beanpole's own, upstream has %d commands", OpCancelWait-1, len(upstream))
	}
	for i, p := range upstream {
		if got := prefixes[Op(i+1)]; got != p {
			t.Errorf("prefix of op %d = %q, want %q", i+1, got, p)
		}
	}
	// Within one first byte, byFirstByte must keep that order.
	for c, ops := range byFirstByte {
		for i := 1; i < len(ops); i++ {
			if ops[i-1] >= ops[i] {
				t.Errorf("byFirstByte[%q] out of order: %v", rune(c), ops)
			}
		}
	}
}

func TestOpString(t *testing.T) {
	for op, want := range map[Op]string{
		OpNone: "unknown", OpPut: "put", OpPeekReady: "peek-ready",
		OpReserveWithTimeout: "reserve-with-timeout", OpPauseTube: "pause-tube",
		OpQuit: "quit", OpCancelWait: "beanpole-cancel-wait", OpUnreserve: "beanpole-unreserve", OpPeekWatched: "beanpole-peek-watched",
		NumOps: "unknown",
	} {
		if got := op.String(); got != want {
			t.Errorf("Op(%d).String() = %q, want %q", op, got, want)
		}
	}
}

func TestParseAllocs(t *testing.T) {
	lines := [][]byte{
		[]byte("put 0 0 120 100"), []byte("reserve"), []byte("delete 18446744073709551615"),
		[]byte("use " + name200), []byte("pause-tube foo 10"), []byte("kick -1"),
		[]byte("release 1 2 3"), []byte("nonsense"),
	}
	var cmd Command
	if n := testing.AllocsPerRun(100, func() {
		for _, l := range lines {
			Parse(l, &cmd)
		}
	}); n != 0 {
		t.Fatalf("Parse allocates: %v allocs per run", n)
	}
}

func TestValidTubeName(t *testing.T) {
	for name, want := range map[string]bool{
		"": false, "a": true, "-a": false, "a-": true, name200: true, name201: false,
		"a b": false, "a\x00": false, "()": true, "$": true, "_": true, "+": true,
		"/;.": true, "a\"b": false, "a\\b": false, "a*": false,
	} {
		if got := ValidTubeName([]byte(name)); got != want {
			t.Errorf("ValidTubeName(%q) = %v, want %v", name, got, want)
		}
	}
	// Every byte outside NAME_CHARS is rejected, every one inside accepted.
	for c := 0; c < 256; c++ {
		want := strings.IndexByte(cNameChars, byte(c)) >= 0 && c != 0 && c != '-'
		if got := ValidTubeName([]byte{byte(c)}); got != want {
			t.Errorf("ValidTubeName(%q) = %v, want %v", rune(c), got, want)
		}
	}
}
