package e2e

// Every byte a client can make the server hold is charged against the one
// ceiling (--max-job-memory): job bodies, put bodies still arriving, tubes,
// replies not read yet. Past it the command is answered OUT_OF_MEMORY (as
// beanstalkd answers when malloc fails) or the connection waits, and the
// server stays up under a real address-space limit where it used to die of
// the allocations. beanpole_memory_bytes{kind=...} on /metrics shows each.

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startBounded starts a server with --http and the flags given, under an
// address-space limit (ulimit -v) of roomKB beyond an idle server's when
// roomKB > 0. It returns the server and the base URL of /metrics.
func startBounded(t *testing.T, roomKB int64, flags ...string) (*server, string) {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	flags = append([]string{"--http", addr}, flags...)
	if roomKB <= 0 {
		return startServer(t, flags...), "http://" + addr
	}
	if target.race {
		t.Skip("race-built server: the race detector reserves terabytes of address space, no RLIMIT_AS fits")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skipf("no shell to set RLIMIT_AS with: %v", err)
	}
	probe := startServer(t)
	base := procStatusKB(t, probe.pid(), "VmSize")
	probe.stop()
	wrapper := filepath.Join(t.TempDir(), "beanpole-as")
	script := fmt.Sprintf("#!%s\nulimit -v %d || exit 99\nexec %q \"$@\"\n", sh, base+roomKB, target.bin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := startProcRetry(wrapper, "tcp", "", flags)
	if err != nil {
		t.Skipf("cannot start a server under RLIMIT_AS %d kB: %v", base+roomKB, err)
	}
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("server output:\n%s", s.out.String())
		}
	})
	return s, "http://" + addr
}

// memBytes reads beanpole_memory_bytes{kind=kind} from /metrics.
func memBytes(t *testing.T, base, kind string) int64 {
	t.Helper()
	for _, m := range scrape(t, base)["beanpole_memory_bytes"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "kind" && l.GetValue() == kind {
				return int64(m.GetGauge().GetValue())
			}
		}
	}
	t.Fatalf("/metrics has no beanpole_memory_bytes{kind=%q}", kind)
	return 0
}

// readBytes reads beanpole_read_bytes_total: the input the server consumed.
func readBytes(t *testing.T, base string) int64 {
	t.Helper()
	return int64(scrape(t, base)["beanpole_read_bytes_total"].GetMetric()[0].GetCounter().GetValue())
}

// writtenBytes reads beanpole_written_bytes_total: the replies the server
// handed to the sockets.
func writtenBytes(t *testing.T, base string) int64 {
	t.Helper()
	return int64(scrape(t, base)["beanpole_written_bytes_total"].GetMetric()[0].GetCounter().GetValue())
}

// alive fails the test if the server exited.
func alive(t *testing.T, s *server) {
	t.Helper()
	select {
	case <-s.exited:
		t.Fatalf("the server died: %v", s.waitErr)
	default:
	}
}

// bodyAlloc is what the allocator takes for a body of n bytes with its
// CRLF, above 32 KiB: whole 8 KiB pages.
func bodyAlloc(n int) int64 { return int64(n+2+8191) &^ 8191 }

