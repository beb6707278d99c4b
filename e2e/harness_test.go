package e2e

// The harness: building or locating the binary under test, detecting which
// wire target it is (beanpole/1.13 or C beanstalkd 1.12), starting one server
// process per test, and the raw-socket helpers every test uses.

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// defaultTimeout bounds every read that expects a reply. Generous on purpose:
// the suite must stay green on a loaded two-core machine. Against a
// race-built server it is raceTimeoutFactor times longer (runMain): the
// race detector makes the server 2-20 times slower, and a replay or a
// pipeline that took a second took over five on a busy machine.
var defaultTimeout = 5 * time.Second

const raceTimeoutFactor = 4

// target describes the binary under test.
var target struct {
	bin     string // path of the server binary
	version string // the unquoted value of "version:" in stats
	legacy  bool   // C beanstalkd 1.12: unquoted YAML strings, strtol reserve-with-timeout, upstream line quirks
	race    bool   // a Go binary built with -race (see raceBuilt, raceFailure and raceSkipsBound)
}

func TestMain(m *testing.M) {
	flag.Parse()
	// The tests spend most of their time waiting on timers and sockets, not on
	// CPU: let more of them run at once than GOMAXPROCS unless told otherwise.
	parallelSet := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.parallel" {
			parallelSet = true
		}
	})
	if !parallelSet {
		_ = flag.Set("test.parallel", "8")
	}
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if bin := os.Getenv("BEANPOLE_TEST_BIN"); bin != "" {
		abs, err := filepath.Abs(bin)
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e: BEANPOLE_TEST_BIN:", err)
			return 1
		}
		target.bin = abs
	} else {
		dir, err := os.MkdirTemp("", "beanpole-e2e-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		bin, err := buildServer(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e: building the server:", err)
			return 1
		}
		target.bin = bin
	}
	target.race = raceBuilt(target.bin)
	if target.race {
		defaultTimeout *= raceTimeoutFactor
	}
	if err := detectTarget(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: probing %s: %v\n", target.bin, err)
		return 1
	}
	mode := "1.13 wire target"
	if target.legacy {
		mode = "C beanstalkd 1.12 mode: documented 1.12/1.13 differences and beanpole decisions are adapted or skipped"
	}
	if target.race {
		mode += "; race-built: a race the server reports fails the test that owns it, memory and latency bounds are not checked"
	}
	fmt.Fprintf(os.Stderr, "e2e: testing %s (version %q, %s)\n", target.bin, target.version, mode)
	return m.Run()
}

// buildServer builds the module root (found with `go env GOMOD`, falling back
// to "..") into dir and returns the binary's path.
func buildServer(dir string) (string, error) {
	root := ".." // the server's module; the tests are a module of their own in e2e/
	bin := filepath.Join(dir, "beanpole")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build -o %s . (in %s): %v\n%s", bin, root, err, out)
	}
	return bin, nil
}

// raceBuilt reports whether bin is a Go program built with -race: its build
// information (what `go version -m` prints) has the setting -race=true. C
// beanstalkd, or any binary that is not Go, is not.
func raceBuilt(bin string) bool {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return false
	}
	for _, s := range info.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

var versionRE = regexp.MustCompile(`\nversion: "?([^"\n]*)"?\n`)

