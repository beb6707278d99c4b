// Command beanpole is a drop-in replacement for the beanstalkd work-queue
// server: same wire protocol, same flags, same stats.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/beanpole/beanpole/config"
	"github.com/beanpole/beanpole/engine"
	"github.com/beanpole/beanpole/loop"
	"github.com/rs/zerolog"
	"github.com/rs/zerolog/diode"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	cfg, code, done := config.Parse(args, stdout, stderr)
	if done {
		return code
	}

	// Log lines go through a diode so that a slow stderr never blocks an
	// event loop; -V raises the level like upstream's verbosity.
	dw := diode.NewWriter(stderr, 4096, 10*time.Millisecond, func(missed int) {
		fmt.Fprintf(stderr, "beanpole: dropped %d log messages\n", missed)
	})
	defer dw.Close()
	level := zerolog.WarnLevel
	switch {
	case cfg.Verbosity >= 2:
		level = zerolog.DebugLevel
	case cfg.Verbosity == 1:
		level = zerolog.InfoLevel
	}
	log := zerolog.New(zerolog.ConsoleWriter{Out: dw, NoColor: true, TimeFormat: time.RFC3339}).
		Level(level).With().Timestamp().Logger()

	if _, hard, err := config.RaiseFileLimit(); err != nil {
		log.Warn().Err(err).Msg("could not raise the open-file limit")
	} else {
		log.Info().Uint64("nofile", hard).Msg("open-file limit raised")
	}

	if cfg.BinlogDir != "" {
		fmt.Fprintf(stderr, "beanpole: -b %s: the binlog is not available in this build; refusing to run without the persistence you asked for\n", cfg.BinlogDir)
		return 10
	}

	ln, desc, err := config.Listen(&cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "beanpole: listen: %v\n", err)
		return 111
	}
	log.Info().Int("pid", os.Getpid()).Str("addr", desc).Msg("listening")

	if cfg.User != "" {
		if err := config.DropPrivileges(cfg.User); err != nil {
			fmt.Fprintf(stderr, "beanpole: %v\n", err)
			return config.ExitCodeFor(err)
		}
	}

	loops := runtime.GOMAXPROCS(0)
	eng := engine.New(loops)
	srv, err := loop.New(loop.Config{
		Loops:      loops,
		MaxJobSize: cfg.MaxJobSize,
		Version:    config.Version,
		Verbosity:  cfg.Verbosity,
		Log:        log,
	}, eng)
	if err != nil {
		fmt.Fprintf(stderr, "beanpole: %v\n", err)
		return 1
	}
	if err := srv.Start(); err != nil {
		fmt.Fprintf(stderr, "beanpole: %v\n", err)
		return 1
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGINT)
	signal.Ignore(syscall.SIGPIPE)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGUSR1 {
				// Drain mode, as upstream: puts are refused from now on.
				eng.SetDraining()
				log.Info().Msg("entering drain mode")
				continue
			}
			// Graceful stop (a beanpole improvement over upstream's
			// immediate death): stop accepting, flush, exit 0.
			log.Info().Str("signal", sig.String()).Msg("shutting down")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			srv.Stop(ctx)
			cancel()
			return 0
		case err := <-served:
			if err != nil {
				log.Error().Err(err).Msg("listener failed")
				return 1
			}
			return 0
		}
	}
}
