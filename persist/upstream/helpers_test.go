package upstream

import (
	"bytes"
	"testing"

	"github.com/beanpole/beanpole/persist/upstream/upstreamtest"
)

type rec = upstreamtest.Record

// States as the encoder takes them.
const (
	uDeleted = upstreamtest.Deleted
	uReady   = upstreamtest.Ready
	uBuried  = upstreamtest.Buried
	uDelayed = upstreamtest.Delayed
	uRsvd    = upstreamtest.Reserved
)

// base is a job put into tube.
func base(id uint64, tube, body string) rec { return upstreamtest.Put(id, tube, body) }

// file is a binlog file of layout lay holding recs, then pad zero bytes
// of preallocation.
func file(lay layout, pad int, recs ...rec) []byte {
	return upstreamtest.File(int(lay.version), pad, recs...)
}

// replay reads files as binlog.1, binlog.2, ... of /dir.
func replay(t *testing.T, files ...[]byte) *Replay {
	t.Helper()
	rp := NewReplay("/dir")
	for i, f := range files {
		if err := rp.ReadFile(uint64(i+1), bytes.NewReader(f), int64(len(f))); err != nil {
			t.Fatal(err)
		}
	}
	return rp
}

// byID indexes a replay's jobs.
func byID(rp *Replay) map[uint64]Job {
	m := map[uint64]Job{}
	for _, j := range rp.Jobs() {
		m[j.ID] = *j
	}
	return m
}
