package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"sync"

	"github.com/rs/zerolog"
)

// raftLog carries raft's log lines into the process's logger, so that they
// come out in the same format (console or --log-json) with the same
// timestamps as every other line. raft logs through hclog in JSON; each
// line is decoded and written again as one event of log.
type raftLog struct {
	mu  sync.Mutex
	log zerolog.Logger
	buf []byte
}

func (w *raftLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.line(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
}

func (w *raftLog) line(b []byte) {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		w.log.Warn().Str("component", "raft").Msg(string(b))
		return
	}
	ev := w.log.Warn()
	switch m["@level"] {
	case "error":
		ev = w.log.Error()
	case "info":
		ev = w.log.Info()
	case "debug", "trace":
		ev = w.log.Debug()
	}
	ev = ev.Str("component", "raft")
	keys := make([]string, 0, len(m))
	for k := range m {
		if k[0] != '@' {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		ev = ev.Str(k, fmt.Sprint(m[k]))
	}
	msg, _ := m["@message"].(string)
	ev.Msg("raft: " + msg)
}
