package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/beanpole/beanpole/persist"
)

const importUsage = `Use: beanpole import -b DIR [--dry-run] [--accept-damage]

Carries the jobs of upstream beanstalkd's binlog in DIR over into beanpole's
own log and moves beanstalkd's binlog.N files into DIR/beanstalkd-import/,
as starting beanpole -b DIR does, then exits.

  -b DIR           the directory beanstalkd ran with -b
  --dry-run        say what would be carried over (jobs per tube and state,
                   the highest id, damage found) and change nothing
  --accept-damage  import a binlog damaged other than at the end of a file
                   the way beanstalkd would start on it: without what cannot
                   be read (refused otherwise)
`

// runImport is `beanpole import`: the import of an upstream beanstalkd
// binlog (persist.Import) on its own, no server. It returns the exit
// status: 0 done (or nothing to do), 1 refused or failed, 5 a usage
// error, 10 the directory is in use by a running server.
func runImport(args []string, stdout, stderr io.Writer) int {
	dir, dry, accept := "", false, false
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-b":
			if i++; i == len(args) {
				fmt.Fprintf(stderr, "beanpole import: -b needs a directory\n%s", importUsage)
				return 5
			}
			dir = args[i]
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
			return 5
		}
	}
	if dir == "" {
		fmt.Fprintf(stderr, "beanpole import: -b DIR is required\n%s", importUsage)
		return 5
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "beanpole import: -b %s: %v\n", dir, err)
		if errors.Is(err, persist.ErrLocked) {
			return 10
		}
		return 1
	}

	if dry {
		rep, err := persist.PlanImport(dir)
		if err != nil {
			return fail(err)
		}
		if rep == nil {
			fmt.Fprintf(stdout, "%s holds no upstream beanstalkd binlog: nothing to import\n", dir)
			return 0
		}
		fmt.Fprint(stdout, rep)
		if len(rep.Refused()) > 0 {
			fmt.Fprintf(stdout, "beanpole would refuse to start on this damage; `beanpole import -b %s --accept-damage` imports what can be read, as beanstalkd would start\n", dir)
		}
		fmt.Fprintln(stdout, "dry run: nothing changed")
		return 0
	}

	log := newLogger(stderr, 0, false)
	rep, err := persist.Import(persist.Options{Dir: dir, WantSync: true}, accept, log)
	switch {
	case err != nil:
		return fail(err)
	case rep == nil:
		fmt.Fprintf(stdout, "%s holds no upstream beanstalkd binlog: nothing to import\n", dir)
	case rep.Interrupted:
		fmt.Fprintf(stdout, "%s: finished an import that a crash had interrupted\n", dir)
	default:
		fmt.Fprint(stdout, rep)
		fmt.Fprintf(stdout, "imported; beanstalkd's files are in %s/beanstalkd-import/\n", strings.TrimSuffix(dir, "/"))
	}
	return 0
}
