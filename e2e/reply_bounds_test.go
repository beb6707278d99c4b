package e2e

// What clients that send commands and never read their replies make the
// server hold, measured as RSS, not only as the server's own count: the
// cap on one connection's unsent replies (1 MiB and one more reply), long
// list-tubes replies under the memory ceiling, and TLS connections against
// their plaintext twins.

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// waitQuiet waits until the server has written nothing for 500 ms: the
// sockets of the clients that do not read are full and every connection
// waits.
func waitQuiet(t *testing.T, s *server, base string) {
	t.Helper()
	waitSteady(t, s, "the server to stop writing", func() int64 { return writtenBytes(t, base) })
}

// waitSteady waits until value has not changed for 500 ms.
func waitSteady(t *testing.T, s *server, what string, value func() int64) {
	t.Helper()
	last, since := int64(-1), time.Now()
	waitFor(t, 10*defaultTimeout, what, func() bool {
		alive(t, s)
		if v := value(); v != last {
			last, since = v, time.Now()
		}
		return time.Since(since) >= 500*time.Millisecond
	})
}

// smallWindow keeps what the kernel holds for a client that does not
// read small: thousands of them with the default windows take the
// machine's TCP memory (tcp_mem), and then the kernel stalls every
// socket, the server's included.
func smallWindow(t *testing.T, c *conn) {
	t.Helper()
	nc := c.nc
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		if err := tc.SetReadBuffer(16 << 10); err != nil {
			t.Fatal(err)
		}
	}
}

// slowestRoundTrip is the slowest of five round trips on c.
func slowestRoundTrip(t *testing.T, c *conn, d time.Duration) time.Duration {
	t.Helper()
	var worst time.Duration
	for range 5 {
		worst = max(worst, roundTrip(t, c, d))
	}
	return worst
}

// 2,000 connections that each pipeline 100 peeks of a 60 KB job and read
// nothing: each holds at most 1 MiB of unsent replies and one more reply,
// as docs/limits.md says, in the server's count and in its RSS. They held
// 3.3 MiB each, because a batch of up to 4 MiB of bodies was written to a
// connection before its unsent output was looked at.
func TestUnsentRepliesStayWithinTheCapPerConnection(t *testing.T) {
	skipUnlessBeanpole(t, "the output cap is beanpole's")
	const (
		size   = 60000
		peeks  = 100
		capped = 1 << 20
	)
	readers := 2000
	if target.race {
		readers = 500 // the race detector's shadow memory quadruples the cost
	}
	s, base := startBounded(t, 0, "--max-job-memory", strconv.Itoa(8<<30))
	ctl := s.dial(t)
	body := string(pattern(size))
	put(t, ctl, 0, 0, 600, body, 1)
	reply := fmt.Sprintf("FOUND 1 %d\r\n%s\r\n", size, body)
	pid := s.pid()
	rss0 := procStatusKB(t, pid, "VmRSS")
	before := slowestRoundTrip(t, ctl, defaultTimeout)
	clients := make([]*conn, 0, readers)
	for range readers {
		c := s.dial(t)
		smallWindow(t, c)
		mustSend(t, c, strings.Repeat("peek 1\r\n", peeks))
		clients = append(clients, c)
	}
	waitQuiet(t, s, base)
	during := slowestRoundTrip(t, ctl, 4*defaultTimeout)
	held := memBytes(t, base, "replies")
	rss := procStatusKB(t, pid, "VmRSS")
	perConn := float64(rss-rss0) * 1024 / float64(readers)
	t.Logf("%d clients not reading: replies counted %d bytes (%.0f KiB each), VmRSS %d kB -> %d kB (%.0f KiB each); another client's round trip %v before, %v during",
		readers, held, float64(held)/float64(readers)/1024, rss0, rss, perConn/1024, before, during)
	bound := float64(capped + len(reply))
	if per := float64(held) / float64(readers); per > bound {
		t.Fatalf("each connection holds %.0f bytes of unsent replies on average; the cap is %d and one reply of %d", per, capped, len(reply))
	}
	if raceSkipsBound(t, "VmRSS per connection") {
		return
	}
	// gnet keeps unsent bodies in buffers rounded up to a power of two
	// (60,000 bytes in 64 KiB), and the runtime has its slack.
	if perConn > 1.25*bound {
		t.Fatalf("VmRSS grew by %.0f KiB per connection that does not read; want at most %.0f", perConn/1024, 1.25*bound/1024)
	}
	// A client that reads gets every reply, in order.
	want := strings.Repeat(reply, peeks)
	if got := readN(t, clients[0], len(want), 4*defaultTimeout); got != want {
		t.Fatalf("a client that reads got different replies%s", diffMsg(want, got))
	}
}

