package e2e

// The HTTP side (--http) under abuse must neither starve the protocol nor
// take its descriptors: scrapers that never read share one rendering of
// /metrics instead of each holding their own, a form sent a byte a second
// is cut by the read timeout, connections past --http-max-conns take an
// idle one's place or are closed at once, no address locks the others
// out, HTTP connections leave part of the binlog's descriptor reserve
// free, and a binlog that cannot open its directory for lack of
// descriptors waits for one instead of failing for good.

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sys/unix"
)

// rawHTTP opens a connection to the HTTP side and sends req on it (if
// any); the connection is closed when the test ends.
func rawHTTP(t *testing.T, addr, req string) net.Conn {
	t.Helper()
	return rawHTTPFrom(t, "", addr, req)
}

// rawHTTPFrom is rawHTTP from the local address from ("": any), as a
// client host of its own: 127.0.0.2, 127.0.0.3... on loopback.
func rawHTTPFrom(t *testing.T, from, addr, req string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: defaultTimeout}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	if req != "" {
		_ = nc.SetWriteDeadline(time.Now().Add(defaultTimeout))
		if _, err := io.WriteString(nc, req); err != nil {
			t.Fatalf("write to %s: %v", addr, err)
		}
	}
	return nc
}

// readHealthz reads /healthz's response on a keep-alive connection: up to
// its body, "ok\n", leaving the connection open.
func readHealthz(nc net.Conn) ([]byte, error) {
	_ = nc.SetReadDeadline(time.Now().Add(defaultTimeout))
	var got []byte
	buf := make([]byte, 1024)
	for !strings.HasSuffix(string(got), "\r\n\r\nok\n") {
		n, err := nc.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			return got, err
		}
	}
	return got, nil
}

