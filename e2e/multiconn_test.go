package e2e

// Several connections at once: ownership of reserved jobs, waiters and who
// gets a job, connections closing with reserved jobs or while waiting, and
// half-close.

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Upstream's cttest_delete_reserved_by_other.
func TestDeleteReservedByOther(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	a, b := s.dial(t), s.dial(t)
	put(t, a, 0, 0, 10, "x", 1)
	mustSend(t, b, "reserve\r\n")
	expect(t, b, "RESERVED 1 1\r\nx\r\n")
	runSteps(t, a, []step{
		{"delete 1\r\n", "NOT_FOUND\r\n"},
		{"release 1 0 0\r\n", "NOT_FOUND\r\n"},
		{"bury 1 0\r\n", "NOT_FOUND\r\n"},
		{"touch 1\r\n", "NOT_FOUND\r\n"},
		{"reserve-job 1\r\n", "NOT_FOUND\r\n"},
		{"kick-job 1\r\n", "NOT_FOUND\r\n"},
		{"peek 1\r\n", "FOUND 1 1\r\nx\r\n"},
	})
	mustSend(t, b, "delete 1\r\n")
	expect(t, b, "DELETED\r\n")
}

// Any connection may delete a ready, delayed or buried job.
func TestDeleteByOtherConnection(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	a, b := s.dial(t), s.dial(t)
	runSteps(t, a, []step{
		{"put 0 0 10 1\r\nr\r\n", "INSERTED 1\r\n"},
		{"put 0 100 10 1\r\nd\r\n", "INSERTED 2\r\n"},
		{"put 0 0 10 1\r\nb\r\n", "INSERTED 3\r\n"},
		{"reserve-job 3\r\n", "RESERVED 3 1\r\nb\r\n"},
		{"bury 3 0\r\n", "BURIED\r\n"},
	})
	runSteps(t, b, []step{
		{"delete 1\r\n", "DELETED\r\n"},
		{"delete 2\r\n", "DELETED\r\n"},
		{"delete 3\r\n", "DELETED\r\n"},
	})
	mustSend(t, a, "reserve-with-timeout 0\r\n")
	expect(t, a, "TIMED_OUT\r\n")
}

// Upstream's cttest_reserve_with_timeout_2conns (upstream issues #78/#104):
// another connection's watch does not disturb a waiting
// reserve-with-timeout.
func TestReserveWithTimeout2Conns(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	a, b := s.dial(t), s.dial(t)
	mustSend(t, a, "watch foo\r\n")
	expect(t, a, "WATCHING 2\r\n")
	start := time.Now()
	mustSend(t, a, "reserve-with-timeout 1\r\n")
	mustSend(t, b, "watch foo\r\n")
	expect(t, b, "WATCHING 2\r\n")
	expectWithin(t, a, "TIMED_OUT\r\n", defaultTimeout)
	checkElapsed(t, "TIMED_OUT", start, time.Second)
}

// Upstream's cttest_close_releases_job and cttest_quit_releases_job:
// closing (or quitting) a connection with a reserved job makes the job
// ready at once, long before its TTR.
func TestCloseReleasesJob(t *testing.T) {
	t.Parallel()
	testConnEndReleasesJob(t, func(t *testing.T, c *conn) { c.nc.Close() })
}

func TestQuitReleasesJob(t *testing.T) {
	t.Parallel()
	testConnEndReleasesJob(t, func(t *testing.T, c *conn) { mustSend(t, c, "quit\r\n") })
}

func testConnEndReleasesJob(t *testing.T, end func(*testing.T, *conn)) {
	s := startServer(t)
	prod, cons := s.dial(t), s.dial(t)
	mustSend(t, cons, "reserve-with-timeout 1\r\n")
	waitWaiting(t, prod, 1)
	put(t, prod, 0, 0, 100, "a", 1)
	expect(t, cons, "RESERVED 1 1\r\na\r\n")
	mustSend(t, prod, "stats-job 1\r\n")
	expectYAMLContains(t, prod, "\nstate: reserved\n")
	end(t, cons)
	start := time.Now()
	mustSend(t, prod, "reserve-with-timeout 1\r\n")
	expect(t, prod, "RESERVED 1 1\r\na\r\n")
	if el := time.Since(start); el > 900*time.Millisecond {
		t.Fatalf("the job came back after %v", el)
	}
}

