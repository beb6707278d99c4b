package e2e

// Differential test: the same raw byte scripts, bad input included, are run
// against the reference C beanstalkd (/usr/bin/beanstalkd) and against the
// server under test, and the replies are compared byte for byte after the
// documented normalisations only:
//   - 1.12 writes YAML string values bare, 1.13 double-quoted (docs/behaviour.md, 'Wire target'): a
//     1.12 reply has name/tube/hostname/os/platform quoted before comparing;
//   - the values of pid, version, rusage-utime, rusage-stime, uptime, id,
//     hostname, os and platform in a stats reply are masked.
// After a body is normalised its OK <bytes> header is recomputed; the
// original framing was checked when the reply was read.
//
// Scripts avoid the documented differences: the 225-byte and stray-CR line
// quirks (docs/behaviour.md, 'Long lines'), reserve-with-timeout arguments that only 1.13 rejects
// (docs/behaviour.md, 'Wire target') and more than two waiters (FIFO: docs/behaviour.md, 'Waiting reservers').

import (
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

const referenceBin = "/usr/bin/beanstalkd"

type dstep struct {
	conn    int    // connection index; connections are dialled on first use
	send    string // raw bytes to send ("" sends nothing)
	replies int    // reply units to read on conn after sending
	close   bool   // close conn instead of sending
}

type dscript struct {
	name  string
	flags []string
	steps []dstep
}

// s is a step on connection 0; on is a step on connection k.
func s(send string, replies int) dstep         { return dstep{send: send, replies: replies} }
func on(k int, send string, replies int) dstep { return dstep{conn: k, send: send, replies: replies} }
func closeConn(k int) dstep                    { return dstep{conn: k, close: true} }

// lines sends each line (CRLF appended) in its own step expecting one reply.
func lines(ls ...string) []dstep {
	var out []dstep
	for _, l := range ls {
		out = append(out, s(l+"\r\n", 1))
	}
	return out
}

func cat(parts ...[]dstep) []dstep {
	var out []dstep
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

var diffScripts = []dscript{
	{name: "lifecycle", steps: cat(
		[]dstep{s("put 5 0 100 5\r\nhello\r\n", 1), s("put 1 0 100 0\r\n\r\n", 1)},
		lines("peek 1", "peek 2", "peek 3", "peek-ready", "reserve", "reserve-with-timeout 0",
			"release 2 7 0", "bury 1 9", "peek-buried", "kick 5", "reserve-job 1", "touch 1",
			"release 1 3 100", "peek-delayed", "kick-job 1", "reserve", "delete 2", "delete 2",
			"delete 1", "reserve-with-timeout 0", "stats-job 1"),
	)},
	{name: "unknown and prefix quirks", steps: cat(
		lines("nont10knowncommand", "", "PUT 0 0 0 0", " stats", "reserve ", "reservex", "stats ",
			"statsx", "list-tubesx", "peek-readyX", "stats-job", "stats-tube", "stats-jobX 1",
			"reserve-job", "reserve-with-timeout", "put", "delete", "kick", "touch", "bury", "release",
			"watch", "ignore", "peek", "use", "kick-job", "delete ", "use ", "peek ", "put ",
			"pause-tube", "list-tube-used"),
		[]dstep{s("quitx\r\nlist-tube-used\r\n", 0)},
	)},
	{name: "number rules", steps: cat(
		[]dstep{s("put  1  0  0  1\r\nx\r\n", 1)},
		lines("peek 0001", "peek  1", "peek 0", "peek 18446744073709551615", "peek 18446744073709551616",
			"peek 184467440737095516160000000000000000000000000000", "peek foo111", "peek 111foo",
			"delete 99 ", "delete 1 2", "delete +1", "delete -1", "delete 0x1", "delete \t1",
			"put 0 0 0 4294967296", "put 0 4294967296 0 0", "put 0 0 4294967296 0", "put 0 0 0",
			"put 512 -1 100 0", "release 1 4294967296 0", "release 18446744073709551615 abc 1",
			"release foo111", "bury 111abc 2", "bury 111", "touch a111", "touch !@#!@#",
			"kick-job 111a", "stats-job 111ABC", "stats-job 111 222", "stats-job 111",
			"pause-tube default 4294967296", "pause-tube default -1", "delete 01"),
	)},
	{name: "bad put lines", steps: []dstep{
		s("put -1kkdj9djjkd9 0 100 1\r\na\r\n", 2),
		s("put -1 0 100 1\r\na\r\n", 2),
		s("put 4294967296 0 100 1\r\na\r\n", 2),
		s("put 0 0 0 1 x\r\na\r\n", 2),
		s("put 0 0 0 x\r\nlist-tube-used\r\n", 2),
		s("put 4294967295 0 100 1\r\na\r\n", 1),
		s("stats\r\n", 1),
	}},
	{name: "long lines", steps: []dstep{
		s(strings.Repeat("a", 500)+"\r\nlist-tube-used\r\n", 2),
		s(strings.Repeat("b", 1000), 0),
		s(strings.Repeat("c", 1000)+"\r\nuse x\r\n", 2),
		s("use "+strings.Repeat("d", 200)+"\r\n", 1),
		s("pause-tube "+strings.Repeat("d", 200)+" 4294967295\r\n", 1),
		s("use "+strings.Repeat("e", 201)+"\r\n", 1),
		s("list-tube-used\n\r\n", 1),
		s("use a\x00b\r\nlist-tube-used\r\n", 2),
	}},
	{name: "expected crlf", steps: []dstep{
		s("put 0 0 10 1\r\nab\r\nlist-tube-used\r\n", 2),
		s("put 0 0 10 1\r\na\r\n", 1),
		s("put 0 0 10 3\r\nabcXY", 1),
		s("put 0 0 10 1\r\nz\r\n", 1),
		s("stats\r\n", 1),
	}},
	{name: "job too big", flags: []string{"-z", "10"}, steps: []dstep{
		s("put 0 0 0 11\r\n", 0),
		s("delete 9999\r\n", 1),
		s("put 0 0 0 1\r\nx\r\n", 1),
		s("put 0 0 0 20 garbage\r\n"+strings.Repeat("b", 20)+"\r\n", 1),
		s("put 0 0 0 2 garbage\r\n", 1),
		s("put 0 0 0 12\r\nlist-tubes\r\nXY", 1),
		s("put 0 0 0 10\r\n0123456789\r\n", 1),
		s("stats\r\n", 1),
	}},
	{name: "tubes", steps: cat(
		lines("use x_y", "use AZaz09-+/;.$_()", "use -a", "use  a", "use a ", "use a b", "use a*b",
			"watch w", "watch w", "ignore nosuch", "list-tubes", "list-tube-used", "list-tubes-watched",
			"ignore default", "list-tubes-watched", "ignore w", "stats-tube nosuch", "stats-tube -a",
			"pause-tube nosuch 1", "pause-tube  w  10", "pause-tube w\t1", "pause-tube -w 1",
			"stats-tube w", "watch x", "watch y", "watch z", "ignore x", "list-tubes-watched",
			"list-tubes", "use default", "list-tubes", "stats"),
	)},
	{name: "swap remove", steps: cat(
		lines("watch k", "watch dl", "watch t1", "watch t2", "watch t3", "watch t4", "ignore t2",
			"list-tubes-watched", "list-tubes"),
		[]dstep{on(1, "use other\r\n", 1), on(1, "list-tubes\r\n", 1)},
		lines("ignore k", "list-tubes"),
		[]dstep{on(1, "use default\r\n", 1), on(1, "list-tubes\r\n", 1)},
	)},
	{name: "stats fresh", steps: []dstep{s("stats\r\n", 1), s("stats\r\n", 1)}},
	{name: "stats counters", steps: cat(
		[]dstep{
			s("put 0 0 100 1\r\na\r\n", 1), s("put 2000 0 100 1\r\nb\r\n", 1),
			s("put 0 100 100 1\r\nc\r\n", 1),
		},
		lines("peek 1", "peek x", "peek-ready", "peek-delayed", "peek-buried", "reserve", "bury 1 5",
			"reserve-with-timeout 0", "release 2 2000 0", "touch 2", "kick 1", "reserve-job 99",
			"kick-job 99", "use foo", "watch bar", "ignore bar", "list-tubes", "list-tube-used",
			"list-tubes-watched", "stats-tube nosuch", "stats-job 99", "pause-tube foo 0",
			"pause-tube -foo 1", "delete 3", "delete 3", "stats", "stats-tube default", "stats-tube foo"),
	)},
	{name: "stats-job states", steps: cat(
		[]dstep{s("put 1023 0 100 3\r\nabc\r\n", 1), s("put 1024 0 100 1\r\nb\r\n", 1),
			s("put 0 100 100 1\r\nc\r\n", 1)},
		lines("stats-job 1", "stats-job 3", "reserve", "stats-job 1", "bury 1 4", "stats-job 1",
			"kick-job 1", "stats-job 1", "reserve-job 3", "stats-job 3", "release 3 0 0", "stats-job 3",
			"stats", "stats-tube default"),
		[]dstep{s("put 0 0 0 0\r\n\r\n", 1), s("stats-job 4\r\n", 1)},
	)},
	{name: "kick truncation", steps: cat(
		[]dstep{s(strings.Repeat("put 0 100 10 1\r\nx\r\n", 12), 12)},
		lines("kick 5abc", "kick 1 2", "kick 4294967296", "kick 4294967297", "kick  1", "kick +1",
			"kick abc", "kick ", "kick 18446744073709551616", "kick -1", "kick 0", "stats-tube default"),
	)},
	{name: "pipelined session", steps: []dstep{
		s("use p\r\nput 5 0 10 3\r\nabc\r\nput 1 0 10 4\r\nd\r\nf\r\nbogus\r\nput 0 0 10 0\r\n\r\n"+
			"peek-ready\r\nwatch p\r\nignore default\r\nreserve\r\nreserve-with-timeout 0\r\nrelease 3 9 0\r\n"+
			"bury 2 4\r\npeek-buried\r\nkick 10\r\nlist-tubes-watched\r\ndelete 1\r\ndelete 1\r\nreserve\r\n"+
			"touch 2\r\nstats-tube p\r\nlist-tube-used\r\nstats\r\n", 22),
	}},
	{name: "pipelined reserve blocks", steps: []dstep{
		on(1, "reserve\r\nlist-tube-used\r\nuse held\r\nput 0 0 10 2\r\nhi\r\n", 0),
		on(0, "put 0 0 10 3\r\njob\r\n", 1),
		on(1, "", 4),
		on(1, "stats-job 1\r\n", 1),
	}},
	{name: "quit in pipeline", steps: []dstep{
		s("use a\r\nput 0 0 10 1\r\nx\r\nquit\r\nuse b\r\nput 0 0 10 1\r\ny\r\n", 2),
		on(1, "peek 2\r\nstats-tube b\r\nlist-tubes\r\n", 3),
	}},
	{name: "reserved by another connection", steps: cat(
		[]dstep{s("put 0 0 100 1\r\nx\r\n", 1), on(1, "reserve\r\n", 1)},
		lines("delete 1", "release 1 0 0", "bury 1 0", "touch 1", "reserve-job 1", "kick-job 1", "peek 1",
			"stats-job 1"),
		[]dstep{closeConn(1), s("reserve-with-timeout 2\r\n", 1), s("stats-job 1\r\n", 1)},
	)},
	{name: "waiters", steps: []dstep{
		on(1, "watch a\r\nwatch b\r\nignore default\r\nreserve\r\n", 3),
		s("put 0 0 10 1\r\nd\r\nuse b\r\nput 5 0 10 1\r\nb\r\n", 3),
		on(1, "", 1),
		s("put 3 0 10 1\r\nB\r\nuse a\r\nput 2 0 10 1\r\nA\r\n", 3),
		on(1, "reserve\r\nreserve\r\nreserve-with-timeout 0\r\n", 3),
	}},
	{name: "paused tube", steps: cat(
		[]dstep{s("put 0 0 10 1\r\na\r\n", 1)},
		lines("pause-tube default 10", "reserve-with-timeout 0", "peek-ready", "stats-tube default"),
		[]dstep{s("put 0 100 10 1\r\nb\r\n", 1)},
		lines("kick 1", "reserve-job 2", "pause-tube default 0"),
		[]dstep{s("reserve-with-timeout 2\r\n", 1)},
	)},
	{name: "reserve-with-timeout forms both versions accept", steps: lines(
		"reserve-with-timeout 0", "reserve-with-timeout 000", "reserve-with-timeout  0",
		"reserve-with-timeout 0abc", "reserve-with-timeout 0 1", "stats")},
	{name: "binary bodies", steps: []dstep{
		s("put 0 0 10 9\r\na\r\nb\x00c\r\n\xff\r\n", 1),
		s("put 0 0 0 0\r\n\r\n", 1),
		s("peek 1\r\npeek 2\r\nreserve\r\nreserve\r\n", 4),
	}},
	{name: "split writes", steps: []dstep{
		s("put 0 0 10 10\r\n", 0), s("01234", 0), s("56789\r", 0), s("\nput 0 0 10 1\r\nx", 1),
		s("\r\n", 1), s("pe", 0), s("ek 1\r", 0), s("\n", 1),
	}},
	{name: "priority order", steps: []dstep{
		s("put 5 0 100 1\r\n1\r\nput 1 0 100 1\r\n2\r\nput 5 0 100 1\r\n3\r\nput 1 0 100 1\r\n4\r\nput 0 0 100 1\r\n5\r\n", 5),
		s("reserve\r\nreserve\r\nreserve\r\nreserve\r\nreserve\r\n", 5),
		s("release 3 7 0\r\nrelease 1 7 0\r\nreserve\r\nrelease 1 8 0\r\nreserve\r\nreserve\r\n", 6),
	}},
	{name: "producers and workers", flags: []string{"-z", "10"}, steps: []dstep{
		s("put x 0 0 1\r\n", 1),
		s("put 0 0 0 11\r\n01234567890\r\n", 1),
		on(1, "put 0 0 10 1\r\nx\r\n", 1),
		on(2, "reserve-with-timeout 0\r\n", 1),
		on(3, "reserve-job 99\r\n", 1),
		on(4, "put 0 0 0 1\r\nxyz", 1),
		s("stats\r\n", 1),
	}},
}

// dunit is one reply unit read from one connection after one step.
type dunit struct {
	step int
	conn int
	data string
}

var (
	bodyHeaderRE = regexp.MustCompile(`^(?:(?:RESERVED|FOUND) [0-9]+|OK) ([0-9]+)$`)
	closedUnit   = "<connection closed>"
)

// readUnit reads one reply: a line, plus the body that RESERVED, FOUND and
// OK announce. A closed connection reads as closedUnit.
func readUnit(c *conn, d time.Duration) (string, error) {
	line, err := c.readLineErr(d)
	if err != nil {
		if c.eof != nil && len(c.buf) == 0 {
			return closedUnit, nil
		}
		return "", err
	}
	m := bodyHeaderRE.FindStringSubmatch(line)
	if m == nil {
		return line + "\r\n", nil
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return "", err
	}
	body, err := c.readNErr(n+2, d)
	if err != nil {
		return "", fmt.Errorf("reading the %d-byte body after %q: %w", n, line, err)
	}
	if !strings.HasSuffix(body, "\r\n") {
		return "", fmt.Errorf("body of %q is not followed by CRLF: %q", line, body)
	}
	return line + "\r\n" + body, nil
}

// runScript runs sc against a fresh server of bin and returns the replies.
// A race the server reports (a race-built beanpole) is an error too.
func runScript(bin string, sc dscript) (out []dunit, err error) {
	srv, err := startProcRetry(bin, "tcp", "", sc.flags)
	if err != nil {
		return nil, err
	}
	defer func() {
		srv.stop()
		if why := srv.raceFailure(); why != "" {
			err = errors.Join(err, fmt.Errorf("the race detector fired in %s (%s); its output:\n%s", bin, why, srv.out.String()))
		}
	}()
	conns := map[int]*conn{}
	closed := map[int]bool{} // closed by the script
	defer func() {
		for _, c := range conns {
			c.nc.Close()
		}
	}()
	for i, st := range sc.steps {
		c := conns[st.conn]
		if c == nil {
			nc, err := net.DialTimeout(srv.network, srv.addr, defaultTimeout)
			if err != nil {
				return out, err
			}
			c = &conn{nc: nc}
			conns[st.conn] = c
		}
		if st.close {
			c.nc.Close()
			closed[st.conn] = true
			continue
		}
		if st.send != "" {
			_ = c.nc.SetWriteDeadline(time.Now().Add(defaultTimeout))
			if _, err := c.nc.Write([]byte(st.send)); err != nil {
				return out, fmt.Errorf("step %d: send: %v", i, err)
			}
		}
		for k := 0; k < st.replies; k++ {
			u, err := readUnit(c, defaultTimeout)
			if err != nil {
				return out, fmt.Errorf("step %d (%s): reply %d of %d: %v", i, show(st.send), k+1, st.replies, err)
			}
			out = append(out, dunit{i, st.conn, u})
		}
	}
	// Nothing more may arrive; a connection the server closed shows as such.
	// The connections are checked in parallel, each for a short quiet time.
	end := len(sc.steps)
	type tail struct {
		k int
		u string
	}
	tails := make(chan tail, len(conns))
	waiting := 0
	for k, c := range conns {
		if closed[k] {
			continue
		}
		waiting++
		go func() {
			if c.eof == nil {
				_ = c.fill(time.Now().Add(150 * time.Millisecond))
			}
			switch {
			case len(c.buf) > 0:
				tails <- tail{k, "<unexpected bytes> " + string(c.buf)}
			case c.eof != nil:
				tails <- tail{k, closedUnit}
			default:
				tails <- tail{k, ""}
			}
		}()
	}
	var ts []tail
	for ; waiting > 0; waiting-- {
		if tl := <-tails; tl.u != "" {
			ts = append(ts, tl)
		}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].k < ts[j].k })
	for _, tl := range ts {
		out = append(out, dunit{end, tl.k, tl.u})
	}
	return out, nil
}

