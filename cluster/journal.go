package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/beanpole/beanpole/record"
)

// maxInFlight bounds the entries handed to raft and not yet committed:
// raft pipelines them to the followers, and the batcher waits (so records
// pile up into bigger entries) once this many are outstanding.
const maxInFlight = 64

// errNotLeader: this node does not lead the group (any more), so it can
// promise nothing. The engine answers every change INTERNAL_ERROR from the
// first one, as it does for a failed binlog.
var errNotLeader = errors.New("cluster: this node is not the leader")

// Journal is the engine's journal on the leader (engine.Journal).
// Records are appended under the job's tube lock, as with the binlog, so
// each job's records keep their order; the records that arrive while the
// previous entry is being handed to raft form the next entry.
type Journal struct {
	r *raft.Raft

	mu     sync.Mutex
	entry  []byte // the entry being filled: entryRecords, then framed records
	acks   []record.Ack
	sealed []pending // filled entries queued before entry, oldest first (Pause)
	failed error
	wake   chan struct{}
	done   chan struct{} // closed by Close: the batcher, then the completer, end

	flight  chan inflight
	latency prometheus.Observer // apply to commit, per entry

	// lent holds the body of each put not yet applied to this node's
	// state, by job id: the engine's own slice, which never changes once
	// put. The state takes it (Lent) instead of copying the entry's bytes,
	// so the leader holds each body once, not twice.
	lentMu sync.Mutex
	lent   map[uint64][]byte
}

type pending struct {
	entry []byte
	acks  []record.Ack
}

type inflight struct {
	f    raft.ApplyFuture
	acks []record.Ack
	at   time.Time
}

func newJournal(r *raft.Raft, latency prometheus.Observer) *Journal {
	j := &Journal{r: r, latency: latency, wake: make(chan struct{}, 1), done: make(chan struct{}), flight: make(chan inflight, maxInFlight),
		lent: make(map[uint64][]byte)}
	go j.batcher()
	go j.completer()
	return j
}

// begin opens a record of an entry under j.mu: the frame's length is
// patched by end.
func (j *Journal) begin() (int, error) {
	j.mu.Lock()
	return j.beginLocked()
}

// beginLocked is begin with j.mu held; it unlocks it on failure.
func (j *Journal) beginLocked() (int, error) {
	if j.failed != nil {
		j.mu.Unlock()
		return 0, j.failed
	}
	if len(j.entry) == 0 {
		j.entry = append(j.entry, entryRecords)
	}
	at := len(j.entry)
	j.entry = append(j.entry, 0, 0, 0, 0)
	return at, nil
}

// end closes the record opened at at, queues its ack and wakes the batcher.
func (j *Journal) end(at int, ack record.Ack) error {
	j.endLocked(at, ack)
	j.mu.Unlock()
	j.wakeBatcher()
	return nil
}

// endLocked patches the length of the record opened at at and queues its
// ack, with j.mu held.
func (j *Journal) endLocked(at int, ack record.Ack) {
	binary.LittleEndian.PutUint32(j.entry[at:], uint32(len(j.entry)-at-4))
	j.acks = append(j.acks, ack)
}

func (j *Journal) wakeBatcher() {
	select {
	case j.wake <- struct{}{}:
	default:
	}
}

// Put queues the full record of a new job.
func (j *Journal) Put(job *record.Job, ack record.Ack) error {
	at, err := j.begin()
	if err != nil {
		return err
	}
	j.entry = record.AppendFull(j.entry, job)
	j.lentMu.Lock()
	j.lent[job.ID] = job.Body
	j.lentMu.Unlock()
	return j.end(at, ack)
}

// Lent hands the state the engine's body of job id, once, if this journal
// put it and it is not applied yet.
func (j *Journal) Lent(id uint64) ([]byte, bool) {
	j.lentMu.Lock()
	b, ok := j.lent[id]
	delete(j.lent, id)
	j.lentMu.Unlock()
	return b, ok
}

// Delete queues a delete record.
func (j *Journal) Delete(id uint64, ack record.Ack) error {
	at, err := j.begin()
	if err != nil {
		return err
	}
	j.entry = record.AppendDelete(j.entry, id)
	return j.end(at, ack)
}

// Release queues a release record.
func (j *Journal) Release(id uint64, pri uint32, delay time.Duration, deadline int64, c record.Counters, ack record.Ack) error {
	at, err := j.begin()
	if err != nil {
		return err
	}
	j.entry = record.AppendRelease(j.entry, id, pri, delay, deadline, c)
	return j.end(at, ack)
}

