package e2e

// The core's ordering and durability promises, black-box, with exact bytes:
//
//   - TestCoreQuitAnswersEarlierCommands: a quit pipelined after commands
//     whose replies wait for the binlog (put, delete, bury) closes the
//     connection only after those replies went out.
//   - TestCoreHalfCloseAnswersEverything: a peer that sends commands and
//     then shuts down its sending side (SHUT_WR) gets every reply, then EOF,
//     as from C beanstalkd with -b; a reserve with nothing to reserve is
//     answered TIMED_OUT and the commands after it still run.
//   - TestCoreTimedOutKeepsCommandOrder: a TIMED_OUT (immediate, by timer or
//     for a half-closed peer) never overtakes the replies of the commands
//     before it that wait for the binlog.
//   - TestCoreReservedPutSurvivesKill: a job a waiting worker received is
//     in the binlog: kill -9 the moment RESERVED arrives, restart, the job
//     is there.
//   - TestCorePipelinedPutsInOrderAndDurable: 200 puts in one write are
//     answered in order with consecutive ids, and all survive kill -9.
//
// The race of a delete+reserve against another connection's put is in
// core_stress_test.go.
//
// Each test runs its assertions with -b at -f 0 and -f 50 and, where the
// promise is not about the binlog, with no -b as well. They pass against
// C beanstalkd 1.12 too (BEANPOLE_TEST_BIN=$(which beanstalkd)).

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// coreTimeout bounds every wait for a reply or an EOF in these tests:
// generous, a correct server answers in milliseconds.
const coreTimeout = 10 * time.Second

// coreMode is a way to run the server: its flags and whether it keeps a
// binlog (then kill -9 and a restart on the same directory must lose
// nothing that was acknowledged).
type coreMode struct {
	name   string
	binlog bool
	flags  []string // besides -b DIR
}

var (
	coreF0       = coreMode{"f0", true, []string{"-f", "0"}}
	coreF50      = coreMode{"f50", true, nil} // -f 50 is the default
	coreNoBinlog = coreMode{"nobinlog", false, nil}
)

// coreServer is a server of one mode; restart kills it with SIGKILL and
// starts a new one on the same binlog directory.
type coreServer struct {
	*server
	mode coreMode
	dir  string
}

func coreStart(t *testing.T, m coreMode) *coreServer {
	t.Helper()
	cs := &coreServer{mode: m}
	if m.binlog {
		cs.dir = t.TempDir()
	}
	cs.server = startServer(t, cs.args()...)
	return cs
}

func (cs *coreServer) args() []string {
	if !cs.mode.binlog {
		return cs.mode.flags
	}
	return append([]string{"-b", cs.dir}, cs.mode.flags...)
}

// restart is kill -9 and a new server on the same directory. Without -b
// it is an error to ask (the jobs would be gone).
func (cs *coreServer) restart(t *testing.T) {
	t.Helper()
	if !cs.mode.binlog {
		t.Fatal("restart without -b")
	}
	cs.server.stop()
	if why := cs.server.raceFailure(); why != "" {
		t.Errorf("the race detector fired in the killed server (%s):\n%s", why, cs.server.out.String())
	}
	cs.server = startServer(t, cs.args()...)
}

// coreRun runs f as a parallel subtest for each mode.
func coreRun(t *testing.T, modes []coreMode, f func(t *testing.T, m coreMode)) {
	t.Helper()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			f(t, m)
		})
	}
}

// coreServerState says whether s is still running and, if it is not, how
// it ended and what it printed (a panic's stack, most likely).
func coreServerState(s *server) string {
	select {
	case <-s.exited:
		return fmt.Sprintf("the server process EXITED (%v); its output:\n%s", s.waitErr, s.out.String())
	default:
		return "the server process is still running"
	}
}