// detectTarget starts the binary once and reads its version from stats.
func detectTarget() (err error) {
	s, err := startProc(target.bin, "tcp", "", nil)
	if err != nil {
		return err
	}
	defer func() {
		s.stop()
		if why := s.raceFailure(); why != "" && err == nil {
			err = fmt.Errorf("the race detector fired (%s); the server's output:\n%s", why, s.out.String())
		}
	}()
	nc, err := net.DialTimeout(s.network, s.addr, defaultTimeout)
	if err != nil {
		return err
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(defaultTimeout))
	if _, err := io.WriteString(nc, "stats\r\n"); err != nil {
		return err
	}
	r := bufio.NewReader(nc)
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	var n int
	if _, err := fmt.Sscanf(line, "OK %d\r\n", &n); err != nil {
		return fmt.Errorf("stats reply %q", line)
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(r, body); err != nil {
		return err
	}
	m := versionRE.FindSubmatch(body)
	if m == nil {
		return fmt.Errorf("no version in stats: %q", body)
	}
	target.version = string(m[1])
	target.legacy = target.version == "1.12" || strings.HasPrefix(target.version, "1.12.")
	return nil
}

// q formats a YAML string value the way the target writes it: double-quoted
// in 1.13 (the beanpole wire target), bare in 1.12 (docs/behaviour.md, 'Wire target').
func q(s string) string {
	if target.legacy {
		return s
	}
	return `"` + s + `"`
}

// skipLegacy skips a test (or subtest) when the binary under test is C
// beanstalkd 1.12 and the assertion is a documented difference.
func skipLegacy(t testing.TB, why string) {
	t.Helper()
	if target.legacy {
		t.Skipf("documented difference, not checked against beanstalkd 1.12: %s", why)
	}
}

// ---------------------------------------------------------------------------
// The race detector.
//
// `make test` also runs this suite against a server built with -race
// (BEANPOLE_TEST_BIN=bin/beanpole-race). The race detector does not stop a
// server at a race: it prints a report to stderr and goes on, and only a
// process that exits by itself with status 0 has that turned into status 66
// (a server the harness kills with SIGKILL never gets there). So the harness
// reads every server's output once it has stopped, and a report there, or
// an exit with status 66, fails the test that owns the server (startServer's
// cleanup; the other places that start the binary check the same way).
//
// GORACE: if it is not set, servers get halt_on_error=0 exitcode=66, the
// race detector's defaults, pinned here because the checks above rely on
// them. halt_on_error=1 was considered and not chosen: the server would die
// at the first race in the middle of a test, which then fails with a reset
// connection or a timeout unrelated to the race, hides any later race, and
// can take a server shared by subtests down with it; with 0 the test runs
// to its end, its own assertions still mean something, and every race of
// the run is reported, each in the test whose server it happened in. A
// GORACE of your own replaces these settings; the reports must stay on
// stderr (no log_path) for the harness to see them.

// goraceDefault is the GORACE servers get when the environment has none.
const goraceDefault = "halt_on_error=0 exitcode=66"

// raceExitCode is the status a race-built process exits with, instead of 0,
// after the race detector reported something (GORACE exitcode).
const raceExitCode = 66

// raceMarkers are what the race detector writes to stderr: the header of a
// data race report, and the prefix of ThreadSanitizer's own fatal errors
// (out of shadow memory, too many goroutines).
var raceMarkers = []string{"WARNING: DATA RACE", "ThreadSanitizer"}

// serverEnv is the environment of every server process.
func serverEnv() []string {
	env := os.Environ()
	if target.race && os.Getenv("GORACE") == "" {
		env = append(env, "GORACE="+goraceDefault)
	}
	return env
}

// raceFailure says why out (a server process's output) and ps (its exit
// state, nil if it has not exited) show that the race detector fired, or
// returns "" if they do not.
func raceFailure(out string, ps *os.ProcessState) string {
	var why []string
	for _, m := range raceMarkers {
		if n := strings.Count(out, m); n > 0 {
			why = append(why, fmt.Sprintf("%q %d times in its output", m, n))
		}
	}
	if target.race && ps != nil && ps.Exited() && ps.ExitCode() == raceExitCode {
		why = append(why, fmt.Sprintf("it exited with status %d", raceExitCode))
	}
	return strings.Join(why, ", ")
}

// raceFailure is the package function for a server started by startProc,
// to be called once it has stopped.
func (s *server) raceFailure() string {
	select {
	case <-s.exited:
		return raceFailure(s.out.String(), s.cmd.ProcessState)
	default:
		return raceFailure(s.out.String(), nil)
	}
}

// serverCommand is exec.Command for the binary under test with the
// environment of serverEnv, for a test that runs it to its exit itself;
// such a test checks it with expectNoRace once it has exited.
func serverCommand(args ...string) *exec.Cmd {
	cmd := exec.Command(target.bin, args...)
	cmd.Env = serverEnv()
	return cmd
}

// expectNoRace fails t if cmd, a server process that has exited, and its
// output out show that the race detector fired.
func expectNoRace(t testing.TB, cmd *exec.Cmd, out string) {
	t.Helper()
	if why := raceFailure(out, cmd.ProcessState); why != "" {
		t.Errorf("the race detector fired in %s (%s); its output:\n%s", strings.Join(cmd.Args, " "), why, out)
	}
}

// raceSkipsBound reports (and logs) that a bound on the server's memory or
// latency is not to be checked because the server is race-built: the race
// detector multiplies a program's memory by 5-10 and its CPU time by 2-20,
// so such a bound says nothing about the server as shipped. Only the bound
// is skipped; what the test checks around it (replies, closes, counts)
// still runs, under the race detector.
func raceSkipsBound(t testing.TB, what string) bool {
	t.Helper()
	if target.race {
		t.Logf("race-built server: %s not checked", what)
	}
	return target.race
}

// ---------------------------------------------------------------------------
// Server processes.

type server struct {
	network string // "tcp" or "unix"
	addr    string // host:port or socket path
	port    int
	cmd     *exec.Cmd
	out     *syncBuffer
	exited  chan struct{}
	waitErr error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

var errExited = errors.New("server exited before it was listening")

// startServer starts the binary under test on 127.0.0.1 with a free port and
// the extra flags given, waits until it listens (on --tls-listen and --http
// too, when given) and kills it when the test ends.
func startServer(t testing.TB, extra ...string) *server {
	t.Helper()
	return startTestServer(t, "tcp", "", extra)
}

// startUnixServer is startServer with `-l unix:path`.
func startUnixServer(t testing.TB, path string, extra ...string) *server {
	t.Helper()
	return startTestServer(t, "unix", path, extra)
}

func startTestServer(t testing.TB, network, path string, extra []string) *server {
	t.Helper()
	s, err := startProcRetry(target.bin, network, path, extra)
	if err != nil {
		t.Fatalf("starting %s: %v", target.bin, err)
	}
	t.Cleanup(func() {
		s.stop()
		if why := s.raceFailure(); why != "" {
			t.Errorf("the race detector fired in the server (%s): see its report in the output below", why)
		}
		if t.Failed() {
			if out := s.out.String(); out != "" {
				t.Logf("server output (%s):\n%s", strings.Join(s.cmd.Args, " "), out)
			}
		}
	})
	return s
}

// startProcRetry is startProc, retried with a new port when a TCP server
// exits before listening (most likely its port was taken between picking
// and binding it).
func startProcRetry(bin, network, path string, extra []string) (*server, error) {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		var s *server
		if s, err = startProc(bin, network, path, extra); err == nil {
			return s, nil
		}
		if network != "tcp" || !errors.Is(err, errExited) {
			break
		}
	}
	return nil, err
}

// Ports for the servers a test starts come from below the kernel's range
// of ephemeral ports, which the connections that tests and servers open
// take their own ports from: a port picked from that range could be taken
// by one of them between being picked and being bound (a cluster node
// starts seconds after its port is picked, and a restarted one rebinds
// its port). Each test process (make test runs two at once) claims a
// slot of portsPerProcess of them, by a lock on a file of the temporary
// directory that it holds for its life, and hands them out in turn,
// skipping those some listener holds, each once: a node stopped and
// started again binds its port again. A process that runs out of its
// slot, or finds none free, takes ports from the kernel.
const portsPerProcess, portSlots = 7680, 4

var ports = struct {
	sync.Mutex
	base, next int // base 0: no slot, ports come from the kernel
	// handed are the ports the kernel picked that were handed out,
	// without a slot: the kernel may pick one again before its server
	// binds it.
	handed map[int]bool
}{handed: map[int]bool{}}

func init() {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	for k := range portSlots {
		base := low - (k+1)*portsPerProcess
		if base < 1024 {
			break
		}
		f, err := os.OpenFile(filepath.Join(os.TempDir(), fmt.Sprintf("beanpole-e2e-ports-%d.lock", k)), os.O_RDWR|os.O_CREATE, 0o666)
		if err != nil {
			break
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			ports.base = base // f stays open, and locked, for the process's life
			return
		}
		f.Close()
	}
}

func freePort() (int, error) {
	l, err := listenFresh()
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// listenFresh listens on the next port of this process's slot that no
// listener holds (without a slot, or once it is used up, on one the
// kernel picks that this process has not handed out).
func listenFresh() (net.Listener, error) {
	ports.Lock()
	defer ports.Unlock()
	for ; ports.base != 0 && ports.next < portsPerProcess; ports.next++ {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports.base+ports.next)))
		if err == nil {
			ports.next++
			return l, nil
		}
	}
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		if port := l.Addr().(*net.TCPAddr).Port; !ports.handed[port] {
			ports.handed[port] = true
			return l, nil
		}
		l.Close()
	}
}

