package config

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The env variables the helper process understands.
const (
	helperEnv     = "BEANPOLE_CONFIG_HELPER" // "systemd-exec", "systemd-run" or "drop-privileges"
	helperArgsEnv = "BEANPOLE_CONFIG_HELPER_ARGS"
)

var listenEnv = []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"}

// systemdResult is what the helper reports back as JSON on stdout.
type systemdResult struct {
	Desc      string
	Err       string
	Warnings  []string
	EnvLeft   []string // LISTEN_* still set after Listen
	FD3Closed bool     // the original fd 3 was closed after the dup
	FD4Closed bool     // so was the original fd 4 of a second socket
	Listeners int
	Accepted  bool
}

// TestHelperProcess is not a test: it is the child side of the re-exec
// pattern, doing nothing unless helperEnv is set.
func TestHelperProcess(t *testing.T) {
	switch os.Getenv(helperEnv) {
	case "systemd-exec":
		// systemd sets LISTEN_PID between fork and exec, so the value is
		// our own pid. Reproduce that faithfully: exec keeps the pid and
		// the inherited descriptors.
		os.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid()))
		os.Setenv(helperEnv, "systemd-run")
		exe, err := os.Executable()
		if err == nil {
			err = syscall.Exec(exe, os.Args, os.Environ())
		}
		fmt.Fprintln(os.Stderr, "exec:", err)
		os.Exit(2)
	case "systemd-run":
		systemdChild()
		os.Exit(0)
	case "drop-privileges":
		dropPrivilegesChild()
		os.Exit(0)
	}
}

func systemdChild() {
	var res systemdResult
	defer func() { json.NewEncoder(os.Stdout).Encode(res) }()

	cfg, _, done := Parse(strings.Fields(os.Getenv(helperArgsEnv)), os.Stderr, os.Stderr)
	if done {
		res.Err = "flags"
		return
	}
	log, buf := testLogger()
	lns, desc, err := Listen(&cfg, log)
	res.Desc, res.Listeners = desc, len(lns)
	if err != nil {
		res.Err = err.Error()
	}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var e struct{ Level, Message string }
		if json.Unmarshal([]byte(line), &e) == nil && e.Level == "warn" {
			res.Warnings = append(res.Warnings, e.Message)
		}
	}
	for _, k := range listenEnv {
		if _, ok := os.LookupEnv(k); ok {
			res.EnvLeft = append(res.EnvLeft, k)
		}
	}
	if len(lns) == 0 {
		return
	}
	ln := lns[0]
	_, err = unix.FcntlInt(3, unix.F_GETFD, 0)
	res.FD3Closed = errors.Is(err, unix.EBADF)
	_, err = unix.FcntlInt(4, unix.F_GETFD, 0)
	res.FD4Closed = errors.Is(err, unix.EBADF)

	ln.(interface{ SetDeadline(time.Time) error }).SetDeadline(time.Now().Add(5 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		res.Err = "accept: " + err.Error()
		return
	}
	fmt.Fprintf(c, "hello from %d\n", os.Getpid())
	c.Close()
	res.Accepted = true
}

// runSystemdChild starts the test binary as systemd would start beanpole,
// with files as fds 3, 4, ... and flags as its command line. If dial is
// set, it connects there and expects the child to answer.
func runSystemdChild(t *testing.T, files []*os.File, flags string, dial net.Addr) systemdResult {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(withoutListenEnv(os.Environ()),
		helperEnv+"=systemd-exec",
		helperArgsEnv+"="+flags,
		"LISTEN_FDS="+strconv.Itoa(len(files)),
		"LISTEN_FDNAMES=a:b",
	)
	cmd.ExtraFiles = files
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		f.Close() // the child has its own copies now
	}

	if dial != nil {
		c, err := net.DialTimeout(dial.Network(), dial.String(), 5*time.Second)
		if err != nil {
			t.Errorf("dial %s: %v", dial, err)
		} else {
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			want := fmt.Sprintf("hello from %d\n", cmd.Process.Pid)
			if err != nil || line != want {
				t.Errorf("child said %q, %v; want %q", line, err, want)
			}
			c.Close()
		}
	}

	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v\nstderr: %s", err, stderr.String())
	}
	var res systemdResult
	if err := json.Unmarshal([]byte(stdout.String()), &res); err != nil {
		// The test framework may print "PASS" after our JSON line.
		first, _, _ := strings.Cut(stdout.String(), "\n")
		if err := json.Unmarshal([]byte(first), &res); err != nil {
			t.Fatalf("helper output %q: %v\nstderr: %s", stdout.String(), err, stderr.String())
		}
	}
	return res
}

func withoutListenEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "LISTEN_") && !strings.HasPrefix(kv, helperEnv) {
			out = append(out, kv)
		}
	}
	return out
}

func TestListenSystemdTCP(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}

	res := runSystemdChild(t, []*os.File{f}, "-V -l 0.0.0.0 -p 11300", ln.Addr())
	if res.Err != "" {
		t.Fatalf("child error: %s", res.Err)
	}
	if want := "systemd fd 3 " + ln.Addr().String(); res.Desc != want {
		t.Errorf("desc = %q; want %q", res.Desc, want)
	}
	wantWarn := []string{
		"inherited listen fd; ignoring option: -l 0.0.0.0",
		"inherited listen fd; ignoring option: -p 11300",
	}
	if fmt.Sprint(res.Warnings) != fmt.Sprint(wantWarn) {
		t.Errorf("warnings = %q; want %q", res.Warnings, wantWarn)
	}
	if len(res.EnvLeft) != 0 {
		t.Errorf("LISTEN_* left in the environment: %v", res.EnvLeft)
	}
	if !res.FD3Closed {
		t.Error("fd 3 still open after Listen: the socket would outlive the listener")
	}
	if !res.Accepted {
		t.Error("child did not accept on the inherited socket")
	}
}