// coreRead reads exactly want from c; on a mismatch, a timeout or a closed
// connection it returns an error with the bytes seen and the server's state.
func coreRead(s *server, c *conn, want, what string) error {
	deadline := time.Now().Add(coreTimeout)
	var err error
	for len(c.buf) < len(want) && strings.HasPrefix(want, string(c.buf)) {
		if err = c.fill(deadline); err != nil {
			break
		}
	}
	if len(c.buf) >= len(want) && string(c.buf[:len(want)]) == want {
		c.buf = c.buf[len(want):]
		return nil
	}
	if err == nil { // wrong bytes: collect a little more for the message
		_ = c.fill(time.Now().Add(100 * time.Millisecond))
	}
	return fmt.Errorf("%s: %s%s\n%s", what, coreErr(err), diffMsg(want, string(c.buf)), coreServerState(s))
}

// coreExpect is coreRead failing t.
func coreExpect(t testing.TB, s *server, c *conn, want, what string) {
	t.Helper()
	if err := coreRead(s, c, want, what); err != nil {
		t.Fatal(err)
	}
}

func coreErr(err error) string {
	switch {
	case err == nil:
		return "wrong reply"
	case isTimeout(err):
		return fmt.Sprintf("no (complete) reply within %v", coreTimeout)
	case errors.Is(err, io.EOF):
		return "the server closed the connection (EOF)"
	default:
		return "read: " + err.Error()
	}
}

// coreReadLine reads one reply line (without its CRLF).
func coreReadLine(s *server, c *conn, what string) (string, error) {
	deadline := time.Now().Add(coreTimeout)
	for {
		if i := strings.Index(string(c.buf), "\r\n"); i >= 0 {
			line := string(c.buf[:i])
			c.buf = c.buf[i+2:]
			return line, nil
		}
		if err := c.fill(deadline); err != nil {
			return "", fmt.Errorf("%s: %s, have %s\n%s", what, coreErr(err), show(string(c.buf)), coreServerState(s))
		}
	}
}

// coreLine is coreReadLine failing t.
func coreLine(t testing.TB, s *server, c *conn, what string) string {
	t.Helper()
	line, err := coreReadLine(s, c, what)
	if err != nil {
		t.Fatal(err)
	}
	return line
}

// coreExpectEOF reads everything c receives until the server closes it and
// fails unless that is exactly want followed by an orderly close. A reset
// is reported as such: it can destroy replies in flight, so it is never
// what these tests expect.
func coreExpectEOF(t testing.TB, s *server, c *conn, want, what string) {
	t.Helper()
	deadline := time.Now().Add(coreTimeout)
	var err error
	for err == nil {
		err = c.fill(deadline)
	}
	got := string(c.buf)
	c.buf = nil
	switch {
	case isTimeout(err):
		t.Fatalf("%s: the connection is still open after %v;%s\n%s", what, coreTimeout, diffMsg(want+"<EOF>", got), coreServerState(s))
	case !errors.Is(err, io.EOF):
		t.Fatalf("%s: the connection ended with %v, not EOF;%s\n%s", what, err, diffMsg(want+"<EOF>", got+"<"+err.Error()+">"), coreServerState(s))
	case got != want:
		t.Fatalf("%s: wrong replies before EOF;%s\n%s", what, diffMsg(want+"<EOF>", got+"<EOF>"), coreServerState(s))
	}
}

// coreCloseWrite shuts down c's sending side (the server sees EOF).
func coreCloseWrite(t testing.TB, c *conn) {
	t.Helper()
	cw, ok := c.nc.(interface{ CloseWrite() error })
	if !ok {
		t.Fatalf("%T has no CloseWrite", c.nc)
	}
	if err := cw.CloseWrite(); err != nil {
		t.Fatal(err)
	}
}

