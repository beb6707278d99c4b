package server

import (
	"time"

	"github.com/beanpole/beanpole/codec"
	"github.com/beanpole/beanpole/engine"
	"github.com/beanpole/beanpole/loop"
	"github.com/beanpole/beanpole/persist"
)

// statsSource reads /metrics from where the protocol's stats commands
// read: the server for `stats`, the engine for `list-tubes` and
// `stats-tube`.
type statsSource struct {
	srv  *loop.Server
	eng  *engine.Engine
	blog *persist.Log // nil without -b
	tls  bool         // --tls-listen
}

func (s statsSource) TLSHandshakeFailures() (uint64, bool) {
	return s.srv.TLSHandshakeFailures(), s.tls
}

func (s statsSource) TLSHandshakesShed() uint64 { return s.srv.TLSHandshakesShed() }

func (s statsSource) TLSConnections() int64 { return s.srv.TLSConnections() }

func (s statsSource) ServerStats(st *codec.ServerStats) { s.srv.Stats(st) }

func (s statsSource) Refused() uint64 { return s.srv.Refused() }

func (s statsSource) Bytes() (in, out uint64) { return s.srv.Bytes() }

func (s statsSource) LoopConnections(dst []int64) []int64 { return s.srv.LoopConnections(dst) }

func (s statsSource) Binlog() (persist.Stats, bool) {
	if s.blog == nil {
		return persist.Stats{}, false
	}
	return s.blog.Stats(), true
}

func (s statsSource) TubeNames(dst [][]byte) [][]byte { return s.eng.AppendTubeNames(dst) }

func (s statsSource) TubeStats(name []byte, st *codec.TubeStats) bool {
	return s.eng.StatsTube(name, st)
}

func (s statsSource) OldestReady(name []byte) (time.Duration, bool) { return s.eng.OldestReady(name) }

func (s statsSource) Latency(name []byte) (wait, run engine.Histogram, ok bool) {
	return s.eng.Latency(name)
}

func (s statsSource) Memory(k engine.MemKind) int64 { return s.eng.Memory(k) }