// stringQuotedKeys are the YAML keys whose values 1.13 double-quotes.
var stringQuotedKeys = []string{"name", "tube", "hostname", "os", "platform"}

// normalise applies the documented normalisations to one reply unit.
func normalise(u string, legacy bool) string {
	m := bodyHeaderRE.FindStringSubmatch(strings.SplitN(u, "\r\n", 2)[0])
	if m == nil || !strings.HasPrefix(u, "OK ") {
		return u
	}
	body := strings.TrimSuffix(strings.SplitN(u, "\r\n", 2)[1], "\r\n")
	ls := strings.Split(body, "\n")
	isStats := strings.Contains(body, "\npid: ")
	if isStats {
		// beanpole's own stats keys have no counterpart to compare with.
		kept := ls[:0]
		for _, l := range ls {
			if k, _, _ := strings.Cut(l, ": "); !isBeanpoleStatsKey(k) {
				kept = append(kept, l)
			}
		}
		ls = kept
	}
	for i, l := range ls {
		k, v, ok := strings.Cut(l, ": ")
		if !ok {
			continue
		}
		if legacy {
			for _, qk := range stringQuotedKeys {
				if k == qk && !strings.HasPrefix(v, `"`) {
					v = `"` + v + `"`
				}
			}
		}
		// Elapsed-time fields depend on how fast each server ran the
		// script on a loaded machine; their exact values are asserted by
		// the catalogue tests, which control the timing.
		if k == "age" || k == "time-left" || k == "pause-time-left" {
			v = "<elapsed>"
		}
		if isStats {
			for _, vk := range statsVolatile {
				if k == vk {
					v = "<masked>"
				}
			}
		}
		ls[i] = k + ": " + v
	}
	body = strings.Join(ls, "\n")
	return fmt.Sprintf("OK %d\r\n%s\r\n", len(body), body)
}

