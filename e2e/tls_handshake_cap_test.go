package e2e

import (
	"net"
	"strings"
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