func startProc(bin, network, path string, extra []string) (*server, error) {
	s := &server{network: network, out: &syncBuffer{}, exited: make(chan struct{})}
	var args []string
	if network == "unix" {
		s.addr = path
		args = []string{"-l", "unix:" + path}
	} else {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s.port = port
		s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		args = []string{"-l", "127.0.0.1", "-p", strconv.Itoa(port)}
	}
	args = append(args, extra...)
	s.cmd = exec.Command(bin, args...)
	s.cmd.Env = serverEnv()
	s.cmd.Stdout = s.out
	s.cmd.Stderr = s.out
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()
	// The server binds its listeners one after another (the protocol's,
	// then --tls-listen once the certificate is read, then --http): a
	// test may use any of them as soon as this returns.
	more := flagPorts(extra, "--tls-listen", "--http")
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-s.exited:
			return nil, fmt.Errorf("%w (%v): %s", errExited, s.waitErr, s.out.String())
		default:
		}
		if s.listeningOnAll(more) {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("server did not listen on %s and ports %v within 10s: %s", s.addr, more, s.out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// flagPorts is the TCP ports of the flags named given in args, as
// "--flag host:port" or "--flag=host:port" (a port of 0 is left out).
func flagPorts(args []string, names ...string) []int {
	var ports []int
	for i, a := range args {
		var v string
		if slices.Contains(names, a) && i+1 < len(args) {
			v = args[i+1]
		} else if name, val, ok := strings.Cut(a, "="); ok && slices.Contains(names, name) {
			v = val
		} else {
			continue
		}
		if _, p, err := net.SplitHostPort(v); err == nil {
			if port, err := strconv.Atoi(p); err == nil && port > 0 {
				ports = append(ports, port)
			}
		}
	}
	return ports
}

// listeningOnAll reports whether the server listens on its address and
// on the TCP ports given; without /proc to look at, whether each takes a
// connection.
func (s *server) listeningOnAll(ports []int) bool {
	probes := []server{*s}
	for _, port := range ports {
		p := *s
		p.network, p.addr, p.port = "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), port
		probes = append(probes, p)
	}
	for _, p := range probes {
		if ok, known := p.listening(); ok {
			continue
		} else if known {
			return false
		}
		nc, err := net.DialTimeout(p.network, p.addr, time.Second)
		if err != nil {
			return false
		}
		nc.Close()
	}
	return true
}

// listening reports whether the server process owns a listening socket on its
// address. It reads /proc instead of connecting, so that no probe connection
// ever shows up in the server's connection counters. known is false when
// /proc cannot answer.
func (s *server) listening() (ok, known bool) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.cmd.Process.Pid))
	if err != nil {
		return false, false
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", s.cmd.Process.Pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	if s.network == "unix" {
		data, err := os.ReadFile("/proc/net/unix")
		if err != nil {
			return false, false
		}
		// Num RefCount Protocol Flags Type St Inode Path
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) >= 8 && f[7] == s.addr && f[3] == "00010000" && inodes[f[6]] {
				return true, true
			}
		}
		return false, true
	}
	portHex := fmt.Sprintf(":%04X", s.port)
	seen := false
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		seen = true
		// sl local_address rem_address st tx:rx tr:tm retrnsmt uid timeout inode
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) >= 10 && strings.HasSuffix(f[1], portHex) && f[3] == "0A" && inodes[f[9]] {
				return true, true
			}
		}
	}
	return false, seen
}

