package e2e

// An empty -l or -p, as a unit passes when the variable it expands is
// unset, stops the server at start; and the packaged unit never expands to
// one.

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// beanpole -l ” and -p ” exit 111 (C's code for -l ”) with a message
// naming the empty flag, instead of listening on 0.0.0.0 or on a random
// port (which C does for -p ”).
func TestEmptyListenAddressOrPortIsRefused(t *testing.T) {
	skipUnlessBeanpole(t, "C listens on a random port for -p ''")
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-l", "", "-p", ""}, "beanpole: listen: -l '': the listen address is empty; give one (0.0.0.0 for every IPv4 interface) or leave -l out\n"},
		{[]string{"-l", "127.0.0.1", "-p", ""}, "beanpole: listen: -p '': the port is empty; give one (11300 is the default) or leave -p out\n"},
	} {
		out, code := runBeanpoleWithin(t, 30*time.Second, tc.args...)
		if code != 111 || out != tc.want {
			t.Errorf("beanpole %q: exit %d, output %q; want 111 and %q", tc.args, code, out, tc.want)
		}
	}
}

// Every variable beanpole.service expands in ExecStart for -l and -p has a
// default in Environment= (EnvironmentFile=- makes /etc/default/beanpole
// optional, and the file's values override these), and the default address
// is loopback, as in beanpole.default.
func TestSystemdUnitHasListenDefaults(t *testing.T) {
	skipUnlessBeanpole(t, "beanpole's unit")
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "dist", "beanpole.service"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	var exec string
	envAt, fileAt := -1, -1
	for i, line := range strings.Split(string(b), "\n") {
		switch k, v, _ := strings.Cut(line, "="); k {
		case "Environment":
			envAt = i
			for _, kv := range strings.Fields(v) {
				name, val, _ := strings.Cut(kv, "=")
				env[name] = val
			}
		case "EnvironmentFile":
			fileAt = i
		case "ExecStart":
			exec = v
		}
	}
	if envAt < 0 || fileAt < envAt {
		t.Fatalf("want Environment= before EnvironmentFile= (lines %d, %d)", envAt, fileAt)
	}
	for _, m := range regexp.MustCompile(`-([lp]) \$\{?(\w+)\}?`).FindAllStringSubmatch(exec, -1) {
		if env[m[2]] == "" {
			t.Errorf("ExecStart passes -%s $%s, which has no default in Environment=", m[1], m[2])
		}
	}
	if env["BEANPOLE_LISTEN_ADDR"] != "127.0.0.1" {
		t.Errorf("default address %q, want 127.0.0.1", env["BEANPOLE_LISTEN_ADDR"])
	}
}

// runBeanpoleWithin runs the binary under test to its exit, as runBeanpole
// does, but kills it and fails the test if it is still running after d (a
// server that starts when it should have refused to).
func runBeanpoleWithin(t *testing.T, d time.Duration, args ...string) (string, int) {
	t.Helper()
	cmd := serverCommand(args...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(d, func() { _ = cmd.Process.Kill() })
	_ = cmd.Wait()
	if !timer.Stop() {
		t.Fatalf("beanpole %q still running after %v:\n%s", args, d, out.String())
	}
	expectNoRace(t, cmd, out.String())
	return out.String(), cmd.ProcessState.ExitCode()
}
