// Command beanpole is a drop-in replacement for the beanstalkd work-queue
// server: same wire protocol, same flags, same stats. The server itself
// is package server; main parses the flags, makes the log and maps the
// signals to the server's calls.
package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/beanpole/beanpole/config"
	"github.com/beanpole/beanpole/server"
	"github.com/beanpole/beanpole/server/binlogimport"
	"github.com/beanpole/beanpole/server/clusterctl"
	"github.com/rs/zerolog/diode"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "import" {
		return binlogimport.Main(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "cluster" {
		return clusterctl.Main(args[1:], stdout, stderr)
	}
	cfg, code, done := config.Parse(args, stdout, stderr)
	if done {
		return code
	}

	// Log lines go through a diode so that a slow stderr never blocks an
	// event loop.
	dw := diode.NewWriter(stderr, 4096, 10*time.Millisecond, func(missed int) {
		fmt.Fprintf(stderr, "beanpole: dropped %d log messages\n", missed)
	})
	defer dw.Close()

	sigs, hup := make(chan os.Signal, 4), make(chan os.Signal, 1)
	srv, code := server.New(&cfg, server.Options{
		Log:    server.NewLogger(dw, cfg.Verbosity, cfg.LogJSON),
		Stderr: stderr,
		Takes: func(c server.Call) {
			switch c {
			case server.CallDrain:
				signal.Notify(sigs, syscall.SIGUSR1)
			case server.CallStop:
				signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
			case server.CallReload:
				signal.Notify(hup, syscall.SIGHUP)
			}
		},
	})
	if srv == nil {
		return code
	}
	go func() {
		for range hup {
			srv.Reload()
		}
	}()
	go func() {
		for sig := range sigs {
			if sig == syscall.SIGUSR1 {
				srv.Drain()
			} else {
				srv.Stop(sig.String())
			}
		}
	}()
	signal.Ignore(syscall.SIGPIPE)
	return srv.Run()
}