// stop kills the server (SIGKILL) and waits for it.
func (s *server) stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
	}
}

// signal sends sig to the server process.
func (s *server) signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// ---------------------------------------------------------------------------
// Client connections and exact-byte assertions.

// conn is one raw client connection with its own read buffer.
type conn struct {
	nc  net.Conn
	buf []byte // received, not yet consumed
	eof error  // sticky read error (EOF or reset)
}

func (s *server) dial(t testing.TB) *conn {
	t.Helper()
	nc, err := net.DialTimeout(s.network, s.addr, defaultTimeout)
	if err != nil {
		t.Fatalf("dial %s %s: %v", s.network, s.addr, err)
	}
	c := &conn{nc: nc}
	t.Cleanup(func() { nc.Close() })
	return c
}

// fill reads once more from the socket, waiting at most until deadline. It
// returns a net.Error timeout, io.EOF / a reset, or nil.
func (c *conn) fill(deadline time.Time) error {
	if c.eof != nil {
		return c.eof
	}
	_ = c.nc.SetReadDeadline(deadline)
	var tmp [64 << 10]byte
	n, err := c.nc.Read(tmp[:])
	c.buf = append(c.buf, tmp[:n]...)
	if err != nil && !isTimeout(err) {
		c.eof = err
	}
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func mustSend(t testing.TB, c *conn, s string) {
	t.Helper()
	_ = c.nc.SetWriteDeadline(time.Now().Add(defaultTimeout))
	if _, err := io.WriteString(c.nc, s); err != nil {
		t.Fatalf("send %s: %v", show(s), err)
	}
}

// show quotes a byte string for messages, eliding the middle of long ones.
func show(s string) string {
	if len(s) > 400 {
		return strconv.Quote(s[:200]) + fmt.Sprintf(" ...(%d bytes)... ", len(s)-400) + strconv.Quote(s[len(s)-200:])
	}
	return strconv.Quote(s)
}

func diffMsg(want, got string) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	if len(want) <= 400 && len(got) <= 400 {
		return fmt.Sprintf("\n want: %s\n  got: %s\n first difference at byte %d", show(want), show(got), i)
	}
	// Long: show the neighbourhood of the first difference.
	from := max(0, i-160)
	window := func(s string) string {
		to := min(len(s), i+160)
		if from >= len(s) {
			return fmt.Sprintf("(%d bytes, ends before the difference)", len(s))
		}
		return fmt.Sprintf("[%d bytes] ...%s...", len(s), strconv.Quote(s[from:to]))
	}
	return fmt.Sprintf("\n want: %s\n  got: %s\n first difference at byte %d (shown from byte %d)", window(want), window(got), i, from)
}

