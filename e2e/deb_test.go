package e2e

// make deb: the package holds the right files with the right modes,
// lintian has nothing to say about it, and it installs into a throwaway
// root (dpkg --root, maintainer scripts run against it through DPKG_ROOT),
// upgrades there restarting a running service, and purges from it without
// a trace.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ciTool finds a tool CI installs, or skips: a CI machine without it
// fails, since .ci/run installs it.
func ciTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("no %s on a CI machine: .ci/run installs %s", name, pkg)
	}
	t.Skipf("no %s here (apt-get install %s)", name, pkg)
	return ""
}

// mkdeb runs dist/mkdeb.sh into a new directory with the environment
// given and returns the package's path.
func mkdeb(t *testing.T, env ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join("..", "dist", "mkdeb.sh"), t.TempDir())
	cmd.Env = append(os.Environ(), env...)
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("mkdeb.sh: %v\n%s%s", err, b, stderrOf(err))
	}
	return strings.TrimSpace(string(b))
}

func stderrOf(err error) []byte {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.Stderr
	}
	return nil
}

func TestDebianPackage(t *testing.T) {
	skipUnlessBeanpole(t, "beanpole's package")
	for _, tool := range []string{"dpkg-deb", "dpkg", "dpkg-shlibdeps", "gcc"} {
		lookTool(t, tool)
	}
	t.Parallel()
	deb := mkdeb(t)

	b, err := exec.Command("dpkg-deb", "--contents", deb).CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg-deb --contents: %v\n%s", err, b)
	}
	modes := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[1] != "root/root" {
			t.Fatalf("not owned by root: %q", line)
		}
		modes[strings.TrimPrefix(f[5], ".")] = f[0]
	}
	for path, mode := range map[string]string{
		"/":                                     "drwxr-xr-x",
		"/usr/bin/beanpole":                     "-rwxr-xr-x",
		"/lib/systemd/system/beanpole.service":  "-rw-r--r--",
		"/lib/systemd/system/beanpole.socket":   "-rw-r--r--",
		"/etc/default/beanpole":                 "-rw-r--r--",
		"/usr/share/man/man1/beanpole.1.gz":     "-rw-r--r--",
		"/usr/share/doc/beanpole/README.md":     "-rw-r--r--",
		"/usr/share/doc/beanpole/README.Debian": "-rw-r--r--",
		"/usr/share/doc/beanpole/copyright":     "-rw-r--r--",
		"/usr/share/doc/beanpole/changelog.gz":  "-rw-r--r--",
		// The documents README.md and the man page cite, where they say.
		"/usr/share/doc/beanpole/docs/durability.md": "-rw-r--r--",
		"/usr/share/doc/beanpole/docs/import.md":     "-rw-r--r--",
		"/usr/share/doc/beanpole/docs/cluster.md":    "-rw-r--r--",
		"/usr/share/doc/beanpole/docs/operating.md":  "-rw-r--r--",
		// The operator's kit docs/operating.md describes.
		"/usr/share/beanpole/beanpole-dashboard.json": "-rw-r--r--",
		"/usr/share/beanpole/beanpole-alerts.yml":     "-rw-r--r--",
	} {
		if modes[path] != mode {
			t.Errorf("%s: mode %q, want %s", path, modes[path], mode)
		}
	}
	for path := range modes {
		if strings.Contains(path, "beanstalkd") {
			t.Errorf("%s: a file of beanstalkd's name would conflict with beanstalkd's package", path)
		}
	}
	b, _ = exec.Command("dpkg-deb", "-f", deb, "Package", "Depends", "Conflicts").CombinedOutput()
	if !strings.Contains(string(b), "Package: beanpole") || !strings.Contains(string(b), "libc6 (>=") || strings.Contains(string(b), "Conflicts") {
		t.Errorf("control fields: %s", b)
	}
	b, _ = exec.Command("dpkg-deb", "-I", deb, "conffiles").CombinedOutput()
	if strings.TrimSpace(string(b)) != "/etc/default/beanpole" {
		t.Errorf("conffiles: %q", b)
	}

	t.Run("lintian", func(t *testing.T) {
		lintian := ciTool(t, "lintian", "lintian")
		// Every error and warning fails (info and pedantic tags are
		// shown, not counted).
		cmd := exec.Command(lintian, "--fail-on", "error,warning", "--info", deb)
		b, err := cmd.CombinedOutput()
		var tags []string
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "E: ") || strings.HasPrefix(line, "W: ") {
				tags = append(tags, line)
			}
		}
		if err != nil || len(tags) != 0 {
			t.Errorf("lintian: %v\n%s", err, b)
		}
	})

	// A later version of the same tree, to upgrade to.
	next := mkdeb(t, "BEANPOLE_DEB_VERSION=99.0.0")

	// The throwaway root runs systemd, as far as the maintainer scripts
	// can tell (run/systemd/system); deb-systemd-helper,
	// deb-systemd-invoke and systemctl are stand-ins that write their
	// arguments to calls.
	root := t.TempDir()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates", "run/systemd/system"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "var/lib/dpkg/status"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fake := t.TempDir()
	calls := filepath.Join(fake, "calls")
	for _, name := range []string{"deb-systemd-helper", "deb-systemd-invoke", "systemctl"} {
		script := "#!/bin/sh\necho \"$(basename \"$0\") $*\" >> " + calls + "\n"
		if err := os.WriteFile(filepath.Join(fake, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dpkg := func(want string, args ...string) {
		t.Helper()
		_ = os.Remove(calls)
		args = append([]string{"--root=" + root, "--force-not-root", "--force-script-chrootless", "--force-depends"}, args...)
		cmd := exec.Command("dpkg", args...)
		cmd.Env = append(os.Environ(), "PATH="+fake+string(os.PathListSeparator)+os.Getenv("PATH"))
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("dpkg %v: %v\n%s", args, err, b)
		}
		got, _ := os.ReadFile(calls)
		if string(got) != want {
			t.Errorf("dpkg %v: the maintainer scripts asked systemd:\n%s\nwant:\n%s", args[4:], got, want)
		}
	}
	// A fresh install starts nothing (beanstalkd may hold 11300).
	dpkg("deb-systemd-helper update-state beanpole.service beanpole.socket\n"+
		"systemctl --system daemon-reload\n", "-i", deb)
	for _, p := range []string{"usr/bin/beanpole", "lib/systemd/system/beanpole.service", "etc/default/beanpole", "var/lib/beanpole"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("after install: %v", err)
		}
	}
	// An upgrade leaves the service running through the old prerm (the
	// old postrm reloads the units) and restarts it, if it runs, once the
	// new binary is in place.
	dpkg("systemctl --system daemon-reload\n"+
		"deb-systemd-helper update-state beanpole.service beanpole.socket\n"+
		"systemctl --system daemon-reload\n"+
		"deb-systemd-invoke try-restart beanpole.service\n", "-i", next)
	if b, _ := exec.Command("dpkg-query", "--admindir="+filepath.Join(root, "var/lib/dpkg"), "-W", "beanpole").CombinedOutput(); strings.TrimSpace(string(b)) != "beanpole\t99.0.0" {
		t.Errorf("after the upgrade: %q", b)
	}
	dpkg("deb-systemd-invoke stop beanpole.socket beanpole.service\n"+
		"systemctl --system daemon-reload\n", "--remove", "beanpole")
	dpkg("deb-systemd-helper purge beanpole.service beanpole.socket\n"+
		"systemctl --system daemon-reload\n", "--purge", "beanpole")
	var left []string
	_ = filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		rel, _ := filepath.Rel(root, p)
		if err == nil && !info.IsDir() && !strings.HasPrefix(rel, "var/lib/dpkg") {
			left = append(left, rel)
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(root, "var/lib/beanpole")); !os.IsNotExist(err) {
		left = append(left, "var/lib/beanpole")
	}
	if len(left) != 0 {
		t.Errorf("left after purge: %v", left)
	}
}