func TestDifferential(t *testing.T) {
	if _, err := os.Stat(referenceBin); err != nil {
		t.Skipf("no reference beanstalkd at %s: %v", referenceBin, err)
	}
	t.Parallel()
	// Quoting bare values is a no-op on an already quoted (1.13) reference.
	refLegacy := true
	for _, sc := range diffScripts {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			ref, err := runScript(referenceBin, sc)
			if err != nil {
				t.Fatalf("reference %s: %v (the script is wrong)", referenceBin, err)
			}
			got, gerr := runScript(target.bin, sc)
			n := max(len(ref), len(got))
			for i := 0; i < n; i++ {
				var want, have string
				var step dstep
				var si int
				if i < len(ref) {
					want = normalise(ref[i].data, refLegacy)
					si = ref[i].step
				}
				if i < len(got) {
					have = normalise(got[i].data, target.legacy)
					if i >= len(ref) {
						si = got[i].step
					}
				}
				if si < len(sc.steps) {
					step = sc.steps[si]
				}
				if want != have || i >= len(ref) || i >= len(got) || ref[i].conn != got[i].conn {
					msg := fmt.Sprintf("reply %d differs at step %d (conn %d, sent %s):%s", i, si, step.conn, show(step.send), diffMsg(want, have))
					if gerr != nil {
						msg += "\n server under test: " + gerr.Error()
					}
					t.Fatal(msg)
				}
			}
			if gerr != nil {
				t.Fatalf("server under test: %v", gerr)
			}
		})
	}
}