// expect reads exactly len(want) bytes (within the default timeout) and
// fails unless they are want.
func expect(t testing.TB, c *conn, want string) {
	t.Helper()
	expectWithin(t, c, want, defaultTimeout)
}

func expectWithin(t testing.TB, c *conn, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for len(c.buf) < len(want) {
		if !strings.HasPrefix(want, string(c.buf)) {
			// Already wrong: collect a little more for the message, then fail.
			_ = c.fill(time.Now().Add(100 * time.Millisecond))
			break
		}
		if err := c.fill(deadline); err != nil {
			if isTimeout(err) {
				t.Fatalf("timed out after %v waiting for reply%s", d, diffMsg(want, string(c.buf)))
			}
			t.Fatalf("read: %v%s", err, diffMsg(want, string(c.buf)))
		}
	}
	if len(c.buf) < len(want) || string(c.buf[:len(want)]) != want {
		t.Fatalf("wrong reply%s", diffMsg(want, string(c.buf)))
	}
	c.buf = c.buf[len(want):]
}

// readLine reads one reply line up to and including the first CRLF and
// returns it without the CRLF.
func readLine(t testing.TB, c *conn) string {
	t.Helper()
	return readLineWithin(t, c, defaultTimeout)
}

func readLineWithin(t testing.TB, c *conn, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if i := bytes.Index(c.buf, []byte("\r\n")); i >= 0 {
			line := string(c.buf[:i])
			c.buf = c.buf[i+2:]
			return line
		}
		if err := c.fill(deadline); err != nil {
			t.Fatalf("reading a reply line: %v (have %s)", err, show(string(c.buf)))
		}
	}
}

