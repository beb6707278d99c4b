package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/beanpole/beanpole/persist"
	"github.com/rs/zerolog"
)

// runImport is `beanpole import -b DIR [--dry-run]`: the one-shot form of
// the import of an upstream beanstalkd binlog that starting the server on
// DIR performs anyway (persist/import.go). With --dry-run it only says what
// would be carried over, changing nothing.
func runImport(args []string, stdout, stderr io.Writer) int {
	usage := func(msg string) int {
		fmt.Fprintf(stderr, "beanpole import: %s\nUse: beanpole import -b DIR [--dry-run]\n", msg)
		return 5
	}
	dir, dry := "", false
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-b":
			if i+1 == len(args) {
				return usage("-b needs a directory")
			}
			i++
			dir = args[i]
		case "--dry-run":
			dry = true
		default:
			return usage("unknown argument: " + args[i])
		}
	}
	if dir == "" {
		return usage("-b DIR is required")
	}
	if dry {
		s, err := persist.DescribeUpstream(dir)
		if err != nil {
			fmt.Fprintf(stderr, "beanpole import: %v\n", err)
			return 1
		}
		fmt.Fprint(stdout, s)
		return 0
	}
	log := zerolog.New(zerolog.ConsoleWriter{Out: stderr, NoColor: true}).Level(zerolog.InfoLevel)
	l, rec, err := persist.Open(persist.Options{Dir: dir, WantSync: true}, log)
	if err != nil {
		fmt.Fprintf(stderr, "beanpole import: -b %s: %v\n", dir, err)
		if errors.Is(err, persist.ErrFormat) {
			return 1
		}
		return 10 // the directory is locked by a running server
	}
	fmt.Fprintf(stdout, "%s holds beanpole's log: %d jobs, ids up to %d\n", dir, len(rec.Jobs), rec.MaxID)
	if err := l.Close(); err != nil {
		fmt.Fprintf(stderr, "beanpole import: %v\n", err)
		return 1
	}
	return 0
}