// Jobs returned by a closing connection keep their priority and
// counters: reserves stays, no release, no timeout.
func TestCloseWithReservedJobsCounters(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	a, b := s.dial(t), s.dial(t)
	runSteps(t, a, []step{
		{"put 7 0 100 1\r\nx\r\n", "INSERTED 1\r\n"},
		{"put 8 0 100 1\r\ny\r\n", "INSERTED 2\r\n"},
	})
	runSteps(t, b, []step{
		{"reserve\r\n", "RESERVED 1 1\r\nx\r\n"},
		{"reserve\r\n", "RESERVED 2 1\r\ny\r\n"},
	})
	b.nc.Close()
	waitFor(t, defaultTimeout, "the jobs to be ready", func() bool {
		return stats(t, a)["current-jobs-ready"] == "2"
	})
	for id, pri := range map[uint64]string{1: "7", 2: "8"} {
		j := statsJob(t, a, id)
		if j["state"] != "ready" || j["pri"] != pri || j["reserves"] != "1" || j["releases"] != "0" || j["timeouts"] != "0" {
			t.Fatalf("stats-job %d: %v", id, j)
		}
	}
	st := stats(t, a)
	if st["current-connections"] != "1" || st["current-workers"] != "0" || st["cmd-release"] != "0" || st["job-timeouts"] != "0" {
		t.Fatalf("stats: connections %s workers %s cmd-release %s job-timeouts %s",
			st["current-connections"], st["current-workers"], st["cmd-release"], st["job-timeouts"])
	}
}

// A waiter that closes is forgotten; the next put stays ready or goes
// to a live waiter.
func TestCloseWhileWaiting(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctl, w1, w2 := s.dial(t), s.dial(t), s.dial(t)
	mustSend(t, w1, "reserve\r\n")
	waitWaiting(t, ctl, 1)
	mustSend(t, w2, "reserve\r\n")
	waitWaiting(t, ctl, 2)
	w1.nc.Close()
	waitWaiting(t, ctl, 1)
	put(t, ctl, 0, 0, 10, "x", 1)
	expect(t, w2, "RESERVED 1 1\r\nx\r\n")
	put(t, ctl, 0, 0, 10, "y", 2)
	if st := statsTube(t, ctl, "default"); st["current-jobs-ready"] != "1" || st["current-waiting"] != "0" {
		t.Fatalf("ready %s waiting %s", st["current-jobs-ready"], st["current-waiting"])
	}
}

// Extra (beanpole's FIFO waiters, docs/behaviour.md): waiting reservers are served in FIFO order.
func TestWaitersFIFO(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctl := s.dial(t)
	const n = 4
	var ws []*conn
	for i := 0; i < n; i++ {
		w := s.dial(t)
		mustSend(t, w, "reserve\r\n")
		waitWaiting(t, ctl, i+1)
		ws = append(ws, w)
	}
	if target.legacy {
		// Upstream's ms_take is quasi-round-robin. Record what it does, then skip.
		var order []int
		for i := 1; i <= n; i++ {
			put(t, ctl, 0, 0, 10, fmt.Sprint(i), uint64(i))
			for k, w := range ws {
				if w != nil {
					if err := w.fill(time.Now().Add(50 * time.Millisecond)); err == nil && len(w.buf) > 0 {
						order = append(order, k)
						ws[k] = nil
						break
					}
				}
			}
		}
		t.Logf("beanstalkd 1.12 served waiters in order %v", order)
		skipLegacy(t, "FIFO waiters (docs/behaviour.md); upstream is quasi-round-robin")
	}
	for i, w := range ws {
		put(t, ctl, 0, 0, 10, fmt.Sprint(i+1), uint64(i+1))
		expect(t, w, fmt.Sprintf("RESERVED %d 1\r\n%d\r\n", i+1, i+1))
	}
}

// Two waiters on the same tube: one job goes to exactly one of them;
// the first waiter gets it (FIFO: docs/behaviour.md, 'Waiting reservers').
func TestTwoWaitersOneJob(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctl, w1, w2 := s.dial(t), s.dial(t), s.dial(t)
	mustSend(t, w1, "reserve-with-timeout 10\r\n")
	waitWaiting(t, ctl, 1)
	mustSend(t, w2, "reserve-with-timeout 10\r\n")
	waitWaiting(t, ctl, 2)
	put(t, ctl, 0, 0, 10, "x", 1)
	expect(t, w1, "RESERVED 1 1\r\nx\r\n")
	expectNothing(t, w2, 100*time.Millisecond)
	if st := stats(t, ctl); st["current-waiting"] != "1" {
		t.Fatalf("current-waiting %s", st["current-waiting"])
	}
	// A release wakes the other waiter at once.
	mustSend(t, w1, "release 1 0 0\r\n")
	expect(t, w1, "RELEASED\r\n")
	expect(t, w2, "RESERVED 1 1\r\nx\r\n")
}