// readInserted reads a put's reply within d, which must be INSERTED <id>,
// and returns the id.
func readInserted(t testing.TB, c *conn, d time.Duration) uint64 {
	t.Helper()
	line := readLineWithin(t, c, d)
	rest, ok := strings.CutPrefix(line, "INSERTED ")
	id, err := strconv.ParseUint(rest, 10, 64)
	if !ok || err != nil {
		t.Fatalf("a put was answered %s", show(line))
	}
	return id
}

// expectLine reads one line (up to CRLF) and compares it with want, which is
// given without the CRLF. Unlike expect it tolerates an unknown length.
func expectLine(t testing.TB, c *conn, want string) {
	t.Helper()
	if got := readLine(t, c); got != want {
		t.Fatalf("wrong reply line%s", diffMsg(want, got))
	}
}

// readN reads exactly n bytes.
func readN(t testing.TB, c *conn, n int, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for len(c.buf) < n {
		if err := c.fill(deadline); err != nil {
			t.Fatalf("reading %d bytes: %v (have %d: %s)", n, err, len(c.buf), show(string(c.buf)))
		}
	}
	s := string(c.buf[:n])
	c.buf = c.buf[n:]
	return s
}

// readYAML reads an `OK <n>\r\n<body>\r\n` reply, checks its framing and
// returns the body.
func readYAML(t testing.TB, c *conn) string {
	t.Helper()
	line := readLine(t, c)
	var n int
	if _, err := fmt.Sscanf(line, "OK %d", &n); err != nil || line != "OK "+strconv.Itoa(n) {
		t.Fatalf("want an OK <bytes> reply, got %s", show(line))
	}
	body := readN(t, c, n+2, defaultTimeout)
	if !strings.HasSuffix(body, "\r\n") {
		t.Fatalf("YAML body of %d bytes is not followed by CRLF: %s", n, show(body))
	}
	body = body[:n]
	if !strings.HasPrefix(body, "---\n") {
		t.Fatalf("YAML body does not start with ---: %s", show(body))
	}
	return body
}

// expectYAMLContains reads an OK reply and checks that its body contains
// every one of subs.
func expectYAMLContains(t testing.TB, c *conn, subs ...string) string {
	t.Helper()
	body := readYAML(t, c)
	for _, s := range subs {
		if !strings.Contains(body, s) {
			t.Fatalf("YAML body lacks %s:\n%s", show(s), body)
		}
	}
	return body
}

// expectNothing asserts that no byte arrives (and the connection stays open)
// for d.
func expectNothing(t testing.TB, c *conn, d time.Duration) {
	t.Helper()
	if len(c.buf) > 0 {
		t.Fatalf("unexpected reply bytes: %s", show(string(c.buf)))
	}
	err := c.fill(time.Now().Add(d))
	if len(c.buf) > 0 {
		t.Fatalf("expected no reply for %v, got %s", d, show(string(c.buf)))
	}
	if err != nil && !isTimeout(err) {
		t.Fatalf("expected the connection to stay open, got %v", err)
	}
}

