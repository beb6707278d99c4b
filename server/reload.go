package server

import (
	"sync/atomic"

	"github.com/beanpole/beanpole/cluster"
	"github.com/beanpole/beanpole/loop"
	"github.com/rs/zerolog"
)

// reloader reads the TLS files again at every Reload (SIGHUP), from the
// binlog's replay or a cluster node's start on: new handshakes, on --tls-listen, on
// HTTPS and on the links between nodes, get the files read then; open
// client connections keep theirs, and open links whose peer no longer
// verifies are closed. A bad file keeps the ones loaded before.
type reloader struct {
	files []*loop.TLSFiles
	node  atomic.Pointer[cluster.Node]
	log   zerolog.Logger
}

func (r *reloader) reload() {
	if len(r.files) == 0 {
		return
	}
	for _, f := range r.files {
		if err := f.Reload(); err != nil {
			r.log.Error().Err(err).Msg("SIGHUP: the TLS files were not reloaded; the ones loaded before stay in use")
		} else {
			r.log.Info().Msg("SIGHUP: " + f.What + " were reloaded")
		}
	}
	if n := r.node.Load(); n != nil {
		if cut := n.ReverifyLinks(); cut > 0 {
			r.log.Warn().Int("links", cut).Msg("SIGHUP: closed the links to nodes whose certificate no longer verifies")
		}
	}
}
