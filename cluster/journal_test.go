package cluster

import (
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/beanpole/beanpole/record"
)

// entryLog is a raft FSM that keeps the entries it is given.
type entryLog struct {
	mu      sync.Mutex
	entries [][]byte
}

func (e *entryLog) Apply(l *raft.Log) any {
	e.mu.Lock()
	e.entries = append(e.entries, append([]byte(nil), l.Data...))
	e.mu.Unlock()
	return nil
}
func (e *entryLog) Snapshot() (raft.FSMSnapshot, error) { return nil, io.EOF }
func (e *entryLog) Restore(io.ReadCloser) error         { return nil }

// singleRaft is a one-node raft group in memory over fsm, leading.
func singleRaft(t *testing.T, fsm raft.FSM) *raft.Raft {
	t.Helper()
	addr, tr := raft.NewInmemTransport(raft.NewInmemAddr())
	conf := raft.DefaultConfig()
	conf.LocalID = "n1"
	conf.LogOutput = io.Discard
	store := raft.NewInmemStore()
	r, err := raft.NewRaft(conf, fsm, store, store, raft.NewInmemSnapshotStore(), tr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Shutdown().Error() })
	cfg := raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: addr}}}
	if err := r.BootstrapCluster(cfg).Error(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.LeaderCh():
	case <-time.After(time.Minute):
		t.Fatal("no leader")
	}
	return r
}

type ackCount struct{ wg *sync.WaitGroup }

func (a ackCount) Durable(error) { a.wg.Done() }

// A pause record is an entry of its own, whatever records other clients
// append around it: a node built before pauses were replicated refuses an
// entry holding one whole, and so loses only the pause.
func TestPauseRecordIsAnEntryOfItsOwn(t *testing.T) {
	var log entryLog
	j := newJournal(singleRaft(t, &log), prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x"}))
	defer j.Close()
	var wg sync.WaitGroup
	const writers, each = 4, 200
	wg.Add(writers * each * 2)
	var id sync.Mutex
	next := uint64(0)
	for w := range writers {
		go func() {
			for i := range each {
				id.Lock()
				next++
				n := next
				id.Unlock()
				if err := j.Put(job(n), ackCount{&wg}); err != nil {
					t.Error(err)
					return
				}
				p := &record.Pause{Tube: "t", Delay: time.Second, Until: int64(i + 1)}
				if w%2 == 1 {
					p.Delay, p.Until = 0, 0
				}
				if err := j.Pause(p, ackCount{&wg}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	log.mu.Lock()
	defer log.mu.Unlock()
	pauses, jobs := 0, 0
	for i, e := range log.entries {
		var kinds []record.Kind
		if err := eachRecord(e[1:], func(r *record.Record) error { kinds = append(kinds, r.Kind); return nil }); err != nil {
			t.Fatal(err)
		}
		for _, k := range kinds {
			if k == record.KindPause {
				pauses++
				if len(kinds) != 1 {
					t.Fatalf("entry %d holds a pause among %d records: %v", i, len(kinds), kinds)
				}
			} else {
				jobs++
			}
		}
	}
	if pauses != writers*each || jobs != writers*each {
		t.Fatalf("%d pauses and %d puts committed, want %d of each", pauses, jobs, writers*each)
	}
}