// coreSession dials, sends in (one write), optionally half-closes, and
// expects exactly want and then EOF.
func coreSession(t testing.TB, s *server, in string, halfClose bool, want string) {
	t.Helper()
	c := s.dial(t)
	mustSend(t, c, in)
	if halfClose {
		coreCloseWrite(t, c)
	}
	coreExpectEOF(t, s, c, want, fmt.Sprintf("after sending %s%s", show(in), map[bool]string{true: " and half-closing", false: ""}[halfClose]))
	c.nc.Close()
}

// coreRequest sends in on c and expects exactly want.
func coreRequest(t testing.TB, s *server, c *conn, in, want string) {
	t.Helper()
	mustSend(t, c, in)
	coreExpect(t, s, c, want, "reply to "+show(in))
}

// coreJobState expects stats-job id to answer with the given state and
// tube.
func coreJobState(t testing.TB, s *server, c *conn, id uint64, state, tube string) {
	t.Helper()
	mustSend(t, c, fmt.Sprintf("stats-job %d\r\n", id))
	line := coreLine(t, s, c, fmt.Sprintf("stats-job %d", id))
	var n int
	if _, err := fmt.Sscanf(line, "OK %d", &n); err != nil {
		t.Fatalf("stats-job %d: want OK <bytes> (the job must exist), got %s\n%s", id, show(line), coreServerState(s))
	}
	body := readN(t, c, n+2, coreTimeout)
	m := yamlMap(t, body[:n])
	if m["state"] != state || m["tube"] != q(tube) {
		t.Fatalf("stats-job %d: state %q tube %s, want state %q tube %s:\n%s", id, m["state"], m["tube"], state, q(tube), body)
	}
}

// ---------------------------------------------------------------------------
// 2. quit after replies that wait for the binlog.

// A quit pipelined behind put, delete and bury (in the same write) closes
// the connection only after their replies: `use x` + put + quit answers
// `USING x\r\nINSERTED 1\r\n` then EOF; `reserve` + `bury 1 0` + quit
// answers `RESERVED 1 5\r\nhello\r\nBURIED\r\n` then EOF; `delete 1` + quit
// answers `DELETED\r\n` then EOF. Each acknowledged change is visible to
// the next connection and, with -b, survives kill -9. Then 20 more
// put+quit connections, each answered INSERTED with the next id.
func TestCoreQuitAnswersEarlierCommands(t *testing.T) {
	t.Parallel()
	coreRun(t, []coreMode{coreF0, coreF50, coreNoBinlog}, func(t *testing.T, m coreMode) {
		cs := coreStart(t, m)
		restart := func() {
			if m.binlog {
				cs.restart(t)
			}
		}

		coreSession(t, cs.server, "use x\r\nput 0 0 60 5\r\nhello\r\nquit\r\n", false, "USING x\r\nINSERTED 1\r\n")
		ctl := cs.dial(t)
		coreJobState(t, cs.server, ctl, 1, "ready", "x")
		restart()
		ctl = cs.dial(t)
		coreJobState(t, cs.server, ctl, 1, "ready", "x")

		w := cs.dial(t)
		coreRequest(t, cs.server, w, "watch x\r\n", "WATCHING 2\r\n")
		mustSend(t, w, "reserve\r\nbury 1 0\r\nquit\r\n")
		coreExpectEOF(t, cs.server, w, "RESERVED 1 5\r\nhello\r\nBURIED\r\n", `after "reserve\r\nbury 1 0\r\nquit\r\n"`)
		coreJobState(t, cs.server, ctl, 1, "buried", "x")
		restart()
		ctl = cs.dial(t)
		coreJobState(t, cs.server, ctl, 1, "buried", "x")

		coreSession(t, cs.server, "delete 1\r\nquit\r\n", false, "DELETED\r\n")
		coreRequest(t, cs.server, ctl, "peek 1\r\n", "NOT_FOUND\r\n")
		restart()
		ctl = cs.dial(t)
		coreRequest(t, cs.server, ctl, "peek 1\r\n", "NOT_FOUND\r\n")

		// The next id: 2 (C beanstalkd 1.12 reuses 1 after the restart).
		mustSend(t, ctl, "use x\r\nput 0 0 60 5\r\nhello\r\n")
		coreExpect(t, cs.server, ctl, "USING x\r\n", "use x")
		line := coreLine(t, cs.server, ctl, "put")
		var first int
		if _, err := fmt.Sscanf(line, "INSERTED %d", &first); err != nil {
			t.Fatalf("put: got %s, want INSERTED <id>", show(line))
		}
		for id := first + 1; id <= first+20; id++ {
			coreSession(t, cs.server, "use x\r\nput 0 0 60 5\r\nhello\r\nquit\r\n", false, fmt.Sprintf("USING x\r\nINSERTED %d\r\n", id))
		}
		mustSend(t, ctl, "stats-tube x\r\n")
		body := readYAML(t, ctl)
		if n := yamlMap(t, body)["current-jobs-ready"]; n != "21" {
			t.Fatalf("stats-tube x: current-jobs-ready %s, want 21:\n%s", n, body)
		}
	})
}