// A put body is charged as it arrives. 800 clients that announce 1 MiB
// and send one byte used to make the server allocate 800 MiB (each body at
// its final size at the put line) and die under the address-space limit;
// now each holds what it sent. Bodies that have arrived in part are
// charged against the ceiling: once they fill it, another client's put is
// answered OUT_OF_MEMORY, and so is the put whose body does not fit, after
// its body has been read and dropped (as beanstalkd does for a job it
// cannot allocate); that client's connection goes on.
func TestPartialPutBodiesAreChargedAsTheyArrive(t *testing.T) {
	skipUnlessBeanpole(t, "--max-job-memory is beanpole's")
	t.Parallel()
	const (
		size  = 1 << 20
		idle  = 800
		fits  = 15
		lead  = 20 << 10 // sent of each body that fits
		slack = 32 << 10
	)
	limit := fits*bodyAlloc(size) + slack
	s, base := startBounded(t, 512<<10, "-z", strconv.Itoa(size), "--max-job-memory", strconv.FormatInt(limit, 10))
	ctl := s.dial(t)
	hdr := fmt.Sprintf("put 0 0 60 %d\r\n", size)
	for i := 0; i < idle; i++ {
		mustSend(t, s.dial(t), hdr+"x")
	}
	waitFor(t, 4*defaultTimeout, "the idle half-sent bodies to be read", func() bool {
		alive(t, s)
		return memBytes(t, base, "partial_bodies") >= idle*8
	})
	if n := memBytes(t, base, "partial_bodies"); n > idle*64 {
		t.Fatalf("%d clients that sent one byte of a 1 MiB body hold %d bytes", idle, n)
	}
	roundTrip(t, ctl, 4*defaultTimeout)

	// Bodies under way fill the ceiling: about fits of them are charged at
	// their size (a loop's grant may keep the last one out), the ones after
	// do not fit. Once the server has read everything, a put that needs as
	// much as one of them is refused, unless the last one was kept out:
	// then the room it left takes this put, and no more.
	lead1 := strings.Repeat("b", lead)
	before := readBytes(t, base)
	var producers []*conn
	for i := 0; i < fits+2; i++ {
		c := s.dial(t)
		mustSend(t, c, hdr+lead1)
		producers = append(producers, c)
	}
	sent := before + int64(len(producers)*(len(hdr)+lead))
	waitFor(t, 4*defaultTimeout, "the bodies under way to be read", func() bool {
		alive(t, s)
		return readBytes(t, base) >= sent
	})
	charged := memBytes(t, base, "partial_bodies")
	if charged > limit || charged < (fits-1)*bodyAlloc(size) {
		t.Fatalf("partial_bodies %d with %d bodies under way, ceiling %d", charged, len(producers), limit)
	}
	mustSend(t, ctl, fmt.Sprintf("put 0 0 60 %d\r\n%s\r\n", size, strings.Repeat("c", size)))
	switch line := readLine(t, ctl); {
	case line == "OUT_OF_MEMORY":
	case strings.HasPrefix(line, "INSERTED ") && charged < fits*bodyAlloc(size):
	default:
		t.Fatalf("a whole body's put with %d bytes of bodies under way charged, ceiling %d: %s", charged, limit, show(line))
	}
	roundTrip(t, ctl, 4*defaultTimeout)

	rest := strings.Repeat("b", size-lead) + "\r\n"
	var refused []*conn
	for i, c := range producers {
		mustSend(t, c, rest)
		switch line := readLineWithin(t, c, 4*defaultTimeout); {
		case strings.HasPrefix(line, "INSERTED "):
		case line == "OUT_OF_MEMORY":
			refused = append(refused, c)
		default:
			t.Fatalf("producer %d: %s", i, show(line))
		}
	}
	if n := int64(len(producers) - len(refused)); n*bodyAlloc(size) != charged-charged%bodyAlloc(size) || len(refused) == 0 {
		t.Fatalf("%d of %d bodies under way inserted, %d bytes of them were charged", n, len(producers), charged)
	}
	// A refused client's connection is in step: its next put is answered.
	for _, c := range refused {
		mustSend(t, c, "put 0 0 60 3\r\nabc\r\n")
		if line := readLine(t, c); !strings.HasPrefix(line, "INSERTED ") {
			t.Fatalf("put after OUT_OF_MEMORY on the same connection: %s", show(line))
		}
	}
	if n := memBytes(t, base, "partial_bodies"); n > idle*64 {
		t.Fatalf("partial_bodies %d once the bodies under way became jobs", n)
	}
	alive(t, s)
}

