// Package binlogimport is `beanpole import`: upstream beanstalkd's binlog
// carried over into beanpole's own log (persist.Import) on its own, no
// server.
package binlogimport

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/beanpole/beanpole/config"
	"github.com/beanpole/beanpole/persist"
	"github.com/beanpole/beanpole/server"
)

const importUsage = `Use: beanpole import -b DIR [--from SRC] [--dry-run] [--accept-damage]

Carries the jobs of upstream beanstalkd's binlog in DIR over into beanpole's
own log and moves beanstalkd's binlog.N files into DIR/beanstalkd-import/,
as starting beanpole -b DIR does, then exits.

  -b DIR           the directory beanstalkd ran with -b; with --from, the
                   directory beanpole will run with -b
  --from SRC       read beanstalkd's binlog from SRC (run as root, for
                   /var/lib/beanstalkd), changing nothing there: its
                   binlog.N files are copied into DIR, which must hold no
                   binlog yet, and imported there; what is created in DIR
                   is given to DIR's owner
  --dry-run        say what would be carried over (jobs per tube and state,
                   the highest id, damage found) and change nothing
  --accept-damage  import a binlog damaged other than at the end of a file
                   the way beanstalkd would start on it: without what cannot
                   be read (refused otherwise)

Exit status: 0 done (or nothing to do), 1 refused or failed, 5 a usage
error, 10 a running server holds the directory, 73 a directory is on a
read-only file system, 77 permission denied.
`

// Main is `beanpole import`, given the arguments after "import". It
// returns the exit status: 0 done (or nothing to do), 1 refused or failed, 5 a usage
// error, 10 the directory is in use by a running server, 73 or 77 a
// directory is read-only or not permitted (server.BinlogFailure).
func Main(args []string, stdout, stderr io.Writer) int {
	dir, from, dry, accept := "", "", false, false
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-b" || a == "--from":
			if i++; i == len(args) {
				fmt.Fprintf(stderr, "beanpole import: %s needs a directory\n%s", a, importUsage)
				return config.ExitUsage
			}
			if a == "-b" {
				dir = args[i]
			} else {
				from = args[i]
			}
		case strings.HasPrefix(a, "--from="):
			from = strings.TrimPrefix(a, "--from=")
		case strings.HasPrefix(a, "-b"):
			dir = strings.TrimPrefix(strings.TrimPrefix(a, "-b"), "=")
		case a == "--dry-run":
			dry = true
		case a == "--accept-damage":
			accept = true
		case a == "-h" || a == "--help":
			fmt.Fprint(stdout, importUsage)
			return 0
		default:
			fmt.Fprintf(stderr, "beanpole import: unexpected %q\n%s", a, importUsage)
			return config.ExitUsage
		}
	}
	if dir == "" {
		fmt.Fprintf(stderr, "beanpole import: -b DIR is required\n%s", importUsage)
		return config.ExitUsage
	}
	if from != "" && filepath.Clean(from) == filepath.Clean(dir) {
		fmt.Fprintf(stderr, "beanpole import: --from %s is -b's directory: leave --from out to import in place\n", from)
		return config.ExitUsage
	}
	fail := func(d string, err error) int { return server.BinlogFailure(stderr, "beanpole import", d, err, 1) }

	if dry {
		return dryRun(dir, from, stdout, stderr)
	}

	log := server.NewLogger(stderr, 0, false)
	if from != "" {
		copied, code := copyUpstream(from, dir, accept, stdout, stderr)
		if code != 0 || copied == 0 {
			return code
		}
	}
	rep, err := persist.Import(persist.Options{Dir: dir, WantSync: true}, accept, log)
	if err == nil && from != "" {
		err = giveToOwner(dir)
	}
	switch {
	case err != nil:
		return fail(dir, err)
	case rep == nil:
		fmt.Fprintf(stdout, "%s holds no upstream beanstalkd binlog: nothing to import\n", dir)
	case rep.Interrupted:
		fmt.Fprintf(stdout, "%s: finished an import that a crash had interrupted\n", dir)
	case from != "":
		fmt.Fprint(stdout, rep)
		fmt.Fprintf(stdout, "imported from %s, which is unchanged; copies of beanstalkd's files are in %s\n", from, rep.ArchiveDir())
	default:
		fmt.Fprint(stdout, rep)
		fmt.Fprintf(stdout, "imported; beanstalkd's files are in %s/\n", rep.ArchiveDir())
	}
	return 0
}