// 100 connections that each send list-tubes four times, with 100,000
// tubes of 200-byte names (a 20 MB reply), and read nothing: under a
// 256 MiB ceiling the replies used to be built and counted regardless
// (1.2 GiB counted, 3.5 GB RSS) until, under an address-space limit, the
// server died growing a 32 MiB ring buffer. A reply that does not fit
// under the ceiling is now answered OUT_OF_MEMORY, as beanstalkd answers
// when malloc fails; the server stays up, within the ceiling in its count
// and its RSS, and serves another client at once.
func TestListTubesToNonReadersStaysUnderTheCeiling(t *testing.T) {
	skipUnlessBeanpole(t, "--max-job-memory is beanpole's")
	const (
		limit     = 256 << 20
		attackers = 100
		watchers  = 500
		each      = 200
	)
	s, base := startBounded(t, 1536<<10, "--max-job-memory", strconv.Itoa(limit))
	watchTubes(t, s, watchers, each)
	ctl := s.dial(t)
	mustSend(t, ctl, "list-tubes\r\n")
	n := 0
	if head := readLineWithin(t, ctl, time.Minute); func() bool { _, err := fmt.Sscanf(head, "OK %d", &n); return err != nil }() {
		t.Fatalf("list-tubes: %s", show(head))
	}
	readN(t, ctl, n+2, time.Minute)
	pid := s.pid()
	rss0 := procStatusKB(t, pid, "VmRSS")
	before := slowestRoundTrip(t, ctl, defaultTimeout)
	for range attackers {
		c := s.dial(t)
		smallWindow(t, c)
		mustSend(t, c, strings.Repeat("list-tubes\r\n", 4))
	}
	waitQuiet(t, s, base)
	during := slowestRoundTrip(t, ctl, 4*defaultTimeout)
	held := memBytes(t, base, "replies")
	rss := procStatusKB(t, pid, "VmRSS")
	t.Logf("%d clients not reading list-tubes of %d bytes: replies counted %d MiB, VmRSS %d MB -> %d MB (HWM %d MB); another client's round trip %v before, %v during",
		attackers, n, held>>20, rss0>>10, rss>>10, procStatusKB(t, pid, "VmHWM")>>10, before, during)
	if held > limit {
		t.Fatalf("the unsent list-tubes replies are counted %d bytes, past the %d-byte ceiling", held, limit)
	}
	mustSend(t, ctl, "list-tubes\r\n")
	expectWithin(t, ctl, "OUT_OF_MEMORY\r\n", 4*defaultTimeout)
	alive(t, s)
	if !raceSkipsBound(t, "VmRSS") {
		// The replies in gnet's 64 KiB nodes, and the runtime's slack.
		if grown := (rss - rss0) << 10; grown > limit+limit/2 {
			t.Fatalf("VmRSS grew by %d MiB under a %d MiB ceiling", grown>>20, limit>>20)
		}
	}
}