// The normalisations themselves: a 1.12 reply and the same 1.13 reply
// compare equal; a bare string from a 1.13 target does not.
func TestDifferentialNormalise(t *testing.T) {
	t.Parallel()
	frame := func(body string) string { return fmt.Sprintf("OK %d\r\n%s\r\n", len(body), body) }
	old := frame("---\nname: foo\ncurrent-jobs-urgent: 0\n")
	cur := frame("---\nname: \"foo\"\ncurrent-jobs-urgent: 0\n")
	if normalise(old, true) != normalise(cur, false) {
		t.Fatalf("1.12 and 1.13 stats-tube differ after normalising:\n%q\n%q", normalise(old, true), normalise(cur, false))
	}
	if normalise(old, false) == normalise(cur, false) {
		t.Fatal("a bare tube name from a 1.13 target must not be normalised away")
	}
	a := frame("---\ncmd-put: 1\npid: 12\nversion: \"1.12\"\nrusage-utime: 0.001000\nuptime: 3\nid: 0123456789abcdef\nhostname: h\nos: o\nplatform: p\n")
	b := frame("---\ncmd-put: 1\npid: 99\nversion: \"1.13\"\nrusage-utime: 0.000000\nuptime: 0\nid: fedcba9876543210\nhostname: \"x\"\nos: \"y\"\nplatform: \"z\"\njob-memory-bytes: 74032\njob-memory-limit: 8000000\n")
	if normalise(a, true) != normalise(b, false) {
		t.Fatalf("stats differ after masking:\n%q\n%q", normalise(a, true), normalise(b, false))
	}
	c := frame("---\ncmd-put: 2\npid: 99\n")
	if normalise(c, false) == normalise(frame("---\ncmd-put: 1\npid: 99\n"), false) {
		t.Fatal("counters must not be masked")
	}
	job := frame("---\nid: 1\ntube: default\n")
	if normalise(job, false) != job {
		t.Fatal("the id of stats-job must not be masked")
	}
	if u := "RESERVED 1 1\r\nx\r\n"; normalise(u, true) != u {
		t.Fatal("job bodies must not be touched")
	}
}