// Tubes are charged against the ceiling: connections watching thousands of
// new tubes (each with a 200-byte name) used to grow the registry until the
// server died (at about 555,000 tubes under a 2 GB address-space limit).
// Past the ceiling, watch and use of a new tube are answered OUT_OF_MEMORY
// and change nothing; existing tubes can still be used and watched; tubes
// freed make room again.
func TestNewTubesAreChargedToTheCeiling(t *testing.T) {
	skipUnlessBeanpole(t, "--max-job-memory is beanpole's")
	t.Parallel()
	const (
		limit    = 2 << 20
		watchers = 4
		each     = 1000
	)
	s, base := startBounded(t, 0, "--max-job-memory", strconv.Itoa(limit))
	ctl := s.dial(t)
	name := func(w, i int) string { return fmt.Sprintf("%s-%d-%d", strings.Repeat("t", 180), w, i) }
	var conns []*conn
	watched, refused := 0, 0
	for w := 0; w < watchers; w++ {
		c := s.dial(t)
		conns = append(conns, c)
		var b strings.Builder
		for i := 0; i < each; i++ {
			fmt.Fprintf(&b, "watch %s\r\n", name(w, i))
		}
		mustSend(t, c, b.String())
		n := 1 // default
		for i := 0; i < each; i++ {
			switch line := readLineWithin(t, c, 4*defaultTimeout); line {
			case "OUT_OF_MEMORY":
				refused++
			case fmt.Sprintf("WATCHING %d", n+1):
				n++
				watched++
			default:
				t.Fatalf("watcher %d, watch %d: %s (watching %d)", w, i, show(line), n)
			}
		}
	}
	if refused == 0 {
		t.Fatalf("%d new tubes watched under a ceiling of %d bytes, none refused", watched, limit)
	}
	tubes := memBytes(t, base, "tubes")
	if tubes > limit || watched < limit/4096 {
		t.Fatalf("%d tubes watched (%d refused), charged %d bytes, ceiling %d", watched, refused, tubes, limit)
	}
	if st := stats(t, ctl); statInt(t, st, "current-tubes") != int64(watched+1) {
		t.Fatalf("current-tubes %s, %d watched and default", st["current-tubes"], watched)
	}
	roundTrip(t, ctl, 4*defaultTimeout)

	// A new tube is refused to use and watch alike; an existing one is not.
	// Its name is as long as the watchers' tubes': a shorter one costs
	// less than what was refused, and may fit in what is left.
	brandNew := name(9, 9)
	mustSend(t, ctl, "use "+brandNew+"\r\nwatch "+brandNew+"\r\nlist-tube-used\r\n")
	expect(t, ctl, "OUT_OF_MEMORY\r\nOUT_OF_MEMORY\r\nUSING default\r\n")
	mustSend(t, ctl, "use "+name(0, 0)+"\r\nwatch "+name(0, 1)+"\r\n")
	expect(t, ctl, "USING "+name(0, 0)+"\r\nWATCHING 2\r\n")
	// The tubes fill the same ceiling as the jobs: a job that costs more
	// than a tube is refused (a smaller one may fit in what is left).
	mustSend(t, ctl, "put 0 0 60 2048\r\n"+strings.Repeat("j", 2048)+"\r\n")
	expect(t, ctl, "OUT_OF_MEMORY\r\n")

	// The watchers leave: their tubes go (but the two ctl holds), and new
	// tubes fit again.
	for _, c := range conns {
		c.nc.Close()
	}
	waitFor(t, 4*defaultTimeout, "the watchers' tubes to be freed", func() bool {
		return statInt(t, stats(t, ctl), "current-tubes") == 3
	})
	if n := memBytes(t, base, "tubes"); n > 3*1024 {
		t.Fatalf("tubes charged %d bytes with 3 tubes left", n)
	}
	mustSend(t, ctl, "watch "+brandNew+"\r\n")
	expect(t, ctl, "WATCHING 3\r\n")
	mustSend(t, ctl, "put 0 0 60 4\r\njob!\r\n")
	if line := readLine(t, ctl); !strings.HasPrefix(line, "INSERTED ") {
		t.Fatalf("put once the tubes are freed: %s", show(line))
	}
	alive(t, s)
}

// cpuSeconds is the CPU time the process has used (user and system).
func cpuSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	// Fields after the command name, which is in parentheses: utime is
	// the 14th field of the line, stime the 15th, in clock ticks (100 Hz
	// on Linux).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

