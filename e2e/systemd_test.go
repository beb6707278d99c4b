package e2e

// beanpole under systemd: the units in dist/ pass systemd-analyze verify,
// the server tells systemd it is ready (sd_notify READY=1) only once the
// binlog is replayed and says STOPPING=1 at SIGTERM, and it serves a socket
// handed over by socket activation (systemd-socket-activate, as
// beanpole.socket would).

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func lookTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed (Debian's systemd package has it): %v", name, err)
	}
	return p
}

// The units are valid: systemd-analyze verify has nothing to say about
// them (it reports bad settings as warnings, so the output must be empty).
func TestSystemdUnitsVerify(t *testing.T) {
	skipUnlessBeanpole(t, "beanpole's units")
	tool := lookTool(t, "systemd-analyze")
	t.Parallel()
	dir := t.TempDir()
	for _, name := range []string{"beanpole.service", "beanpole.socket"} {
		b, err := os.ReadFile(filepath.Join("..", "dist", name))
		if err != nil {
			t.Fatal(err)
		}
		// verify insists that ExecStart exists: point it at the binary
		// under test.
		text := strings.ReplaceAll(string(b), "/usr/bin/beanpole", target.bin)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(tool, "verify", "--man=no", filepath.Join(dir, "beanpole.socket"), filepath.Join(dir, "beanpole.service"))
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// notifySocket listens where the server will send its notifications.
func notifySocket(t *testing.T) *net.UnixConn {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return c
}

func readNotify(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return string(buf[:n])
}

// READY=1 comes only after the binlog is replayed: at that moment `stats`
// already shows every recovered job. SIGTERM says STOPPING=1.
func TestSystemdNotifyReadyAfterReplay(t *testing.T) {
	skipUnlessBeanpole(t, "sd_notify is beanpole's")
	dir := t.TempDir()
	const jobs = 5000
	s := startServer(t, "-b", dir)
	c := s.dial(t)
	var b strings.Builder
	for i := 0; i < jobs; i++ {
		b.WriteString("put 0 0 60 3\r\nabc\r\n")
	}
	mustSend(t, c, b.String())
	for i := 1; i <= jobs; i++ {
		expectLine(t, c, "INSERTED "+strconv.Itoa(i))
	}
	s.signal(t, syscall.SIGTERM)
	<-s.exited

	ns := notifySocket(t)
	s = startServer(t, "-b", dir)
	if got := readNotify(t, ns); got != "READY=1" {
		t.Fatalf("first notification %q, want READY=1", got)
	}
	if n := stats(t, s.dial(t))["current-jobs-ready"]; n != strconv.Itoa(jobs) {
		t.Fatalf("at READY=1, current-jobs-ready is %s, want %d", n, jobs)
	}
	s.signal(t, syscall.SIGTERM)
	if got := readNotify(t, ns); got != "STOPPING=1" {
		t.Fatalf("at SIGTERM: %q, want STOPPING=1", got)
	}
}

// Socket activation as beanpole.socket does it: systemd-socket-activate
// binds the ports and starts the server on the first connection with the
// listening sockets as fd 3 and up; the server serves every one of them
// (upstream serves only the first) and needs no -l/-p.
func TestSystemdSocketActivation(t *testing.T) {
	skipUnlessBeanpole(t, "run under systemd-socket-activate")
	tool := lookTool(t, "systemd-socket-activate")
	t.Parallel()
	for _, n := range []int{1, 2} {
		t.Run(strconv.Itoa(n)+" sockets", func(t *testing.T) {
			var addrs []string
			args := []string{}
			for i := 0; i < n; i++ {
				port, err := freePort()
				if err != nil {
					t.Fatal(err)
				}
				addrs = append(addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
				args = append(args, "-l", addrs[i])
			}
			socketActivated(t, tool, args)
			for i, addr := range addrs {
				var nc net.Conn
				var err error
				waitFor(t, defaultTimeout, "a connection to "+addr, func() bool {
					nc, err = net.Dial("tcp", addr)
					return err == nil
				})
				c := &conn{nc: nc}
				t.Cleanup(func() { nc.Close() })
				mustSend(t, c, listUsed)
				expect(t, c, usingDflt)
				put(t, c, 0, 0, 60, "activated", uint64(i+1))
			}
		})
	}
}

// socketActivated runs the server under systemd-socket-activate (tool)
// with its arguments args (the -l sockets, then the server's own after
// target.bin), and stops it (SIGTERM) when the test ends.
func socketActivated(t *testing.T, tool string, args []string, server ...string) {
	t.Helper()
	cmd := exec.Command(tool, append(append(args, target.bin), server...)...)
	cmd.Env = serverEnv()
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		expectNoRace(t, cmd, out.String())
		if t.Failed() {
			t.Logf("output:\n%s", out.String())
		}
	})
}

// The man page renders without a warning and documents every option the
// server's usage text lists: a flag added without its page fails here.
func TestManPageCoversEveryOption(t *testing.T) {
	skipUnlessBeanpole(t, "beanpole's man page")
	groff := lookTool(t, "groff")
	t.Parallel()
	page := filepath.Join("..", "dist", "beanpole.1")
	cmd := exec.Command(groff, "-man", "-Tutf8", "-ww", "-z", page)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 {
		t.Fatalf("groff: %v\n%s", err, out)
	}
	src, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	roff := strings.ReplaceAll(string(src), `\-`, "-")
	usage, err := exec.Command(target.bin, "-h").CombinedOutput()
	if err != nil && len(usage) == 0 {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(usage)) {
		f = strings.TrimRight(f, ",;:.)")
		if !strings.HasPrefix(f, "-") || f == "-" || strings.Contains(f, "=") {
			continue
		}
		if !strings.Contains(roff, f) {
			t.Errorf("option %s is in beanpole -h but not in the man page", f)
		}
	}
}