// ---------------------------------------------------------------------------
// 3. half-close.

// A peer that sends commands and then half-closes gets every reply, then
// EOF (C beanstalkd with -b answers exactly so). Each variant on a fresh
// server:
//   - put-list: `put 0 0 60 1\r\nx\r\nlist-tube-used\r\n` → `INSERTED 1\r\nUSING default\r\n`,
//     and the job exists afterwards (with -b, after kill -9 too);
//   - put: `put 0 0 60 1\r\nx\r\n` alone → `INSERTED 1\r\n`, likewise;
//   - reserve-list: nothing to reserve, `reserve\r\nlist-tube-used\r\n`
//     → `TIMED_OUT\r\nUSING default\r\n`: the reserve is answered for the
//     half-closed peer and the command after it still runs;
//   - use-reserve-list-put: `use other\r\nreserve\r\nlist-tube-used\r\nput 0 0 60 1\r\nz\r\n`
//     → `USING other\r\nTIMED_OUT\r\nUSING other\r\nINSERTED 1\r\n`, and job 1 exists.
func TestCoreHalfCloseAnswersEverything(t *testing.T) {
	t.Parallel()
	coreRun(t, []coreMode{coreF0, coreF50, coreNoBinlog}, func(t *testing.T, m coreMode) {
		variants := []struct{ name, in, want, peek string }{
			{"put-list", "put 0 0 60 1\r\nx\r\nlist-tube-used\r\n", "INSERTED 1\r\nUSING default\r\n", "FOUND 1 1\r\nx\r\n"},
			{"put", "put 0 0 60 1\r\nx\r\n", "INSERTED 1\r\n", "FOUND 1 1\r\nx\r\n"},
			{"reserve-list", "reserve\r\nlist-tube-used\r\n", "TIMED_OUT\r\nUSING default\r\n", "NOT_FOUND\r\n"},
			{"use-reserve-list-put", "use other\r\nreserve\r\nlist-tube-used\r\nput 0 0 60 1\r\nz\r\n",
				"USING other\r\nTIMED_OUT\r\nUSING other\r\nINSERTED 1\r\n", "FOUND 1 1\r\nz\r\n"},
		}
		for _, v := range variants {
			t.Run(v.name, func(t *testing.T) {
				t.Parallel()
				cs := coreStart(t, m)
				coreSession(t, cs.server, v.in, true, v.want)
				ctl := cs.dial(t)
				coreRequest(t, cs.server, ctl, "peek 1\r\n", v.peek)
				if m.binlog {
					cs.restart(t)
					ctl = cs.dial(t)
					coreRequest(t, cs.server, ctl, "peek 1\r\n", v.peek)
				}
			})
		}
	})
}

// ---------------------------------------------------------------------------
// 4. TIMED_OUT keeps the command order.

