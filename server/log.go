package server

import (
	"io"
	"net"

	"github.com/rs/zerolog"
)

// logTimeFormat is the time of every log line, console and JSON alike, of
// the server and of beanpole import: RFC 3339 with milliseconds.
const logTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// NewLogger is the log of the server and of beanpole import. At the
// default verbosity it says what an operator needs once each (where the
// server listens, the binlog replayed or imported, drain, stop) and every
// warning and error; -V adds the details (open-file limit, memory budget,
// each connection), -VV gnet's own lines. --log-json writes one JSON
// object a line, for log shippers.
func NewLogger(w io.Writer, verbosity int, json bool) zerolog.Logger {
	level := zerolog.InfoLevel
	switch {
	case verbosity >= 2:
		level = zerolog.TraceLevel
	case verbosity == 1:
		level = zerolog.DebugLevel
	}
	zerolog.TimeFieldFormat = logTimeFormat
	if !json {
		w = zerolog.ConsoleWriter{Out: w, NoColor: true, TimeFormat: logTimeFormat}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

// listenerName is how the log names a listening socket: host:port, or
// unix:PATH.
func listenerName(ln net.Listener) string {
	if a := ln.Addr(); a.Network() == "unix" {
		return "unix:" + a.String()
	}
	return ln.Addr().String()
}
