package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// testLogger returns a logger whose warnings can be read back with warnings.
func testLogger() (zerolog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return zerolog.New(&buf), &buf
}

// warnings extracts the messages of warn-level lines from a JSON log.
func warnings(t *testing.T, log []byte) []string {
	t.Helper()
	var out []string
	for _, line := range bytes.Split(bytes.TrimSpace(log), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var e struct{ Level, Message string }
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("bad log line %q: %v", line, err)
		}
		if e.Level == "warn" {
			out = append(out, e.Message)
		}
	}
	return out
}

// roundTrip proves ln accepts: it dials, accepts and passes one byte.
func roundTrip(t *testing.T, ln net.Listener) net.Conn {
	t.Helper()
	network, addr := ln.Addr().Network(), ln.Addr().String()
	c, err := net.DialTimeout(network, addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s %s: %v", network, addr, err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	s.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(s, b); err != nil || b[0] != 'x' {
		t.Fatalf("read %q, %v", b, err)
	}
	return s
}

func listenOK(t *testing.T, cfg Config) (net.Listener, string, []string) {
	t.Helper()
	log, buf := testLogger()
	lns, desc, err := Listen(&cfg, log)
	if err != nil {
		t.Fatalf("Listen(%+v): %v", cfg, err)
	}
	if len(lns) != 1 {
		t.Fatalf("Listen(%+v): %d listeners", cfg, len(lns))
	}
	ln := lns[0]
	t.Cleanup(func() { ln.Close() })
	return ln, desc, warnings(t, buf.Bytes())
}

func sockoptInt(t *testing.T, c net.Conn, level, opt int) int {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), level, opt) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return v
}

func TestListenTCPLoopback(t *testing.T) {
	ln, desc, warns := listenOK(t, Config{ListenAddr: "127.0.0.1", Port: "0"})
	if desc != ln.Addr().String() || !strings.HasPrefix(desc, "127.0.0.1:") {
		t.Errorf("desc = %q, addr = %s", desc, ln.Addr())
	}
	if len(warns) != 0 {
		t.Errorf("unexpected warnings %q", warns)
	}
	s := roundTrip(t, ln)
	// Upstream's listen-socket options, as seen on an accepted socket.
	if sockoptInt(t, s, syscall.IPPROTO_TCP, syscall.TCP_NODELAY) == 0 {
		t.Error("accepted socket lacks TCP_NODELAY")
	}
	if sockoptInt(t, s, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE) == 0 {
		t.Error("accepted socket lacks SO_KEEPALIVE")
	}
}

// With no -l, upstream binds 0.0.0.0 only (getaddrinfo(NULL) yields IPv4
// first on Linux), not the dual-stack [::].
func TestListenDefaultIsIPv4Wildcard(t *testing.T) {
	ln, _, _ := listenOK(t, Config{Port: "0"})
	a := ln.Addr().(*net.TCPAddr)
	if a.IP.To4() == nil || !a.IP.IsUnspecified() {
		t.Fatalf("default listen address = %s; want 0.0.0.0:port", a)
	}
}

func TestListenHostname(t *testing.T) {
	ln, _, _ := listenOK(t, Config{ListenAddr: "localhost", Port: "0"})
	if a := ln.Addr().(*net.TCPAddr); !a.IP.IsLoopback() {
		t.Fatalf("localhost resolved to %s", a)
	}
	roundTrip(t, ln)
}

func TestListenIPv6Literal(t *testing.T) {
	probe, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	probe.Close()
	for _, host := range []string{"::1", "[::1]"} {
		ln, desc, _ := listenOK(t, Config{ListenAddr: host, Port: "0"})
		if !strings.HasPrefix(desc, "[::1]:") {
			t.Errorf("-l %s: desc = %q", host, desc)
		}
		roundTrip(t, ln)
	}
}

func TestListenBadPort(t *testing.T) {
	log, _ := testLogger()
	_, _, err := Listen(&Config{ListenAddr: "127.0.0.1", Port: "no-such-service-beanpole"}, log)
	if err == nil {
		t.Fatal("Listen with an unknown service name succeeded")
	}
}

func TestListenPortInUse(t *testing.T) {
	ln, _, _ := listenOK(t, Config{ListenAddr: "127.0.0.1", Port: "0"})
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	log, _ := testLogger()
	if _, _, err := Listen(&Config{ListenAddr: "127.0.0.1", Port: port}, log); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second Listen on %s: err = %v; want EADDRINUSE", port, err)
	}
}