func TestListenSystemdUnixAndExtraFD(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "act.sock")
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	uf, err := ul.File()
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	tf, err := tl.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}

	res := runSystemdChild(t, []*os.File{uf, tf}, "", ul.Addr())
	if res.Err != "" {
		t.Fatalf("child error: %s", res.Err)
	}
	// Both sockets are served (upstream takes only the first).
	if want := "systemd fd 3 unix:" + path + ", fd 4 " + tl.Addr().String(); res.Desc != want {
		t.Errorf("desc = %q; want %q", res.Desc, want)
	}
	if res.Listeners != 2 || len(res.Warnings) != 0 {
		t.Errorf("%d listeners, warnings %q; want 2 and none", res.Listeners, res.Warnings)
	}
	if !res.FD4Closed {
		t.Error("fd 4 still open after Listen: the socket would outlive its listener")
	}
	if len(res.EnvLeft) != 0 {
		t.Errorf("LISTEN_* left in the environment: %v", res.EnvLeft)
	}
	// The socket file belongs to systemd: the child must not unlink it.
	if _, err := os.Stat(path); err != nil {
		t.Errorf("socket file gone after the child exited: %v", err)
	}
}

func TestListenSystemdRejectsNonListeningFD(t *testing.T) {
	udp, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	uf, err := udp.(*net.UDPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	plain, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}

	for name, f := range map[string]*os.File{"udp": uf, "file": plain} {
		res := runSystemdChild(t, []*os.File{f}, "", nil)
		if !strings.HasPrefix(res.Err, errNotListeningStream.Error()) {
			t.Errorf("%s as fd 3: err = %q; want %q...", name, res.Err, errNotListeningStream)
		}
		if len(res.EnvLeft) != 0 {
			t.Errorf("%s: LISTEN_* left in the environment: %v", name, res.EnvLeft)
		}
	}
}

// A later socket that is not a listening stream (a unit may pass a
// datagram socket too) is skipped with a warning and closed, while the
// first is served: upstream never looks past fd 3, so what it accepts,
// beanpole accepts.
func TestListenSystemdSkipsExtraNonListeningFD(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	udp, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	uf, err := udp.(*net.UDPConn).File()
	if err != nil {
		t.Fatal(err)
	}

	res := runSystemdChild(t, []*os.File{f, uf}, "", ln.Addr())
	if res.Err != "" {
		t.Fatalf("child error: %s", res.Err)
	}
	if want := "systemd fd 3 " + ln.Addr().String(); res.Desc != want || res.Listeners != 1 {
		t.Errorf("desc = %q, %d listeners; want %q, 1", res.Desc, res.Listeners, want)
	}
	if len(res.Warnings) != 1 || res.Warnings[0] != "inherited fd 4 is not served" {
		t.Errorf("warnings = %q; want one for fd 4", res.Warnings)
	}
	if !res.FD4Closed {
		t.Error("the skipped fd 4 is still open")
	}
	if !res.Accepted {
		t.Error("child did not accept on fd 3")
	}
}

// A LISTEN_PID naming another process is not for us: listen normally, and
// still scrub the variables so that no child inherits them.
func TestListenSystemdOtherPID(t *testing.T) {
	t.Setenv("LISTEN_PID", strconv.Itoa(os.Getppid()))
	t.Setenv("LISTEN_FDS", "1")
	t.Setenv("LISTEN_FDNAMES", "x")
	ln, desc, warns := listenOK(t, Config{ListenAddr: "127.0.0.1", Port: "0", addrGiven: true, portGiven: true})
	if !strings.HasPrefix(desc, "127.0.0.1:") || len(warns) != 0 {
		t.Errorf("desc = %q, warnings = %q", desc, warns)
	}
	roundTrip(t, ln)
	for _, k := range listenEnv {
		if _, ok := os.LookupEnv(k); ok {
			t.Errorf("%s still set", k)
		}
	}
}

// LISTEN_FDS=0 for us means "nothing passed", as in libsystemd.
func TestListenSystemdZeroFDs(t *testing.T) {
	t.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid()))
	t.Setenv("LISTEN_FDS", "0")
	ln, desc, _ := listenOK(t, Config{ListenAddr: "127.0.0.1", Port: "0"})
	if !strings.HasPrefix(desc, "127.0.0.1:") {
		t.Errorf("desc = %q", desc)
	}
	roundTrip(t, ln)
}

// Malformed values are errors, as sd_listen_fds returns -EINVAL for them.
func TestListenSystemdMalformed(t *testing.T) {
	pid := strconv.Itoa(os.Getpid())
	for _, env := range [][2]string{{"abc", "1"}, {"0", "1"}, {pid, "x"}, {pid, "-1"}} {
		t.Setenv("LISTEN_PID", env[0])
		t.Setenv("LISTEN_FDS", env[1])
		log, _ := testLogger()
		lns, _, err := Listen(&Config{ListenAddr: "127.0.0.1", Port: "0"}, log)
		if err == nil {
			lns[0].Close()
			t.Errorf("LISTEN_PID=%s LISTEN_FDS=%s: no error", env[0], env[1])
		} else if !errors.Is(err, syscall.EINVAL) || !strings.HasPrefix(err.Error(), "sd_listen_fds: ") {
			t.Errorf("LISTEN_PID=%s LISTEN_FDS=%s: err = %v", env[0], env[1], err)
		}
		for _, k := range listenEnv {
			if _, ok := os.LookupEnv(k); ok {
				t.Errorf("%s still set", k)
			}
		}
	}
}
