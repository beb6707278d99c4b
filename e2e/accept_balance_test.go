package e2e

import (
	"bufio"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A burst of connections is spread evenly over the event loops, even while
// one loop is busy: each new connection goes to the loop with the fewest,
// counting those accepted but not yet registered by their loop. Counting
// only registered ones, a burst accepted while a loop was busy serving
// went to that loop (its count could not move until it ran its
// registrations), and connections never move. The spread is read from
// beanpole_loop_connections{loop="N"}.
func TestAcceptBurstSpreadsOverLoops(t *testing.T) {
	skipUnlessBeanpole(t, "--http and the event loops are beanpole's")
	t.Setenv("GOMAXPROCS", "2") // two event loops
	s, base := startHTTPServer(t)

	// The first connection goes to the first loop; it keeps that loop busy
	// with pipelined commands for the rest of the test.
	busy := s.dial(t)
	const total = 10000
	conns := dialMany(t, s.addr, total*3/4)
	waitLoopConnections(t, base, 1+len(conns))

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the replies are not checked: the load is what matters
		defer wg.Done()
		_, _ = io.Copy(io.Discard, bufio.NewReader(busy.nc))
	}()
	go func() {
		defer wg.Done()
		chunk := []byte(strings.Repeat("watch a\r\n", 30000))
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := busy.nc.Write(chunk); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop); busy.nc.Close(); wg.Wait() })

	// The rest arrive in one burst: dialled while the server is stopped
	// (the kernel completes the handshakes and queues them in the listen
	// backlog, somaxconn 4096 by default), accepted at once when it
	// resumes, while the first loop works through its client's commands.
	s.signal(t, syscall.SIGSTOP)
	burst := dialMany(t, s.addr, total-len(conns))
	s.signal(t, syscall.SIGCONT)
	waitLoopConnections(t, base, 1+len(conns)+len(burst))

	counts := loopConnections(t, base)
	t.Logf("connections per loop: %v", counts)
	if len(counts) != 2 {
		t.Fatalf("beanpole_loop_connections: %v; want 2 loops under GOMAXPROCS=2", counts)
	}
	mean := float64(1+total) / float64(len(counts))
	for loop, n := range counts {
		if n < 0.9*mean || n > 1.1*mean {
			t.Errorf("loop %s serves %.0f of %d connections; want within 10%% of %.0f (all: %v)", loop, n, 1+total, mean, counts)
		}
	}
}

// dialMany opens n connections to addr from 32 goroutines; they are closed
// when the test ends.
func dialMany(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	const dialers = 32
	conns := make([]net.Conn, n)
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	var wg sync.WaitGroup
	errs := make(chan error, dialers)
	for d := range dialers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := d; i < n; i += dialers {
				c, err := net.DialTimeout("tcp", addr, defaultTimeout)
				if err != nil {
					errs <- err
					return
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("dialling %d connections: %v", n, err)
	}
	return conns
}

// waitLoopConnections waits until the loops' connections add up to n.
func waitLoopConnections(t *testing.T, base string, n int) {
	t.Helper()
	waitFor(t, 30*time.Second, "the server to register every connection", func() bool {
		sum := 0.0
		for _, c := range loopConnections(t, base) {
			sum += c
		}
		return sum == float64(n)
	})
}

// loopConnections is beanpole_loop_connections by its loop label.
func loopConnections(t *testing.T, base string) map[string]float64 {
	t.Helper()
	got := map[string]float64{}
	for _, m := range scrape(t, base)["beanpole_loop_connections"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "loop" {
				got[l.GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	return got
}