func TestListenUnix(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.sock")
	// -p is ignored for UNIX sockets, so even a bad one is harmless.
	ln, desc, warns := listenOK(t, Config{ListenAddr: "unix:" + path, Port: "no-such-service"})
	if desc != "unix:"+path {
		t.Errorf("desc = %q", desc)
	}
	if len(warns) != 0 {
		t.Errorf("unexpected warnings %q", warns)
	}
	roundTrip(t, ln)
}

// A socket file left by a crashed run must not stop a restart.
func TestListenUnixReplacesStaleSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stale.sock")
	old, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	old.SetUnlinkOnClose(false)
	old.Close()
	if st, err := os.Stat(path); err != nil || st.Mode().Type() != os.ModeSocket {
		t.Fatalf("stale socket not left behind: %v", err)
	}

	ln, _, warns := listenOK(t, Config{ListenAddr: "unix:" + path, Port: DefaultPort})
	if len(warns) != 1 || warns[0] != "removing existing local socket to replace it" {
		t.Errorf("warnings = %q", warns)
	}
	roundTrip(t, ln)
}

// Anything that is not a socket is someone's data: refuse, touch nothing.
func TestListenUnixRefusesOtherFiles(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "data")
	if err := os.WriteFile(file, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{file, dir} {
		log, _ := testLogger()
		lns, _, err := Listen(&Config{ListenAddr: "unix:" + path}, log)
		if err == nil {
			lns[0].Close()
			t.Fatalf("Listen on existing %s succeeded", path)
		}
		if !strings.Contains(err.Error(), "another file already exists in the given path") {
			t.Errorf("err = %v", err)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "precious" {
		t.Fatalf("file changed: %q, %v", b, err)
	}
}

func TestListenUnixPathTooLong(t *testing.T) {
	path := "/tmp/" + strings.Repeat("a", 103) // 108 characters
	log, _ := testLogger()
	_, _, err := Listen(&Config{ListenAddr: "unix:" + path}, log)
	want := "socket path " + path + " is too long (108 characters), where maximum allowed is 107"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v; want %q", err, want)
	}
}

// Upstream makes a file called "@name"; Go would make an abstract socket.
func TestListenUnixAtSignIsAFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	ln, _, _ := listenOK(t, Config{ListenAddr: "unix:@b.sock"})
	if st, err := os.Stat(filepath.Join(dir, "@b.sock")); err != nil || st.Mode().Type() != os.ModeSocket {
		t.Fatalf("no socket file @b.sock: %v", err)
	}
	roundTrip(t, ln)
}

// An empty -l or -p (a unit expanding an unset variable) is refused, never
// taken for the default address or a random port; leaving the flag out
// still means the default. Under unix: an empty -p is ignored like any -p.
func TestListenRefusesEmptyAddressOrPort(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" = listens
	}{
		{[]string{"-l", "", "-p", ""}, "-l '': the listen address is empty"},
		{[]string{"-l", "", "-p", "0"}, "-l '': the listen address is empty"},
		{[]string{"-l", "127.0.0.1", "-p", ""}, "-p '': the port is empty"},
		{[]string{"-l127.0.0.1", "-p"}, "flag requires an argument"},
		{[]string{"-l", "127.0.0.1", "-p", "0"}, ""},
	} {
		var stderr bytes.Buffer
		cfg, code, done := Parse(tc.args, io.Discard, &stderr)
		if done {
			if !strings.Contains(stderr.String(), tc.want) || code != ExitUsage {
				t.Errorf("%q: Parse exit %d: %s", tc.args, code, stderr.String())
			}
			continue
		}
		log, _ := testLogger()
		lns, _, err := Listen(&cfg, log)
		for _, ln := range lns {
			ln.Close()
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: err = %v, want %q", tc.args, err, tc.want)
		}
	}
	path := filepath.Join(t.TempDir(), "s")
	cfg, _, _ := Parse([]string{"-l", "unix:" + path, "-p", ""}, io.Discard, io.Discard)
	log, _ := testLogger()
	lns, _, err := Listen(&cfg, log)
	if err != nil {
		t.Fatalf("-l unix: -p '': %v", err)
	}
	lns[0].Close()
}