// Replies a client does not read are charged against the ceiling. 300
// clients each pipeline 100 peeks of a 60 KB job and read nothing: they
// used to hold over a mebibyte of copies each in the server (and
// thousands of them killed it), and the connections held back were woken
// every 5 ms to look at their output, so the idle server spun. Now the
// unsent replies of all of them together stay within the ceiling (give or
// take one batch per loop and one reply per connection), past it a put
// is answered OUT_OF_MEMORY, another client's round trip stays fast, the
// server uses next to no CPU while they wait, and a client that then
// reads gets every reply, in order.
func TestUnreadRepliesAreChargedAndDoNotSpin(t *testing.T) {
	skipUnlessBeanpole(t, "--max-job-memory is beanpole's")
	t.Parallel()
	const (
		limit   = 8 << 20
		size    = 60000
		readers = 300
		peeks   = 100
	)
	s, base := startBounded(t, 1<<20, "--max-job-memory", strconv.Itoa(limit))
	ctl := s.dial(t)
	clients, reply, held := unreadPeeks(t, s, base, ctl, func() *conn { return s.dial(t) }, limit, size, readers, peeks)
	if bound := int64(limit + 2*(4<<20) + readers*len(reply)); held > bound {
		t.Fatalf("%d clients that do not read hold %d bytes of replies; want at most %d", readers, held, bound)
	}
	mustSend(t, ctl, "put 0 0 60 3\r\nabc\r\n")
	expect(t, ctl, "OUT_OF_MEMORY\r\n")
	roundTrip(t, ctl, 4*defaultTimeout)

	// Idle: nobody reads, nothing polls. (Once the server has written
	// what the sockets take.)
	last, since := int64(-1), time.Now()
	waitFor(t, 6*defaultTimeout, "the server to stop writing", func() bool {
		if w := writtenBytes(t, base); w != last {
			last, since = w, time.Now()
		}
		return time.Since(since) >= 300*time.Millisecond
	})
	pid := s.pid()
	cpu0, t0 := cpuSeconds(t, pid), time.Now()
	waitFor(t, 4*defaultTimeout, "two seconds to pass", func() bool { return time.Since(t0) >= 2*time.Second })
	if share := (cpuSeconds(t, pid) - cpu0) / time.Since(t0).Seconds(); share > 0.10 {
		t.Fatalf("the server used %.0f%% of a CPU while %d clients did not read", 100*share, readers)
	} else {
		t.Logf("%d clients not reading hold %d bytes of replies; the server used %.1f%% of a CPU meanwhile", readers, held, 100*share)
	}

	// A few start reading: each gets all of its replies, in order.
	want := strings.Repeat(reply, peeks)
	for _, c := range clients[:8] {
		got := readN(t, c, len(want), 4*defaultTimeout)
		if got != want {
			t.Fatalf("a client that reads got different replies%s", diffMsg(want, got))
		}
		roundTrip(t, c, 4*defaultTimeout)
	}
	// The rest leave: the charge goes back.
	for _, c := range clients[8:] {
		c.nc.Close()
	}
	waitFor(t, 4*defaultTimeout, "the replies' charge to go back", func() bool {
		return memBytes(t, base, "replies") == 0
	})
	mustSend(t, ctl, "put 0 0 60 3\r\nabc\r\n")
	if line := readLine(t, ctl); !strings.HasPrefix(line, "INSERTED ") {
		t.Fatalf("put once the replies are gone: %s", show(line))
	}
	alive(t, s)
}

// unreadPeeks puts a job of size bytes through ctl, has readers clients
// (from dial) each pipeline peeks of it and read nothing, and waits until
// their unsent replies reach the ceiling, limit. It returns the clients,
// the reply to each peek, and what the unsent replies are charged.
func unreadPeeks(t *testing.T, s *server, base string, ctl *conn, dial func() *conn, limit, size, readers, peeks int) ([]*conn, string, int64) {
	t.Helper()
	body := string(pattern(size))
	put(t, ctl, 0, 0, 600, body, 1)
	reply := fmt.Sprintf("FOUND 1 %d\r\n%s\r\n", size, body)
	clients, held := peekUnread(t, s, base, dial, limit, reply, readers, peeks)
	return clients, reply, held
}