// protoRoundTrip times one protocol round trip on c.
func protoRoundTrip(t *testing.T, c *conn) time.Duration {
	t.Helper()
	start := time.Now()
	mustSend(t, c, "list-tube-used\r\n")
	expect(t, c, "USING default\r\n")
	return time.Since(start)
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// Non-reading scrapers, forms sent a byte a second and idle keep-alive
// connections past the limit, all at once: a protocol client's round
// trip stays within twice its baseline (with a floor for a loaded
// machine), the server's memory grows by a few renderings at most, the
// slow forms are cut by the read timeout, and each connection past the
// limit takes an idle one's place, so that no more than the limit are
// held.
func TestHTTPAbuseLeavesTheProtocolServedAndMemoryBounded(t *testing.T) {
	skipUnlessBeanpole(t, "--http is beanpole's")
	const (
		tubes     = 3000
		scrapers  = 150
		slowPosts = 20
		maxConns  = 256
	)
	s, base := startDashboard(t, "--metrics-max-tubes", "100000")
	addr := strings.TrimPrefix(base, "http://")
	pid := s.pid()

	// Many tubes, each with a job: a scrape of several megabytes.
	c := s.dial(t)
	var b strings.Builder
	for i := range tubes {
		b.WriteString("use t" + strconv.Itoa(i) + "\r\nput 0 0 60 1\r\nx\r\n")
	}
	mustSend(t, c, b.String())
	for i := range tubes {
		expect(t, c, "USING t"+strconv.Itoa(i)+"\r\n")
		if line := readLine(t, c); !strings.HasPrefix(line, "INSERTED ") {
			t.Fatalf("put %d: %q", i, line)
		}
	}
	mustSend(t, c, "use default\r\n")
	expect(t, c, "USING default\r\n")
	code, body := httpGet(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	size := int64(len(body))
	body = ""

	var baseline []time.Duration
	for range 200 {
		baseline = append(baseline, protoRoundTrip(t, c))
	}
	base50 := median(baseline)
	rss0 := procStatusKB(t, pid, "VmRSS")

	// The abuse, while the protocol client keeps timing round trips.
	start := time.Now()
	var during []time.Duration
	for i := range scrapers {
		nc := rawHTTP(t, addr, "GET /metrics HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
		_ = nc.(*net.TCPConn).SetReadBuffer(4096) // and never read
		if i%10 == 0 {
			during = append(during, protoRoundTrip(t, c))
		}
	}
	form := "POST /tubes/default/kick HTTP/1.1\r\nHost: " + addr +
		"\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\n"
	var wg sync.WaitGroup
	cut := make(chan time.Duration, slowPosts)
	for range slowPosts {
		nc := rawHTTP(t, addr, form)
		wg.Add(1)
		go func() { // a byte a second until the server gives up
			defer wg.Done()
			for i := 0; i < 100; i++ {
				_ = nc.SetReadDeadline(time.Now().Add(time.Second))
				if _, err := nc.Read(make([]byte, 4096)); err != nil && !isTimeout(err) {
					cut <- time.Since(start)
					return
				}
				_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
				if _, err := nc.Write([]byte("n")); err != nil {
					cut <- time.Since(start)
					return
				}
			}
		}()
	}
	// Idle keep-alive connections, past the limit: each past it takes the
	// place of an idle one, so the server holds no more than the limit.
	for attempt := range maxConns + 100 {
		nc := rawHTTP(t, addr, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
		if got, err := readHealthz(nc); err != nil {
			t.Fatalf("idle connection %d: %q, %v", attempt, got, err)
		}
		if attempt%10 == 0 {
			during = append(during, protoRoundTrip(t, c))
		}
	}
	for len(during) < 100 {
		during = append(during, protoRoundTrip(t, c))
	}
	hwm := procStatusKB(t, pid, "VmHWM")
	var open, evicted float64
	waitFor(t, defaultTimeout, "the idle connections closed for new ones to be let go", func() bool {
		fams := scrape(t, base)
		open, _ = value(t, fams, "beanpole_http_connections", "")
		evicted, _ = value(t, fams, "beanpole_http_connections_evicted_total", "")
		return open <= maxConns
	})
	if evicted < 100 {
		t.Errorf("beanpole_http_connections_evicted_total %v after %d idle connections past the limit; want at least 100", evicted, 100+scrapers+slowPosts)
	}

	during50 := median(during)
	bound := max(2*base50, 20*time.Millisecond)
	t.Logf("scrape %d bytes; round trip p50 %v before, %v during the abuse (bound %v); VmRSS %d kB before, VmHWM %d kB",
		size, base50, during50, bound, rss0, hwm)
	if !raceSkipsBound(t, "round trip and RSS under abuse") {
		if during50 > bound {
			t.Errorf("protocol round trip p50 %v during the abuse, %v before; want at most %v", during50, base50, bound)
		}
		// A few renderings and their buffers, the connections' goroutines,
		// and the collector's headroom: nothing that grows with the scrapers.
		if grown, limit := hwm-rss0, 128<<10+10*size>>10; grown > limit {
			t.Errorf("peak RSS grew by %d kB under %d scrapers of %d bytes; want at most %d kB", grown, scrapers, size, limit)
		}
	}

	// The slow forms are cut by the read timeout (10s), not left to run.
	for range slowPosts {
		select {
		case d := <-cut:
			if d > 30*time.Second {
				t.Errorf("a form sent a byte a second was cut after %v; want the read timeout", d)
			}
		case <-time.After(40*time.Second - time.Since(start)):
			t.Fatalf("a form sent a byte a second still held %v after it started", time.Since(start))
		}
	}
	wg.Wait()
	if err := unix.Kill(pid, 0); err != nil {
		t.Fatalf("the server is gone: %v", err)
	}
}

// HTTP connections past --http-max-conns, and past the places kept for
// the probes beyond it, are closed as soon as accepted, counted, and
// served again once others end. The connections held are busy (a
// request's first line, never finished): none is idle, to be closed for
// a new one, and all come from one address, so none is taken back for it.
func TestHTTPConnectionsPastTheLimitAreClosedAndCounted(t *testing.T) {
	skipUnlessBeanpole(t, "--http is beanpole's")
	t.Parallel()
	_, base := startHTTPServer(t, "--http-max-conns", "4")
	addr := strings.TrimPrefix(base, "http://")
	const probes = 8
	start := time.Now()
	var busy []net.Conn
	for range 4 + probes {
		busy = append(busy, rawHTTP(t, addr, "GET /healthz HTTP/1.1\r\n"))
	}
	nc := rawHTTP(t, addr, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
	_ = nc.SetReadDeadline(time.Now().Add(defaultTimeout))
	got, err := io.ReadAll(nc)
	if time.Since(start) > httpReadTimeout/2 {
		t.Skip("the machine took half the read timeout to open the connections: the busy ones may have been cut")
	}
	if len(got) != 0 || err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the connection past the limit and the probes' places got %q, %v; want a close with nothing", got, err)
	}
	busy[0].Close()
	busy[1].Close()
	// The closes reach the server soon, not at once.
	client := http.Client{Timeout: defaultTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	var open, refused float64
	waitFor(t, defaultTimeout, "two connections given back", func() bool {
		resp, err := client.Get(base + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(resp.Body)
		if err != nil {
			t.Fatalf("/metrics: %v", err)
		}
		open, _ = value(t, fams, "beanpole_http_connections", "")
		refused, _ = value(t, fams, "beanpole_http_connections_refused_total", "")
		return open == 11 // the ten busy ones and the scrape's
	})
	if refused < 1 {
		t.Fatalf("beanpole_http_connections_refused_total %v; want at least 1", refused)
	}
}

// httpReadTimeout is the HTTP side's read timeout: a request must arrive
// within it.
const httpReadTimeout = 10 * time.Second

// httpProbe sends one request from the address from on a connection of
// its own, as a liveness probe does, and returns the status and body; 0
// when the connection was closed unanswered.
func httpProbe(t *testing.T, from, addr, path string) (int, string) {
	t.Helper()
	nc := rawHTTPFrom(t, from, addr, "GET "+path+" HTTP/1.1\r\nHost: "+addr+"\r\nConnection: close\r\n\r\n")
	defer nc.Close()
	_ = nc.SetReadDeadline(time.Now().Add(defaultTimeout))
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		if isTimeout(err) {
			t.Fatalf("GET %s from %s: no answer and no close within %v", path, from, defaultTimeout)
		}
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// keepAlive opens a keep-alive connection from the address from, has it
// answer /healthz, and leaves it idle; false if it was closed unanswered.
func keepAlive(t *testing.T, from, addr string) bool {
	t.Helper()
	nc := rawHTTPFrom(t, from, addr, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
	got, err := readHealthz(nc)
	switch {
	case err == nil:
		return true
	case len(got) == 0 && (err == io.EOF || errors.Is(err, syscall.ECONNRESET)):
		nc.Close()
		return false
	}
	t.Fatalf("keep-alive connection from %s: %q, %v", from, got, err)
	return false
}

// One address cannot lock the others out of the HTTP side. An abuser
// holding every --http-max-conns place with idle keep-alive connections,
// and opening more, loses an idle one to each newcomer; holding them all
// busy, it loses its oldest to a newcomer within its share (a quarter);
// and with every place held by addresses within their shares, the places
// kept past the limit still answer /healthz and /readyz (and only them).
// In each case an honest address's probes are all answered.
func TestHTTPOneAddressCannotLockOthersOut(t *testing.T) {
	skipUnlessBeanpole(t, "--http is beanpole's")
	t.Parallel()
	const maxConns, share = 64, 16
	_, base := startHTTPServer(t, "--http-max-conns", strconv.Itoa(maxConns))
	addr := strings.TrimPrefix(base, "http://")
	const abuser, honest = "127.0.0.2", "127.0.0.3"
	probes := func(what string) {
		t.Helper()
		for i := range 30 {
			path := []string{"/healthz", "/readyz", "/metrics"}[i%3]
			if code, _ := httpProbe(t, honest, addr, path); code != http.StatusOK {
				t.Fatalf("%s: the honest address's GET %s (%d of 30) got %d", what, path, i+1, code)
			}
		}
	}

	// Idle: every place, then as many again (each takes an idle one).
	for i := range maxConns {
		if !keepAlive(t, abuser, addr) {
			t.Fatalf("the abuser's keep-alive connection %d was refused under the limit", i)
		}
	}
	probes("every place idle")
	for i := range maxConns {
		if !keepAlive(t, abuser, addr) {
			t.Fatalf("the abuser's keep-alive connection %d past the limit was refused with idle ones to close", i)
		}
	}

	// Busy: a request's first line, never finished, on every place and
	// on the places past the limit, until one is refused.
	start := time.Now()
	var last net.Conn
	for range 2 * maxConns {
		last = rawHTTPFrom(t, abuser, addr, "GET /healthz HTTP/1.1\r\n")
	}
	_ = last.SetReadDeadline(time.Now().Add(defaultTimeout))
	if n, err := last.Read(make([]byte, 1)); n != 0 || err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the abuser's busy connection %d, past the limit and the probes' places: %v; want it closed unanswered", 2*maxConns, err)
	}
	probes("every place busy")
	// The honest address may hold its share while the abuser waits.
	for i := range share {
		if !keepAlive(t, honest, addr) {
			t.Fatalf("the honest address's connection %d of its share of %d was refused", i+1, share)
		}
	}
	if time.Since(start) > httpReadTimeout/2 {
		t.Skip("the machine took half the read timeout: the busy connections may have been cut")
	}

	// Every place busy, held by addresses within their shares: the probes
	// get the places kept for them, and only the probes.
	_, base = startHTTPServer(t, "--http-max-conns", strconv.Itoa(maxConns))
	addr = strings.TrimPrefix(base, "http://")
	start = time.Now()
	for i := range maxConns {
		rawHTTPFrom(t, "127.0.1."+strconv.Itoa(1+i/share), addr, "GET /healthz HTTP/1.1\r\n")
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := httpProbe(t, honest, addr, path); code != http.StatusOK {
			t.Errorf("GET %s with every place busy: %d %q; want it answered on a place kept for it", path, code, body)
		}
	}
	if code, body := httpProbe(t, honest, addr, "/metrics"); code != http.StatusServiceUnavailable || !strings.Contains(body, "kept for /healthz and /readyz") {
		t.Errorf("GET /metrics with every place busy: %d %q; want 503", code, body)
	}
	if time.Since(start) > httpReadTimeout/2 {
		t.Skip("the machine took half the read timeout: the busy connections may have been cut")
	}
}

// Idle HTTP connections cannot take the descriptors the binlog needs:
// with the HTTP limit above the open-file limit, they are refused near
// it, and puts that move the binlog to new files go on being written.
func TestHTTPConnectionsLeaveDescriptorsForTheBinlog(t *testing.T) {
	skipUnlessBeanpole(t, "--http is beanpole's")
	t.Parallel()
	s, base := startHTTPServer(t, "-b", t.TempDir(), "-s", "1024", "-f0", "--http-max-conns", "100000")
	addr := strings.TrimPrefix(base, "http://")
	c := s.dial(t)
	nofile := uint64(procFDs(t, s.pid()) + 100)
	if err := unix.Prlimit(s.pid(), unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: nofile, Max: nofile}, nil); err != nil {
		t.Skipf("prlimit: %v", err)
	}
	refused := false
	for i := 0; i < int(nofile) && !refused; i++ {
		nc := rawHTTP(t, addr, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
		got, err := readHealthz(nc)
		switch {
		case len(got) == 0 && (err == io.EOF || errors.Is(err, syscall.ECONNRESET)):
			refused = true
		case isTimeout(err):
			refused = true // not even accepted: out of descriptors
			t.Errorf("HTTP connection %d neither served nor refused", i)
		case err != nil:
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	if !refused {
		t.Fatalf("no HTTP connection refused under %d descriptors", nofile)
	}
	// Every put is written, across many new binlog files.
	for i := range 200 {
		mustSend(t, c, "put 0 0 60 100\r\n"+strings.Repeat("x", 100)+"\r\n")
		expect(t, c, "INSERTED "+strconv.Itoa(i+1)+"\r\n")
	}
	if st := stats(t, c); st["binlog-failed"] == "true" {
		t.Fatalf("binlog-failed after HTTP connections filled the descriptors")
	}
}

// A binlog that cannot open its directory to move to a new file, because
// the process is out of descriptors, holds the replies instead of failing
// for good; once descriptors are free again, the held command and every
// later one are written and acknowledged, without a restart. Each job is
// deleted after its put, so that the binlog moves from file to file with
// no more spare files than the one made ahead.
//
// Whether a reply is held is read from the server, not from how long it
// takes: the writer logs when it starts to wait for a descriptor and when
// it has one again. With one command outstanding at a time, the batch the
// writer waits on holds that command's records, so "no reply yet and the
// writer waits" is "held", however slow the machine.
func TestBinlogWaitsOutDescriptorExhaustion(t *testing.T) {
	skipLegacy(t, "upstream has no descriptor handling in its binlog")
	t.Parallel()
	s := blStart(t, t.TempDir(), "-s", "1024", "-f0")
	c := s.dial(t)
	job := "put 0 0 60 100\r\n" + strings.Repeat("x", 100) + "\r\n"
	// Each condition is logged once when it starts and once when it ends.
	logSays := func(starts, ends string) bool {
		out := s.out.String()
		return strings.Count(out, starts) > strings.Count(out, ends)
	}
	writerWaits := func() bool {
		return logSays("binlog: out of file descriptors", "binlog: descriptors available again")
	}
	// send sends cmd and returns its reply line, or held once the writer
	// says it waits for a descriptor and no reply has come.
	send := func(cmd string) (line string, held bool) {
		mustSend(t, c, cmd)
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(string(c.buf), "\r\n") {
			if writerWaits() {
				return "", true
			}
			if time.Now().After(deadline) {
				t.Fatalf("%q: no reply within 30 s, and the binlog does not say it waits for a descriptor", cmd)
			}
			if err := c.fill(time.Now().Add(10 * time.Millisecond)); err != nil && !isTimeout(err) {
				t.Fatalf("%q: %v", cmd, err)
			}
		}
		return readLine(t, c), false
	}
	// cycle puts a job and deletes it; ok is false when a reply is held
	// or the put refused.
	cycle := func() (held, ok bool) {
		line, held := send(job)
		if held || line == "OUT_OF_MEMORY" {
			return held, false
		}
		id, found := strings.CutPrefix(line, "INSERTED ")
		if !found {
			t.Fatalf("put: %q; want INSERTED, OUT_OF_MEMORY or nothing yet", line)
		}
		if line, held = send("delete " + id + "\r\n"); held {
			return true, false
		}
		if line != "DELETED" {
			t.Fatalf("delete %s: %q; want DELETED or nothing yet", id, line)
		}
		return false, true
	}
	if _, ok := cycle(); !ok {
		t.Fatalf("a put and delete with descriptors free failed")
	}

	var old unix.Rlimit
	if err := unix.Prlimit(s.pid(), unix.RLIMIT_NOFILE, nil, &old); err != nil {
		t.Skipf("prlimit: %v", err)
	}
	// A limit below every descriptor the process holds: no open succeeds,
	// whatever numbers closed files left free.
	full := unix.Rlimit{Cur: 3, Max: old.Max}
	if err := unix.Prlimit(s.pid(), unix.RLIMIT_NOFILE, &full, nil); err != nil {
		t.Skipf("prlimit: %v", err)
	}
	held, ok := false, true
	for i := 0; i < 100 && ok; i++ {
		held, ok = cycle()
	}
	if ok {
		t.Fatalf("100 puts and deletes all written with no descriptor free")
	}
	t.Logf("with no descriptor free: a reply held %v (else a put refused)", held)
	if err := unix.Prlimit(s.pid(), unix.RLIMIT_NOFILE, &old, nil); err != nil {
		t.Fatalf("prlimit: %v", err)
	}
	if held { // answered now, and written
		if line := readLineWithin(t, c, 30*time.Second); !strings.HasPrefix(line, "INSERTED ") && line != "DELETED" {
			t.Fatalf("the held command got %q once descriptors were free", line)
		}
		waitFor(t, 30*time.Second, "the binlog to say it has a descriptor again", func() bool { return !writerWaits() })
	}
	// Puts are refused until the binlog has made a new file again, which
	// it tries once a second after a failure; none may be held.
	waitFor(t, 30*time.Second, "puts written again", func() bool {
		held, ok := cycle()
		if held {
			t.Fatalf("a reply held with descriptors free")
		}
		return ok && !logSays("binlog: cannot allocate a new segment", "binlog: space available again")
	})
	for range 50 {
		if held, ok := cycle(); !ok {
			t.Fatalf("a put and delete failed (held %v) after descriptors were freed", held)
		}
	}
	if st := stats(t, c); st["binlog-failed"] == "true" {
		t.Fatalf("binlog-failed after descriptors were freed")
	}
}
