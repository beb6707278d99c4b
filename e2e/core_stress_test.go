package e2e

// TestCoreDeleteReserveRacesPut: a worker's pipelined `delete` + `reserve`
// racing another connection's put, round after round.
//
// By default each mode runs for about coreStressFor; BEANPOLE_CORE_ROUNDS=N
// runs exactly N rounds per mode instead (e.g. 100000 for a long run).

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// coreStressFor is how long each mode of the race runs by default.
const coreStressFor = 5 * time.Second

// coreRounds returns the fixed number of rounds asked for by
// BEANPOLE_CORE_ROUNDS, or 0 (run for coreStressFor).
func coreRounds(t *testing.T) int {
	v := os.Getenv("BEANPOLE_CORE_ROUNDS")
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("BEANPOLE_CORE_ROUNDS=%q: want a positive number", v)
	}
	return n
}

// corePairs is how many worker/producer pairs race at once on one server,
// each on a tube of its own (pair 0 on default): more races per second, and
// the binlog's group commits mix the pairs' records.
const corePairs = 4

// A worker W holds one reserved job. In one write it sends
// `delete <id>\r\nreserve\r\n`, and at the same moment (both writes
// released by one barrier) a producer P sends `put 0 0 60 1\r\ny\r\n`. P
// must get `INSERTED <pid>\r\n` and W exactly `DELETED\r\nRESERVED <pid>
// 1\r\ny\r\n`: its delete is answered first, and its reserve, parked or
// not, gets the only ready job of its tube, P's. W then holds <pid> for
// the next round. corePairs such pairs run at once, each on its own tube.
// Runs at -b -f 50, -b -f 0 and without -b; a crash of the server fails
// the test with its output, a lost wake-up with a 10 s timeout.
func TestCoreDeleteReserveRacesPut(t *testing.T) {
	t.Parallel()
	fixed := coreRounds(t)
	coreRun(t, []coreMode{coreF50, coreF0, coreNoBinlog}, func(t *testing.T, m coreMode) {
		s := coreStart(t, m).server
		type pair struct {
			w, p   *conn
			held   uint64
			rounds int
		}
		pairs := make([]*pair, corePairs)
		for i := range pairs {
			pr := &pair{w: s.dial(t), p: s.dial(t)}
			pairs[i] = pr
			if i > 0 {
				tube := fmt.Sprintf("pair%d", i)
				coreRequest(t, s, pr.w, "watch "+tube+"\r\nignore default\r\n", "WATCHING 2\r\nWATCHING 1\r\n")
				coreRequest(t, s, pr.p, "use "+tube+"\r\n", "USING "+tube+"\r\n")
			}
			coreRequest(t, s, pr.p, "put 0 0 60 1\r\nx\r\n", fmt.Sprintf("INSERTED %d\r\n", i+1))
			coreRequest(t, s, pr.w, "reserve\r\n", fmt.Sprintf("RESERVED %d 1\r\nx\r\n", i+1))
			pr.held = uint64(i + 1)
		}

		start := time.Now()
		var failed atomic.Bool
		errs := make([]error, len(pairs))
		var wg sync.WaitGroup
		for i, pr := range pairs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ; !failed.Load() && (fixed > 0 && pr.rounds < fixed || fixed == 0 && time.Since(start) < coreStressFor); pr.rounds++ {
					if err := coreRaceRound(s, pr.w, pr.p, &pr.held); err != nil {
						errs[i] = fmt.Errorf("pair %d, round %d: %w", i, pr.rounds+1, err)
						failed.Store(true)
						return
					}
				}
			}()
		}
		wg.Wait()
		total := 0
		for _, pr := range pairs {
			total += pr.rounds
		}
		t.Logf("%d rounds (%d pairs) in %v", total, len(pairs), time.Since(start).Round(time.Millisecond))
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		// The server is still whole: a last command on a new connection.
		ctl := s.dial(t)
		coreRequest(t, s, ctl, "list-tube-used\r\n", "USING default\r\n")
	})
}

// coreRaceRound is one round of TestCoreDeleteReserveRacesPut for the
// worker w holding job *held and the producer p.
func coreRaceRound(s *server, w, p *conn, held *uint64) error {
	wIn := fmt.Sprintf("delete %d\r\nreserve\r\n", *held)
	const pIn = "put 0 0 60 1\r\ny\r\n"
	if err := coreRace(w, wIn, p, pIn); err != nil {
		return fmt.Errorf("%v\n%s", err, coreServerState(s))
	}
	line, err := coreReadLine(s, p, "the producer's reply to "+show(pIn))
	if err != nil {
		return err
	}
	var pid uint64
	if _, err := fmt.Sscanf(line, "INSERTED %d", &pid); err != nil || line != fmt.Sprintf("INSERTED %d", pid) {
		return fmt.Errorf("the producer got %s, want INSERTED <id>\n%s", show(line), coreServerState(s))
	}
	if err := coreRead(s, w, fmt.Sprintf("DELETED\r\nRESERVED %d 1\r\ny\r\n", pid),
		fmt.Sprintf("the worker's replies to %s (racing the put of job %d)", show(wIn), pid)); err != nil {
		return err
	}
	*held = pid
	return nil
}

// coreRace writes a to ca and b to cb from two goroutines released at the
// same moment, and waits for both writes.
func coreRace(ca *conn, a string, cb *conn, b string) error {
	gate := make(chan struct{})
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, x := range []struct {
		c  *conn
		in string
	}{{ca, a}, {cb, b}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			_ = x.c.nc.SetWriteDeadline(time.Now().Add(coreTimeout))
			if _, err := x.c.nc.Write([]byte(x.in)); err != nil {
				errs[i] = fmt.Errorf("writing %s: %v", show(x.in), err)
			}
		}()
	}
	close(gate)
	wg.Wait()
	if errs[0] != nil {
		return errs[0]
	}
	return errs[1]
}