// peekUnread has readers clients (from dial) each pipeline peeks of job 1,
// whose peek is answered reply, and read nothing, and waits until their
// unsent replies reach the ceiling, limit. It returns the clients and
// what the unsent replies are charged.
func peekUnread(t *testing.T, s *server, base string, dial func() *conn, limit int, reply string, readers, peeks int) ([]*conn, int64) {
	t.Helper()
	var clients []*conn
	for i := 0; i < readers; i++ {
		c := dial()
		mustSend(t, c, strings.Repeat("peek 1\r\n", peeks))
		clients = append(clients, c)
	}
	jobs := memBytes(t, base, "jobs") + memBytes(t, base, "tubes") + memBytes(t, base, "partial_bodies")
	waitFor(t, 6*defaultTimeout, "the unread replies to reach the ceiling", func() bool {
		alive(t, s)
		return memBytes(t, base, "replies")+jobs >= int64(limit-2*len(reply))
	})
	return clients, memBytes(t, base, "replies")
}

// A client that reads gets every byte of a reply however large: list-tubes
// of 400,000 tubes with 200-byte names is 81 MB, and it used to be cut
// after some MB, the connection closed as one that "does not read its
// replies". Only a client that stops reading is held back, and then it is
// paused, not closed.
func TestLargeReplyReachesAReadingClient(t *testing.T) {
	skipUnlessBeanpole(t, "the output bound is beanpole's")
	t.Parallel()
	const (
		conns = 2000
		each  = 200
	)
	s := startServer(t)
	watchTubes(t, s, conns, each)

	c := s.dial(t)
	mustSend(t, c, "list-tubes\r\n")
	head := readLineWithin(t, c, time.Minute)
	var n int
	if _, err := fmt.Sscanf(head, "OK %d", &n); err != nil {
		t.Fatalf("list-tubes: %s", show(head))
	}
	if n < 64<<20 {
		t.Fatalf("list-tubes of %d tubes is only %d bytes", conns*each+1, n)
	}
	body := readN(t, c, n+2, 2*time.Minute)
	if !strings.HasPrefix(body, "---\n- default\n") || !strings.HasSuffix(body, "\n\r\n") ||
		strings.Count(body, "\n- ") != conns*each+1 {
		t.Fatalf("list-tubes of %d bytes: %d tubes listed, want %d and default", n, strings.Count(body, "\n- ")-1, conns*each)
	}
	roundTrip(t, c, defaultTimeout)
}

// watchTubes has conns connections watch each tubes of their own, with
// 200-byte names; the tubes live as long as the connections do.
func watchTubes(t *testing.T, s *server, conns, each int) {
	t.Helper()
	tube := func(w, i int) string {
		prefix := fmt.Sprintf("%d-%d-", w, i)
		return prefix + strings.Repeat("n", 200-len(prefix))
	}
	// Each connection watches its tubes, which live as long as it does.
	errs := make(chan error, conns)
	var watchers []*conn
	for w := 0; w < conns; w++ {
		watchers = append(watchers, s.dial(t))
	}
	work := make(chan int)
	for g := 0; g < 8; g++ {
		go func() {
			for w := range work {
				c := watchers[w]
				var b strings.Builder
				for i := 0; i < each; i++ {
					fmt.Fprintf(&b, "watch %s\r\n", tube(w, i))
				}
				_ = c.nc.SetDeadline(time.Now().Add(2 * time.Minute))
				if _, err := c.nc.Write([]byte(b.String())); err != nil {
					errs <- err
					continue
				}
				want := 0
				for i := 0; i < each; i++ {
					want += len(fmt.Sprintf("WATCHING %d\r\n", i+2))
				}
				got := make([]byte, want)
				if _, err := io.ReadFull(c.nc, got); err != nil {
					errs <- err
					continue
				}
				if !strings.HasSuffix(string(got), fmt.Sprintf("WATCHING %d\r\n", each+1)) {
					errs <- fmt.Errorf("watcher %d: %s", w, show(string(got)))
					continue
				}
				errs <- nil
			}
		}()
	}
	for w := 0; w < conns; w++ {
		work <- w
	}
	close(work)
	for w := 0; w < conns; w++ {
		if err := <-errs; err != nil {
			t.Fatalf("watching the tubes: %v", err)
		}
	}
}