// dryRun says what importing dir's binlog (or from's, into dir) would
// carry over, changing nothing.
func dryRun(dir, from string, stdout, stderr io.Writer) int {
	src := dir
	if from != "" {
		src = from
	}
	rep, err := persist.PlanImport(src)
	if err != nil {
		return server.BinlogFailure(stderr, "beanpole import", src, err, 1)
	}
	if rep == nil {
		fmt.Fprintf(stdout, "%s holds no upstream beanstalkd binlog: nothing to import\n", src)
		return 0
	}
	fmt.Fprint(stdout, rep)
	if len(rep.Refused()) > 0 {
		cmd := "-b " + dir
		if from != "" {
			cmd = "--from " + from + " " + cmd
		}
		fmt.Fprintf(stdout, "beanpole would refuse to start on this damage; `beanpole import %s --accept-damage` imports what can be read, as beanstalkd would start\n", cmd)
	}
	fmt.Fprintln(stdout, "dry run: nothing changed")
	return 0
}

// copyUpstream copies the binlog.N files of upstream beanstalkd's binlog in
// src into dst, reading src only, for persist.Import to import there. It
// refuses, copying nothing, when beanstalkd still holds src, when the
// binlog is damaged and accept is false, or when dst already holds a
// binlog. It returns how many files it copied and a non-zero exit code on
// failure.
func copyUpstream(src, dst string, accept bool, stdout, stderr io.Writer) (int, int) {
	rep, err := persist.PlanImport(src)
	if err != nil {
		return 0, server.BinlogFailure(stderr, "beanpole import", src, err, 1)
	}
	if rep == nil || rep.Interrupted {
		fmt.Fprintf(stdout, "%s holds no upstream beanstalkd binlog: nothing to import\n", src)
		return 0, 0
	}
	if rep.InUse {
		fmt.Fprintf(stderr, "beanpole import: --from %s: a running server holds %s: stop beanstalkd first\n", src, filepath.Join(src, "lock"))
		return 0, config.ExitLocked
	}
	if len(rep.Refused()) > 0 && !accept {
		fmt.Fprint(stderr, rep)
		fmt.Fprintf(stderr, "beanpole import: --from %s: refused, nothing copied: the damage above loses jobs; --accept-damage imports what can be read, as beanstalkd would start\n", src)
		return 0, 1
	}
	names, err := persist.UpstreamFiles(src)
	if err != nil {
		return 0, server.BinlogFailure(stderr, "beanpole import", src, err, 1)
	}
	if have, _ := filepath.Glob(filepath.Join(dst, "binlog.*")); len(have) > 0 {
		fmt.Fprintf(stderr, "beanpole import: -b %s already holds a binlog (%s): --from imports only into a directory without one (`beanpole import -b %s` imports or finishes what is there)\n",
			dst, filepath.Base(have[0]), dst)
		return 0, 1
	}
	for _, name := range names {
		if err := copyFile(name, filepath.Join(dst, filepath.Base(name))); err != nil {
			return 0, server.BinlogFailure(stderr, "beanpole import", dst, err, 1)
		}
	}
	if err := syncDir(dst); err != nil {
		return 0, server.BinlogFailure(stderr, "beanpole import", dst, err, 1)
	}
	return len(names), 0
}

// copyFile copies from to a new file to, durably.
func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// giveToOwner gives what this process created in dir (owned by its
// effective user), dir's subdirectories and files included, to dir's
// owner and group, so that the server, running as that user, can use
// them: run as root, the import creates them as root.
func giveToOwner(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	uid, gid, ok := owner(st)
	if !ok {
		return nil
	}
	me := os.Geteuid()
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if u, g, ok := owner(info); ok && u == me && (u != uid || g != gid) {
			return os.Lchown(path, uid, gid)
		}
		return nil
	})
}

// owner is a file's owner and group, if the system says.
func owner(fi fs.FileInfo) (uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}
