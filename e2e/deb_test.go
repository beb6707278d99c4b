package e2e

// make deb: the package holds the right files with the right modes, and
// installs into a throwaway root (dpkg --root, maintainer scripts run
// against it through DPKG_ROOT) and purges from it without a trace.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestDebianPackage(t *testing.T) {
	skipUnlessBeanpole(t, "beanpole's package")
	for _, tool := range []string{"dpkg-deb", "dpkg"} {
		lookTool(t, tool)
	}
	t.Parallel()
	out := t.TempDir()
	b, err := exec.Command(filepath.Join("..", "dist", "mkdeb.sh"), target.bin, out).CombinedOutput()
	if err != nil {
		t.Fatalf("mkdeb.sh: %v\n%s", err, b)
	}
	deb := strings.TrimSpace(string(b))

	b, err = exec.Command("dpkg-deb", "--contents", deb).CombinedOutput()
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
		"/usr/share/doc/beanpole/durability.md": "-rw-r--r--",
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
	b, _ = exec.Command("dpkg-deb", "-f", deb, "Package", "Depends").CombinedOutput()
	if !strings.Contains(string(b), "Package: beanpole") || strings.Contains(string(b), "Conflicts") {
		t.Errorf("control fields: %s", b)
	}
	b, _ = exec.Command("dpkg-deb", "-I", deb, "conffiles").CombinedOutput()
	if strings.TrimSpace(string(b)) != "/etc/default/beanpole" {
		t.Errorf("conffiles: %q", b)
	}

	root := t.TempDir()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "var/lib/dpkg/status"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dpkg := func(args ...string) {
		t.Helper()
		args = append([]string{"--root=" + root, "--force-not-root", "--force-script-chrootless", "--force-depends"}, args...)
		if b, err := exec.Command("dpkg", args...).CombinedOutput(); err != nil {
			t.Fatalf("dpkg %v: %v\n%s", args, err, b)
		}
	}
	dpkg("-i", deb)
	for _, p := range []string{"usr/bin/beanpole", "lib/systemd/system/beanpole.service", "etc/default/beanpole", "var/lib/beanpole"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("after install: %v", err)
		}
	}
	dpkg("--purge", "beanpole")
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