// expectClosed asserts that the server closes the connection without sending
// anything more.
func expectClosed(t testing.TB, c *conn) {
	t.Helper()
	deadline := time.Now().Add(defaultTimeout)
	for {
		if len(c.buf) > 0 {
			t.Fatalf("expected the connection to be closed, got %s", show(string(c.buf)))
		}
		err := c.fill(deadline)
		if err == nil {
			continue
		}
		if isTimeout(err) {
			t.Fatalf("connection still open after %v", defaultTimeout)
		}
		if len(c.buf) > 0 {
			t.Fatalf("expected the connection to be closed, got %s", show(string(c.buf)))
		}
		return // EOF or reset
	}
}

// ---------------------------------------------------------------------------
// YAML helpers.

// yamlPairs parses a `---\nkey: value\n...` body into ordered pairs.
func yamlPairs(t testing.TB, body string) [][2]string {
	t.Helper()
	var out [][2]string
	for _, line := range strings.Split(strings.TrimPrefix(body, "---\n"), "\n") {
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			t.Fatalf("bad YAML line %s in %s", show(line), show(body))
		}
		out = append(out, [2]string{k, v})
	}
	return out
}

func yamlMap(t testing.TB, body string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, p := range yamlPairs(t, body) {
		m[p[0]] = p[1]
	}
	return m
}

// maskYAML replaces the values of the named keys by "*".
func maskYAML(body string, keys ...string) string {
	lines := strings.Split(body, "\n")
	for i, line := range lines {
		for _, k := range keys {
			if strings.HasPrefix(line, k+": ") {
				lines[i] = k + ": *"
			}
		}
	}
	return strings.Join(lines, "\n")
}

func stats(t testing.TB, c *conn) map[string]string {
	t.Helper()
	mustSend(t, c, "stats\r\n")
	return yamlMap(t, readYAML(t, c))
}

func statsJob(t testing.TB, c *conn, id uint64) map[string]string {
	t.Helper()
	mustSend(t, c, fmt.Sprintf("stats-job %d\r\n", id))
	return yamlMap(t, readYAML(t, c))
}

func statsTube(t testing.TB, c *conn, name string) map[string]string {
	t.Helper()
	mustSend(t, c, "stats-tube "+name+"\r\n")
	return yamlMap(t, readYAML(t, c))
}

// waitFor polls cond every 10ms until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitWaiting waits until the server reports n connections blocked in a
// reserve (global current-waiting), so that a test can order waiters.
func waitWaiting(t testing.TB, ctl *conn, n int) {
	t.Helper()
	want := strconv.Itoa(n)
	waitFor(t, defaultTimeout, "current-waiting: "+want, func() bool {
		return stats(t, ctl)["current-waiting"] == want
	})
}

// put sends a put and expects INSERTED with the given id.
func put(t testing.TB, c *conn, pri, delay, ttr int, body string, id uint64) {
	t.Helper()
	mustSend(t, c, fmt.Sprintf("put %d %d %d %d\r\n%s\r\n", pri, delay, ttr, len(body), body))
	expect(t, c, fmt.Sprintf("INSERTED %d\r\n", id))
}

func itoa(n int) string { return strconv.Itoa(n) }

// unquote strips the double quotes of a 1.13 YAML string value.
func unquote(v string) string {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		return v[1 : len(v)-1]
	}
	return v
}

// uname returns the kernel's nodename, version and machine fields.
func uname(t testing.TB) (nodename, version, machine string) {
	t.Helper()
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		t.Skipf("uname: %v", err)
	}
	return cstr(u.Nodename[:]), cstr(u.Version[:]), cstr(u.Machine[:])
}

// cstr converts a NUL-terminated utsname field (int8 or uint8 depending on
// the architecture) to a string.
func cstr[T int8 | uint8](a []T) string {
	b := make([]byte, 0, len(a))
	for _, c := range a {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}