// 1,000 TLS clients that pipeline peeks of a 60 KB job and read nothing,
// under a 256 MiB ceiling, cost about what 1,000 plaintext ones do: the
// sealed records gnet keeps are charged as the plaintext replies are,
// and kept in buffers of their size. They cost twice as much (629 MB of
// RSS for 298 MB counted, against 311 MB for plaintext) when gnet grew a
// ring buffer to the next power of two above each batch of records.
func TestTLSNonReadersCostWhatPlaintextOnesDo(t *testing.T) {
	const (
		limit   = 256 << 20
		size    = 60000
		readers = 1000
		peeks   = 100
	)
	attack := func(s *server, base string, dial func() *conn) (perConn float64, held int64) {
		ctl := s.dial(t)
		pid := s.pid()
		rss0 := procStatusKB(t, pid, "VmRSS")
		_, _, held = unreadPeeks(t, s, base, ctl, func() *conn {
			c := dial()
			smallWindow(t, c)
			return c
		}, limit, size, readers, peeks)
		waitQuiet(t, s, base)
		held = memBytes(t, base, "replies")
		rtt := roundTrip(t, ctl, 4*defaultTimeout)
		rss := procStatusKB(t, pid, "VmRSS")
		perConn = float64(rss-rss0) * 1024 / readers
		t.Logf("%s: replies counted %d MiB, VmRSS %d MB -> %d MB (%.0f KiB per client); another client's round trip %v",
			s.addr, held>>20, rss0>>10, rss>>10, perConn/1024, rtt)
		return perConn, held
	}
	ps, pbase := startBounded(t, 0, "--max-job-memory", strconv.Itoa(limit))
	plain, plainHeld := attack(ps, pbase, func() *conn { return ps.dial(t) })
	ps.stop()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	web := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ts := startTLSServer(t, "--http", web, "--http-plain", "--max-job-memory", strconv.Itoa(limit))
	sealed, tlsHeld := attack(ts.server, "http://"+web, func() *conn { return ts.mustDialTLS(t) })
	t.Logf("per client: %.0f KiB over TLS, %.0f KiB on plaintext (%.2fx); counted %d and %d MiB", sealed/1024, plain/1024, sealed/plain, tlsHeld>>20, plainHeld>>20)
	if raceSkipsBound(t, "VmRSS per TLS client") {
		return
	}
	if sealed > 1.3*plain {
		t.Fatalf("a TLS client that does not read costs %.0f KiB of RSS, a plaintext one %.0f KiB: more than 1.3 times", sealed/1024, plain/1024)
	}
}