// A TIMED_OUT comes after the replies of every command before it on the
// connection, also when those replies wait for the binlog. The jobs are put
// into a tube the connection does not watch, so its reserve finds nothing.
// Each variant on a fresh server:
//   - rwt0: `use other` + put + `reserve-with-timeout 0` → `USING other\r\nINSERTED 1\r\nTIMED_OUT\r\n`,
//     then a put + `reserve-with-timeout 0` + list-tube-used on the same
//     connection, 20 times;
//   - rwt1: the same with `reserve-with-timeout 1` (answered by the timer), once;
//   - puts-halfclose: `use other` + 50 puts + `reserve`, then SHUT_WR →
//     USING, INSERTED in order, TIMED_OUT, EOF; 20 connections;
//   - delete-halfclose: `delete <n>` of a job another connection put, then
//     `reserve`, then SHUT_WR → `DELETED\r\nTIMED_OUT\r\n`, EOF; 20 times.
func TestCoreTimedOutKeepsCommandOrder(t *testing.T) {
	t.Parallel()
	coreRun(t, []coreMode{coreF0, coreF50, coreNoBinlog}, func(t *testing.T, m coreMode) {
		t.Run("rwt0", func(t *testing.T) {
			t.Parallel()
			s := coreStart(t, m).server
			c := s.dial(t)
			coreRequest(t, s, c, "use other\r\nput 0 0 60 1\r\nx\r\nreserve-with-timeout 0\r\n",
				"USING other\r\nINSERTED 1\r\nTIMED_OUT\r\n")
			for id := 2; id <= 21; id++ {
				coreRequest(t, s, c, "put 0 0 60 1\r\nx\r\nreserve-with-timeout 0\r\nlist-tube-used\r\n",
					fmt.Sprintf("INSERTED %d\r\nTIMED_OUT\r\nUSING other\r\n", id))
			}
		})
		t.Run("rwt1", func(t *testing.T) {
			t.Parallel()
			s := coreStart(t, m).server
			c := s.dial(t)
			coreRequest(t, s, c, "use other\r\nput 0 0 60 1\r\nx\r\nreserve-with-timeout 1\r\nlist-tube-used\r\n",
				"USING other\r\nINSERTED 1\r\nTIMED_OUT\r\nUSING other\r\n")
		})
		t.Run("puts-halfclose", func(t *testing.T) {
			t.Parallel()
			s := coreStart(t, m).server
			next := 1
			for round := 0; round < 20; round++ {
				var in, want strings.Builder
				in.WriteString("use other\r\n")
				want.WriteString("USING other\r\n")
				for i := 0; i < 50; i++ {
					fmt.Fprintf(&in, "put 0 0 60 2\r\n%02d\r\n", i)
					fmt.Fprintf(&want, "INSERTED %d\r\n", next)
					next++
				}
				in.WriteString("reserve\r\n")
				want.WriteString("TIMED_OUT\r\n")
				coreSession(t, s, in.String(), true, want.String())
			}
		})
		t.Run("delete-halfclose", func(t *testing.T) {
			t.Parallel()
			s := coreStart(t, m).server
			p := s.dial(t)
			coreRequest(t, s, p, "use other\r\n", "USING other\r\n")
			for id := 1; id <= 20; id++ {
				coreRequest(t, s, p, "put 0 0 60 1\r\nx\r\n", fmt.Sprintf("INSERTED %d\r\n", id))
				coreSession(t, s, fmt.Sprintf("delete %d\r\nreserve\r\n", id), true, "DELETED\r\nTIMED_OUT\r\n")
			}
		})
	})
}

// ---------------------------------------------------------------------------
// 5. A job a waiter received is durable.