// A waiter watching several tubes is woken by a put into any of them,
// and gets the globally most urgent job among its tubes.
func TestWaiterOnSeveralTubes(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctl, w := s.dial(t), s.dial(t)
	runSteps(t, w, []step{
		{"watch a\r\n", "WATCHING 2\r\n"},
		{"watch b\r\n", "WATCHING 3\r\n"},
		{"ignore default\r\n", "WATCHING 2\r\n"},
	})
	mustSend(t, w, "reserve\r\n")
	waitWaiting(t, ctl, 1)
	runSteps(t, ctl, []step{
		{"put 0 0 10 1\r\nd\r\n", "INSERTED 1\r\n"}, // default: not watched
		{"use b\r\n", "USING b\r\n"},
	})
	expectNothing(t, w, 100*time.Millisecond)
	mustSend(t, ctl, "stats-tube b\r\n")
	expectYAMLContains(t, ctl, "\ncurrent-waiting: 1\n")
	put(t, ctl, 5, 0, 10, "b", 2)
	expect(t, w, "RESERVED 2 1\r\nb\r\n")
	runSteps(t, ctl, []step{
		{"put 3 0 10 1\r\nB\r\n", "INSERTED 3\r\n"},
		{"use a\r\n", "USING a\r\n"},
		{"put 2 0 10 1\r\nA\r\n", "INSERTED 4\r\n"},
	})
	runSteps(t, w, []step{
		{"reserve\r\n", "RESERVED 4 1\r\nA\r\n"},
		{"reserve\r\n", "RESERVED 3 1\r\nB\r\n"},
		{"reserve-with-timeout 0\r\n", "TIMED_OUT\r\n"},
	})
}

// A peer that half-closes (shutdown SHUT_WR) while waiting in reserve
// gets TIMED_OUT, then the server closes the connection.
func TestHalfCloseWhileReserving(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctl, w := s.dial(t), s.dial(t)
	mustSend(t, w, "reserve\r\n")
	waitWaiting(t, ctl, 1)
	type closeWriter interface{ CloseWrite() error }
	if err := w.nc.(closeWriter).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	expect(t, w, "TIMED_OUT\r\n")
	expectClosed(t, w)
	waitWaiting(t, ctl, 0)
	// The waiter is gone: a put stays ready.
	put(t, ctl, 0, 0, 10, "x", 1)
	mustSend(t, ctl, "peek-ready\r\n")
	expect(t, ctl, "FOUND 1 1\r\nx\r\n")
}

// The same over a unix socket.
func TestHalfCloseWhileReservingUnix(t *testing.T) {
	t.Parallel()
	s := startUnixServer(t, shortTempDir(t)+"/sock")
	ctl, w := s.dial(t), s.dial(t)
	mustSend(t, w, "reserve-with-timeout 100\r\n")
	waitWaiting(t, ctl, 1)
	type closeWriter interface{ CloseWrite() error }
	if err := w.nc.(closeWriter).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	expect(t, w, "TIMED_OUT\r\n")
	expectClosed(t, w)
}