// 1,000 clients that each send a 16 KiB line (BAD_FORMAT), then the first
// 12 KiB of a record that never ends (over plaintext: of a put body), and
// 1,000 that each pipeline 100 peeks of a 60 KB job and read nothing,
// under a 256 MiB ceiling and an address-space limit: the records
// still arriving are charged as the plaintext bodies are, the TLS clients
// cost within 1.3 times the plaintext ones in RSS, and a fresh client's
// put and reserve are answered meanwhile. Both a record still arriving
// and crypto/tls's record buffer (which keeps the size of the largest
// record it has read) are charged.
func TestTLSPartialRecordsAreChargedAsPlaintextBodies(t *testing.T) {
	skipUnlessBeanpole(t, "--max-job-memory is beanpole's")
	const (
		limit   = 256 << 20
		size    = 60000
		peeks   = 100
		line    = 16000
		partial = 12 << 10
		room    = 1536 << 10 // KiB of address space beyond an idle server's
	)
	readers := 1000
	if target.race {
		readers = 250 // the race detector's shadow memory quadruples the cost
	}
	junk := strings.Repeat("x", line) + "\r\n"
	// Both kinds of client hold what they hold under the ceiling: those
	// with input still arriving come first, the peeks then fill it.
	attack := func(s *server, base string, dial func() *conn, tail func(c *conn)) (perConn float64, charged int64) {
		ctl := s.dial(t)
		pid := s.pid()
		rss0 := procStatusKB(t, pid, "VmRSS")
		held0 := memBytes(t, base, "partial_bodies")
		in0 := readBytes(t, base)
		body := string(pattern(size))
		put(t, ctl, 0, 0, 600, body, 1)
		for range readers {
			c := dial()
			mustSend(t, c, junk)
			tail(c)
		}
		waitFor(t, 10*defaultTimeout, "the 16 KiB lines to be read", func() bool {
			alive(t, s)
			return readBytes(t, base)-in0 >= int64(readers*len(junk))
		})
		waitSteady(t, s, "the charge for input still arriving to settle", func() int64 { return memBytes(t, base, "partial_bodies") })
		charged = memBytes(t, base, "partial_bodies") - held0
		peekUnread(t, s, base, func() *conn {
			c := dial()
			smallWindow(t, c)
			return c
		}, limit, fmt.Sprintf("FOUND 1 %d\r\n%s\r\n", size, body), readers, peeks)
		waitQuiet(t, s, base)
		// A fresh client is served meanwhile.
		start := time.Now()
		fresh := s.dial(t)
		mustSend(t, fresh, "put 0 0 60 2\r\nhi\r\nreserve-with-timeout 0\r\n")
		if got := readLineWithin(t, fresh, 4*defaultTimeout); got != "OUT_OF_MEMORY" && !strings.HasPrefix(got, "INSERTED ") {
			t.Fatalf("a put near the ceiling: %s", show(got))
		}
		expectWithin(t, fresh, "RESERVED 1 "+itoa(size)+"\r\n", 4*defaultTimeout)
		readN(t, fresh, size+2, 4*defaultTimeout)
		rtt := time.Since(start)
		replies := memBytes(t, base, "replies")
		rss := procStatusKB(t, pid, "VmRSS")
		perConn = float64(rss-rss0) * 1024 / float64(2*readers)
		t.Logf("%s: input still arriving charged %d KiB per client, replies %d MiB, VmRSS %d MB -> %d MB (%.0f KiB per client); a fresh client's put and reserve %v",
			s.addr, charged/int64(readers)>>10, replies>>20, rss0>>10, rss>>10, perConn/1024, rtt)
		alive(t, s)
		return perConn, charged
	}
	ps, pbase := startBounded(t, room, "--max-job-memory", strconv.Itoa(limit))
	plain, plainHeld := attack(ps, pbase, func() *conn { return ps.dial(t) }, func(c *conn) {
		mustSend(t, c, "put 0 0 60 16384\r\n"+strings.Repeat("b", partial))
	})
	ps.stop()

	var tbase string
	ts := startTLSServerWith(t, func(flags ...string) *server {
		s, base := startBounded(t, room, flags...)
		tbase = base
		return s
	}, "--http-plain", "--max-job-memory", strconv.Itoa(limit))
	sealed, tlsHeld := attack(ts.server, tbase, func() *conn { return ts.mustDialTLS(t) }, func(c *conn) {
		// The header of a record of 16 KiB of plaintext (TLS 1.3), and
		// 12 KiB of it.
		const record = 16<<10 + 1 + 16
		rec := append([]byte{23, 3, 3, record >> 8, record & 0xff}, pattern(partial)...)
		if _, err := c.nc.(*tls.Conn).NetConn().Write(rec); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("per client: %.0f KiB over TLS, %.0f KiB on plaintext (%.2fx); input still arriving charged %d and %d KiB per client",
		sealed/1024, plain/1024, sealed/plain, tlsHeld/int64(readers)>>10, plainHeld/int64(readers)>>10)
	if tlsHeld < int64(readers)*partial {
		t.Fatalf("%d TLS clients, each with %d bytes of a record still arriving, are charged %d bytes in all", readers, partial, tlsHeld)
	}
	if raceSkipsBound(t, "VmRSS per TLS client") {
		return
	}
	if sealed > 1.3*plain {
		t.Fatalf("a TLS client costs %.0f KiB of RSS, a plaintext one %.0f KiB: more than 1.3 times", sealed/1024, plain/1024)
	}
}