// A put handed to a worker waiting in reserve is in the binlog before the
// worker gets it: a worker parks in reserve (on a tube of its own), a
// producer puts (1 or 8 jobs in one write), and the moment RESERVED <id>
// arrives the server is killed with SIGKILL; after a restart on the same
// directory `peek <id>` finds the job with its body. 20 rounds at -f 0 and
// at -f 50 (BEANPOLE_CORE_KILL_ROUNDS=N for more).
func TestCoreReservedPutSurvivesKill(t *testing.T) {
	t.Parallel()
	coreRun(t, []coreMode{coreF0, coreF50}, func(t *testing.T, m coreMode) {
		cs := coreStart(t, m)
		rounds := 20
		if n, err := strconv.Atoi(os.Getenv("BEANPOLE_CORE_KILL_ROUNDS")); err == nil && n > 0 {
			rounds = n
		} else if target.legacy {
			rounds = 10 // C preallocates its binlog at every start: slow restarts
		}
		for round := 1; round <= rounds; round++ {
			s := cs.server
			tube := fmt.Sprintf("r%d", round)
			ctl, w, p := s.dial(t), s.dial(t), s.dial(t)
			coreRequest(t, s, w, "watch "+tube+"\r\nignore default\r\n", "WATCHING 2\r\nWATCHING 1\r\n")
			mustSend(t, w, "reserve\r\n")
			waitWaiting(t, ctl, 1)
			k := 1
			if round%2 == 0 {
				k = 8
			}
			var in strings.Builder
			in.WriteString("use " + tube + "\r\n")
			for i := 0; i < k; i++ {
				fmt.Fprintf(&in, "put 0 0 60 %d\r\n%s-%d\r\n", len(tube)+2, tube, i)
			}
			mustSend(t, p, in.String())
			line := coreLine(t, s, w, "the parked worker's reply")
			var id uint64
			var n int
			if _, err := fmt.Sscanf(line, "RESERVED %d %d", &id, &n); err != nil || line != fmt.Sprintf("RESERVED %d %d", id, n) {
				t.Fatalf("round %d: the worker got %s, want RESERVED <id> <bytes>", round, show(line))
			}
			body := readN(t, w, n+2, coreTimeout) // one write with the header
			cs.restart(t)                         // kill -9 the moment the worker has its job
			ctl = cs.dial(t)
			mustSend(t, ctl, fmt.Sprintf("peek %d\r\n", id))
			coreExpect(t, cs.server, ctl, fmt.Sprintf("FOUND %d %d\r\n%s", id, n, body),
				fmt.Sprintf("round %d (%d puts): after kill -9, the job %d a worker had received", round, k, id))
			ctl.nc.Close()
			w.nc.Close()
			p.nc.Close()
		}
	})
}

// ---------------------------------------------------------------------------
// 6. Pipelined puts.

// 200 puts in one write are answered INSERTED 1 .. INSERTED 200 in order;
// after kill -9 and a restart on the same directory every one is there
// with its body, and the next put is INSERTED 201.
func TestCorePipelinedPutsInOrderAndDurable(t *testing.T) {
	t.Parallel()
	coreRun(t, []coreMode{coreF0, coreF50}, func(t *testing.T, m coreMode) {
		cs := coreStart(t, m)
		c := cs.dial(t)
		const n = 200
		var in, want, peeks, found strings.Builder
		for id := 1; id <= n; id++ {
			body := fmt.Sprintf("job-%03d", id)
			fmt.Fprintf(&in, "put 0 0 60 %d\r\n%s\r\n", len(body), body)
			fmt.Fprintf(&want, "INSERTED %d\r\n", id)
			fmt.Fprintf(&peeks, "peek %d\r\n", id)
			fmt.Fprintf(&found, "FOUND %d %d\r\n%s\r\n", id, len(body), body)
		}
		coreRequest(t, cs.server, c, in.String(), want.String())
		cs.restart(t)
		c = cs.dial(t)
		coreRequest(t, cs.server, c, peeks.String(), found.String())
		coreRequest(t, cs.server, c, "put 0 0 60 1\r\nx\r\n", fmt.Sprintf("INSERTED %d\r\n", n+1))
	})
}
