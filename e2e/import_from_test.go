package e2e

// The switch from Debian's beanstalkd under the packaged unit: beanpole,
// running as its own user, cannot import /var/lib/beanstalkd in place, says
// why with an exit code of its own (73 read-only, 77 permission denied; 10
// stays for a directory another server holds), and beanpole import --from
// SRC -b DIR, run as root, imports SRC into DIR without changing SRC and
// gives DIR's new files to DIR's owner.

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// nobody is the unprivileged account the tests run the server as.
const nobodyUID = 65534

// skipUnlessRoot skips a test that changes owners or runs the server as
// another user.
func skipUnlessRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: changes owners and runs the server with -u nobody")
	}
}

// snapshot is every entry under dir with its mode, owner, time and
// contents' hash.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		fmt.Fprintf(&b, "%s %v %d:%d %d %d", path, fi.Mode(), st.Uid, st.Gid, fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %x", sha256.Sum256(data))
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// debianBeanstalkdDir makes dir look like Debian's /var/lib/beanstalkd:
// files of mode 0400 and a directory of 0555, owned by another user.
func debianBeanstalkdDir(t *testing.T, dir string) {
	t.Helper()
	for _, f := range binlogFiles(t, dir) {
		if err := os.Chmod(f, 0o400); err != nil {
			t.Fatal(err)
		}
	}
	if os.Geteuid() == 0 {
		if err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(path, nobodyUID, nobodyUID)
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
}

// openToAll lets every user reach dir (t.TempDir's directories are 0700).
func openToAll(t *testing.T, dir string) {
	t.Helper()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// beanpole import --from SRC -b DIR carries every job of beanstalkd's
// binlog in SRC over into DIR and leaves SRC exactly as it was (names,
// modes, owners, times, contents: no lock file, no move); what it creates
// in DIR belongs to DIR's owner, so a server running as that user (-u
// nobody) starts on DIR with every job; a second --from into DIR is
// refused, since DIR holds a binlog now.
func TestImportFromLeavesTheSourceAndGivesTheLogToItsOwner(t *testing.T) {
	skipUnlessBeanpole(t, "beanpole import --from is beanpole's")
	t.Parallel()
	src := t.TempDir()
	b := makeCBinlog(t, src, syscall.SIGTERM)
	files := binlogFiles(t, src)
	debianBeanstalkdDir(t, src)
	before := snapshot(t, src)

	dst := filepath.Join(t.TempDir(), "beanpole")
	if err := os.Mkdir(dst, 0o750); err != nil {
		t.Fatal(err)
	}
	var serverArgs []string
	if os.Geteuid() == 0 {
		openToAll(t, filepath.Dir(dst))
		if err := os.Chown(dst, nobodyUID, nobodyUID); err != nil {
			t.Fatal(err)
		}
		serverArgs = []string{"-u", "nobody"}
	}

	out, code := runBeanpole(t, "", "import", "--from", src, "-b", dst, "--dry-run")
	if code != 0 || !strings.Contains(out, b.counts()) || !strings.Contains(out, "dry run: nothing changed") {
		t.Fatalf("dry run (exit %d), want %q:\n%s", code, b.counts(), out)
	}
	out, code = runBeanpole(t, "", "import", "--from", src, "-b", dst)
	want := fmt.Sprintf("imported from %s, which is unchanged; copies of beanstalkd's files are in %s\n", src, filepath.Join(dst, "beanstalkd-import"))
	if code != 0 || !strings.Contains(out, b.counts()) || !strings.HasSuffix(out, want) {
		t.Fatalf("beanpole import --from (exit %d), want %q and %q:\n%s", code, b.counts(), want, out)
	}
	if after := snapshot(t, src); after != before {
		t.Fatalf("--from changed SRC:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if copies := binlogFiles(t, filepath.Join(dst, "beanstalkd-import")); len(copies) != len(files) {
		t.Errorf("DIR/beanstalkd-import holds %v, want copies of %d files", copies, len(files))
	}
	owner := func(path string) (uint32, uint32) {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		return st.Uid, st.Gid
	}
	du, dg := owner(dst)
	filepath.WalkDir(dst, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if u, g := owner(path); u != du || g != dg {
			t.Errorf("%s belongs to %d:%d, DIR to %d:%d", path, u, g, du, dg)
		}
		return nil
	})

	s := startServer(t, append(serverArgs, "-b", dst)...)
	c := s.dial(t)
	b.check(t, c)
	put(t, c, 0, 0, 60, "after the import", b.maxID+1)
	s.signal(t, syscall.SIGTERM)
	<-s.exited

	out, code = runBeanpole(t, "", "import", "--from", src, "-b", dst)
	if code != 1 || !strings.Contains(out, "already holds a binlog") {
		t.Fatalf("a second --from into DIR: exit %d, want 1 and a refusal:\n%s", code, out)
	}
	if after := snapshot(t, src); after != before {
		t.Fatalf("the refused --from changed SRC")
	}
}

// Started on beanstalkd's directory as a user that may not write it, the
// server and beanpole import exit 77 saying "permission denied" and naming
// --from, not 10 ("another server holds the lock"), and change nothing.
func TestBinlogDirNotPermittedExits77(t *testing.T) {
	skipUnlessBeanpole(t, "exit 77 is beanpole's; beanstalkd exits 10")
	skipUnlessRoot(t)
	t.Parallel()
	src := t.TempDir()
	cBinlogOf(t, src, 2)
	if err := os.Remove(filepath.Join(src, "lock")); err != nil {
		t.Fatal(err)
	}
	debianBeanstalkdDir(t, src)
	if err := os.Chown(src, 0, 0); err != nil {
		t.Fatal(err)
	}
	openToAll(t, src)
	if err := os.Chmod(src, 0o755); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, src)
	out, code := runBeanpoleWithin(t, defaultTimeout*6, "-u", "nobody", "-l", "127.0.0.1", "-p", "0", "-b", src)
	if code != 77 || !strings.Contains(out, "permission denied") || !strings.Contains(out, "beanpole import --from "+src) {
		t.Fatalf("server as nobody on root's directory: exit %d, want 77:\n%s", code, out)
	}
	if after := snapshot(t, src); after != before {
		t.Fatalf("the refused start changed the directory:\n%s\n%s", before, after)
	}
}

// On a read-only file system (as /var/lib/beanstalkd is under the unit's
// ProtectSystem=strict), the server and beanpole import exit 73 saying it
// is read-only; a directory another server holds still exits 10.
func TestBinlogDirReadOnlyExits73AndLockedStays10(t *testing.T) {
	skipUnlessBeanpole(t, "exit 73 is beanpole's; beanstalkd exits 10")
	skipUnlessRoot(t)
	t.Parallel()
	ro := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", ro).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a read-only tmpfs here: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", ro).Run() })
	out, code := runBeanpoleWithin(t, defaultTimeout*6, "-l", "127.0.0.1", "-p", "0", "-b", ro)
	if code != 73 || !strings.Contains(out, "read-only file system") || !strings.Contains(out, "beanpole import --from "+ro) {
		t.Fatalf("server on a read-only directory: exit %d, want 73:\n%s", code, out)
	}
	if out, code := runBeanpole(t, "", "import", "-b", ro); code != 73 || !strings.Contains(out, "read-only file system") {
		t.Fatalf("beanpole import on a read-only directory: exit %d, want 73:\n%s", code, out)
	}

	held := t.TempDir()
	s := startServer(t, "-b", held)
	if out, code := runBeanpole(t, "", "import", "-b", held); code != 10 || !strings.Contains(out, "another server (beanstalkd or beanpole) holds") {
		t.Fatalf("beanpole import on a held directory: exit %d, want 10:\n%s", code, out)
	}
	s.stop()

	// --from refuses while beanstalkd still runs on SRC.
	if _, err := os.Stat(referenceBin); err == nil {
		src := t.TempDir()
		c, err := startProcRetry(referenceBin, "tcp", "", []string{"-b", src})
		if err != nil {
			t.Fatal(err)
		}
		defer c.stop()
		put(t, c.dial(t), 0, 0, 60, "job", 1)
		if out, code := runBeanpole(t, "", "import", "--from", src, "-b", t.TempDir()); code != 10 || !strings.Contains(out, "stop beanstalkd first") {
			t.Fatalf("--from a directory beanstalkd holds: exit %d, want 10:\n%s", code, out)
		}
	}
}

// beanpole -h lists beanpole import and its --from.
func TestUsageListsImport(t *testing.T) {
	skipUnlessBeanpole(t, "beanpole import is beanpole's")
	t.Parallel()
	out, _ := exec.Command(target.bin, "-h").CombinedOutput()
	if !strings.Contains(string(out), "beanpole import -b DIR [--from SRC] [--dry-run] [--accept-damage]") {
		t.Fatalf("beanpole -h does not list beanpole import:\n%s", out)
	}
	out, _ = exec.Command(target.bin, "import", "-h").CombinedOutput()
	for _, w := range []string{"--from SRC", "73 a directory is on a\nread-only file system, 77 permission denied"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("beanpole import -h lacks %q:\n%s", w, out)
		}
	}
}