// Bury queues a bury record.
func (j *Journal) Bury(id uint64, pri uint32, buriedSeq uint64, c record.Counters, ack record.Ack) error {
	at, err := j.begin()
	if err != nil {
		return err
	}
	j.entry = record.AppendBury(j.entry, id, pri, buriedSeq, c)
	return j.end(at, ack)
}

// Kick queues a kick record.
func (j *Journal) Kick(id uint64, c record.Counters, ack record.Ack) error {
	at, err := j.begin()
	if err != nil {
		return err
	}
	j.entry = record.AppendKick(j.entry, id, c)
	return j.end(at, ack)
}

// Pause queues a pause record (engine.PauseJournal): pauses are
// replicated, so a new leader keeps them. ack may be nil. A pause record
// is an entry of its own: a node built before pauses were replicated
// refuses an entry that holds one whole, and must lose only the pause,
// never other clients' records beside it.
func (j *Journal) Pause(p *record.Pause, ack record.Ack) error {
	j.mu.Lock()
	j.sealLocked()
	at, err := j.beginLocked()
	if err != nil {
		return err
	}
	j.entry = record.AppendPause(j.entry, p)
	j.endLocked(at, ack)
	j.sealLocked()
	j.mu.Unlock()
	j.wakeBatcher()
	return nil
}

// sealLocked queues the entry being filled, if it holds any record, so
// that later records go in another.
func (j *Journal) sealLocked() {
	if len(j.acks) > 0 {
		j.sealed = append(j.sealed, pending{j.entry, j.acks})
		j.entry, j.acks = nil, nil
	}
}

// Rewrite is the binlog's compaction hook; raft compacts by snapshots, so
// there is nothing to rewrite.
func (j *Journal) Rewrite(*record.Job) error { return nil }

// FileOf is the binlog file of a job (stats-job's `file`): 0, there is none.
func (j *Journal) FileOf(uint64) uint64 { return 0 }

// batcher hands each filled entry to raft. raft.Apply does not wait for
// the commit, so entries follow each other to the followers while earlier
// ones are still being written and fsynced.
func (j *Journal) batcher() {
	defer close(j.flight)
	for {
		select {
		case <-j.wake:
		case <-j.done:
			j.mu.Lock()
			j.sealLocked()
			sealed, failed := j.sealed, j.failed
			j.sealed = nil
			j.mu.Unlock()
			for _, p := range sealed {
				for _, a := range p.acks {
					if a != nil {
						a.Durable(failed)
					}
				}
			}
			return
		}
		j.mu.Lock()
		sealed, entry, acks := j.sealed, j.entry, j.acks
		j.sealed = nil
		j.entry, j.acks = make([]byte, 0, len(entry)), make([]record.Ack, 0, len(acks))
		j.mu.Unlock()
		for _, p := range sealed {
			j.flight <- inflight{f: j.r.Apply(p.entry, 0), acks: p.acks, at: time.Now()}
		}
		if len(acks) == 0 {
			continue
		}
		j.flight <- inflight{f: j.r.Apply(entry, 0), acks: acks, at: time.Now()}
	}
}

// Close fails every later record (errNotLeader) and ends the journal's
// goroutines once the entries handed to raft are done with: a node that
// lost the lead closes the journal of its term.
func (j *Journal) Close() {
	j.fail(errNotLeader)
	close(j.done)
}

// completer waits for the entries in the order they were handed to raft
// and runs their acks in that order.
func (j *Journal) completer() {
	for p := range j.flight {
		err := p.f.Error()
		j.latency.Observe(time.Since(p.at).Seconds())
		if err == nil {
			if e, ok := p.f.Response().(error); ok {
				err = e
			}
		}
		if err != nil {
			err = j.fail(err)
		}
		for _, a := range p.acks {
			if a != nil {
				a.Durable(err)
			}
		}
	}
}

// fail refuses every later change: an entry that did not commit here may
// still commit under a new leader, or not, so nothing after it can be
// promised either.
func (j *Journal) fail(err error) error {
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrRaftShutdown) {
		err = fmt.Errorf("%w: %v", errNotLeader, err)
	}
	j.mu.Lock()
	if j.failed == nil {
		j.failed = err
	}
	j.mu.Unlock()
	return err
}
