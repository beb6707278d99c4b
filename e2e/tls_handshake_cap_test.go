package e2e

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Clients that connect to the TLS port and stall hold a handshake each
// until the timeout. At most a quarter of the open-file limit (1,024 at
// most) may be in progress: beyond, a TLS connection is closed at once
// and counted, so that stalled handshakes never take the descriptors the
// plaintext listener, the HTTP side and established connections need, and
// a TLS client gets in as soon as handshakes end.
func TestTLSStalledHandshakesBeyondTheCapAreShedAndClientsStillConnect(t *testing.T) {
	t.Parallel()
	httpAddr := httpAddrFree(t)
	ts := startTLSServer(t, "--http", httpAddr, "--http-plain")
	base := "http://" + httpAddr
	pid := ts.pid()
	const nofile = 256
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: nofile, Max: nofile}, nil); err != nil {
		t.Skipf("prlimit: %v", err)
	}
	const limit = nofile / 4
	// More stalled clients than the server has descriptors: without the
	// cap they would take every one.
	const stalls = nofile + 64
	begin := time.Now()
	for range stalls {
		nc, err := net.DialTimeout("tcp", ts.tlsAddr, defaultTimeout)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
	}
	counter := func(name string) float64 {
		v, ok := value(t, scrape(t, base), name, "")
		if !ok {
			t.Fatalf("no %s in /metrics", name)
		}
		return v
	}
	// Each stalled client is in progress, timed out (a failure, if the
	// machine took over the handshake timeout to get here) or shed.
	var shed, failed float64
	waitFor(t, 3*tlsHandshakeTimeout, "every stalled client accounted for", func() bool {
		shed, failed = counter("beanpole_tls_handshakes_shed_total"), counter("beanpole_tls_handshake_failures_total")
		return shed+failed >= stalls-limit
	})
	if failed == 0 && shed != stalls-limit {
		t.Fatalf("%v TLS connections shed, want %d: %d stalled, %d handshakes allowed", shed, stalls-limit, stalls, limit)
	}
	if shed == 0 {
		t.Fatalf("no TLS connection shed (%v failed) after %v", failed, time.Since(begin))
	}

	// A plaintext client is served, and so is /metrics (above).
	c := ts.dial(t)
	mustSend(t, c, listUsed)
	expect(t, c, usingDflt)
	// A TLS client beyond the cap is closed at once, not left to time out
	// (checked while the stalled handshakes are far from their timeout).
	if time.Since(begin) < tlsHandshakeTimeout/2 {
		start := time.Now()
		if _, err := ts.dialTLS(t); err == nil {
			t.Fatalf("a TLS client was served with %d handshakes in progress", limit)
		} else if took := time.Since(start); took >= tlsHandshakeTimeout {
			t.Fatalf("a TLS client beyond the cap waited %v for its close", took)
		}
	}
	const line = "too many TLS handshakes in progress"
	if n, most := strings.Count(ts.out.String(), line), 1+int(time.Since(begin)/time.Second); n == 0 || n > most {
		t.Errorf("%d log lines about shedding, want 1 to %d (one a second)", n, most)
	}
}

// Once the stalled clients give up, their places are free again: a TLS
// client gets in at once rather than after the handshake timeout.
func TestTLSHandshakePlacesAreGivenBackWhenStalledClientsLeave(t *testing.T) {
	t.Parallel()
	ts := startTLSServer(t)
	pid := ts.pid()
	const nofile = 128
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: nofile, Max: nofile}, nil); err != nil {
		t.Skipf("prlimit: %v", err)
	}
	const limit = nofile / 4
	begin := time.Now()
	var stalled []net.Conn
	for range limit {
		nc, err := net.DialTimeout("tcp", ts.tlsAddr, defaultTimeout)
		if err != nil {
			t.Fatal(err)
		}
		stalled = append(stalled, nc)
	}
	// Wait until the server holds them all: then a TLS client is shed.
	waitFor(t, tlsHandshakeTimeout, "the stalled handshakes to fill the cap", func() bool {
		_, err := ts.dialTLS(t)
		return err != nil
	})
	if time.Since(begin) > tlsHandshakeTimeout/2 {
		t.Skip("the machine took half the handshake timeout to fill the cap: the places might come back by the timeout")
	}
	for _, nc := range stalled {
		nc.Close()
	}
	// The server sees the closes as soon as it runs: a TLS client gets in
	// well before the stalled handshakes would have timed out.
	var c *conn
	for c == nil {
		var err error
		if c, err = ts.dialTLS(t); err != nil && time.Since(begin) > tlsHandshakeTimeout {
			t.Fatalf("no TLS client got in after the stalled clients left: %v", err)
		}
	}
	mustSend(t, c, listUsed)
	expect(t, c, usingDflt)
}

// One address cannot keep the handshake cap from the others. An abuser
// that holds every place with stalled handshakes, and reopens each
// connection as soon as it is shed, loses its oldest handshake to each
// client of another address (within its quarter of the cap), which gets
// in at once; the abuser's own new connections are shed.
func TestTLSOneAddressCannotHoldEveryHandshake(t *testing.T) {
	t.Parallel()
	ts := startTLSServer(t)
	const nofile = 256
	if err := unix.Prlimit(ts.pid(), unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: nofile, Max: nofile}, nil); err != nil {
		t.Skipf("prlimit: %v", err)
	}
	const limit, share = nofile / 4, nofile / 16
	const abuser, honest = "127.0.0.2", "127.0.0.3"
	d := net.Dialer{Timeout: defaultTimeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(abuser)}}
	stall := func() net.Conn {
		nc, err := d.Dial("tcp", ts.tlsAddr)
		if err != nil {
			t.Fatal(err)
		}
		return nc
	}
	begin := time.Now()
	var mu sync.Mutex
	var stalled []net.Conn
	for range limit {
		stalled = append(stalled, stall())
	}
	waitFor(t, tlsHandshakeTimeout, "the stalled handshakes to fill the cap", func() bool {
		_, err := ts.dialTLSFrom(t, abuser)
		return err != nil
	})
	// The abuser reopens every connection the server closes.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i = (i + 1) % limit {
			select {
			case <-stop:
				return
			default:
			}
			if i == 0 {
				time.Sleep(time.Millisecond) // a pace, not to spin a core
			}
			mu.Lock()
			nc := stalled[i]
			mu.Unlock()
			_ = nc.SetReadDeadline(time.Now().Add(time.Millisecond))
			if _, err := nc.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
				nc.Close()
				nc, err = d.Dial("tcp", ts.tlsAddr)
				if err != nil {
					continue
				}
				mu.Lock()
				stalled[i] = nc
				mu.Unlock()
			}
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
		for _, nc := range stalled {
			nc.Close()
		}
	}()
	for i := range share {
		c, err := ts.dialTLSFrom(t, honest)
		if err != nil {
			t.Fatalf("honest TLS client %d of %d, with the abuser holding every handshake: %v", i+1, share, err)
		}
		mustSend(t, c, listUsed)
		expect(t, c, usingDflt)
	}
	if time.Since(begin) > tlsHandshakeTimeout/2 {
		t.Skip("the machine took half the handshake timeout: the stalled handshakes may have timed out by themselves")
	}
}