// Producers and consumers on several connections at once: every job
// is delivered exactly once.
func TestConcurrentProducersConsumers(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	const producers, consumers, perProducer = 4, 4, 50
	total := producers * perProducer
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan string, producers+consumers)
	conns := make([]*conn, producers+consumers)
	for i := range conns {
		conns[i] = s.dial(t)
	}
	for i := 0; i < consumers; i++ {
		c := conns[producers+i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, err := c.nc.Write([]byte("reserve-with-timeout 2\r\n")); err != nil {
					errs <- err.Error()
					return
				}
				line, err := c.readLineErr(10 * time.Second)
				if err != nil {
					errs <- err.Error()
					return
				}
				if line == "TIMED_OUT" {
					return
				}
				var id, n int
				if _, err := fmt.Sscanf(line, "RESERVED %d %d", &id, &n); err != nil {
					errs <- "bad reply " + line
					return
				}
				body, err := c.readNErr(n+2, 10*time.Second)
				if err != nil {
					errs <- err.Error()
					return
				}
				if _, err := fmt.Fprintf(c.nc, "delete %d\r\n", id); err != nil {
					errs <- err.Error()
					return
				}
				if l, err := c.readLineErr(10 * time.Second); err != nil || l != "DELETED" {
					errs <- fmt.Sprintf("delete %d: %q %v", id, l, err)
					return
				}
				mu.Lock()
				got[strings.TrimSuffix(body, "\r\n")]++
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < producers; i++ {
		c := conns[i]
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			var b strings.Builder
			for k := 0; k < perProducer; k++ {
				body := fmt.Sprintf("p%d-%d", p, k)
				fmt.Fprintf(&b, "put %d 0 60 %d\r\n%s\r\n", k%3, len(body), body)
			}
			if _, err := c.nc.Write([]byte(b.String())); err != nil {
				errs <- err.Error()
				return
			}
			for k := 0; k < perProducer; k++ {
				if l, err := c.readLineErr(10 * time.Second); err != nil || !strings.HasPrefix(l, "INSERTED ") {
					errs <- fmt.Sprintf("put: %q %v", l, err)
					return
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	var dup []string
	for k, n := range got {
		if n != 1 {
			dup = append(dup, k)
		}
	}
	sort.Strings(dup)
	if len(got) != total || len(dup) > 0 {
		t.Fatalf("delivered %d distinct jobs of %d; duplicated: %v", len(got), total, dup)
	}
}

// readLineErr and readNErr are the goroutine-safe (no testing.T) variants
// of readLine and readN.
func (c *conn) readLineErr(d time.Duration) (string, error) {
	deadline := time.Now().Add(d)
	for {
		if i := strings.Index(string(c.buf), "\r\n"); i >= 0 {
			line := string(c.buf[:i])
			c.buf = c.buf[i+2:]
			return line, nil
		}
		if err := c.fill(deadline); err != nil {
			return "", err
		}
	}
}

func (c *conn) readNErr(n int, d time.Duration) (string, error) {
	deadline := time.Now().Add(d)
	for len(c.buf) < n {
		if err := c.fill(deadline); err != nil {
			return "", err
		}
	}
	s := string(c.buf[:n])
	c.buf = c.buf[n:]
	return s, nil
}

// Connections come and go while others stay: the kernel hands a closed
// connection's descriptor number to the next one accepted, which may land
// on another event loop. Every connection must still get its own replies
// and only those: each one uses a tube of its own and is asked for it
// after every round of closes and reconnects. Closed connections must leave
// the count, and a job put on a new connection is the one reserved there.
func TestDescriptorsReusedAcrossConnections(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	const open, rounds = 48, 12
	rng := rand.New(rand.NewPCG(7, 11))
	admin := s.dial(t)
	conns := make([]*conn, open)
	tubes := make([]string, open)
	next := 0
	dialOwn := func(i int) {
		c := s.dial(t)
		tubes[i] = fmt.Sprintf("t%d", next)
		next++
		mustSend(t, c, "use "+tubes[i]+"\r\n")
		expect(t, c, "USING "+tubes[i]+"\r\n")
		conns[i] = c
	}
	for i := range conns {
		dialOwn(i)
	}
	for r := 0; r < rounds; r++ {
		closed := rng.Perm(open)[:open/2]
		for _, i := range closed {
			conns[i].nc.Close()
		}
		// The server has closed them (and freed their numbers) once the
		// count says so.
		deadline := time.Now().Add(10 * time.Second)
		for stats(t, admin)["current-connections"] != fmt.Sprint(open/2+1) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: current-connections %s, want %d", r, stats(t, admin)["current-connections"], open/2+1)
			}
			time.Sleep(5 * time.Millisecond)
		}
		for _, i := range closed {
			dialOwn(i)
		}
		for i, c := range conns {
			mustSend(t, c, "list-tube-used\r\n")
			expect(t, c, "USING "+tubes[i]+"\r\n")
		}
		for _, i := range closed {
			c := conns[i]
			mustSend(t, c, "put 0 0 60 "+fmt.Sprint(len(tubes[i]))+"\r\n"+tubes[i]+"\r\n")
			id, ok := strings.CutPrefix(readLine(t, c), "INSERTED ")
			if !ok {
				t.Fatalf("round %d: put on a new connection: no INSERTED", r)
			}
			mustSend(t, c, "watch "+tubes[i]+"\r\nignore default\r\nreserve\r\n")
			expect(t, c, "WATCHING 2\r\nWATCHING 1\r\nRESERVED "+strings.TrimPrefix(id, "INSERTED ")+" "+fmt.Sprint(len(tubes[i]))+"\r\n"+tubes[i]+"\r\n")
		}
	}
	if got := stats(t, admin)["current-connections"]; got != fmt.Sprint(open+1) {
		t.Fatalf("current-connections %s, want %d", got, open+1)
	}
}
