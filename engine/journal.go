package engine

import (
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/beanpole/beanpole/record"
)

// Journal is the log behind the engine: one typed call per kind of change
// (the binlog and the cluster journal implement it; the engine's tests use a fake). Records are
// appended while the job's tube lock is held, so each job's records reach
// the log in the order its changes happened. A call that returns an error
// queued nothing and the engine changes nothing; otherwise ack is told,
// exactly once and in append order, when the record is as durable as the
// -f flags promise or that it never will be.
type Journal interface {
	Put(j *record.Job, ack record.Ack) error
	Delete(id uint64, ack record.Ack) error
	Release(id uint64, pri uint32, delay time.Duration, deadline int64, c record.Counters, ack record.Ack) error
	Bury(id uint64, pri uint32, buriedSeq uint64, c record.Counters, ack record.Ack) error
	Kick(id uint64, c record.Counters, ack record.Ack) error
	// Rewrite appends a fresh full record of a live job (compaction).
	Rewrite(j *record.Job) error
	// FileOf is the binlog file of a job's latest full record (stats-job).
	FileOf(id uint64) uint64
}

// PauseJournal is a Journal that also logs pauses: the cluster's, which
// replicates them so that a new leader keeps each tube's pause. The
// binlog does not log them, as upstream does not: a restart forgets
// pauses. Pause logs pause-tube (the tube is paused for delay, until the
// wall-clock Unix ns until; 0 and 0: unpaused) under the tube's lock; ack
// is as for Journal's calls, or nil when nobody waits for it (the pause of
// a tube that was freed ends with the tube).
type PauseJournal interface {
	Pause(p *record.Pause, ack record.Ack) error
}

// Errors a change can fail with when there is a binlog. Nothing changed.
var (
	// ErrNoRoom: the log has no room for the record (disk full). Puts,
	// releases, buries and kicks answer OUT_OF_MEMORY, as upstream.
	ErrNoRoom = errors.New("binlog has no room for the record")
	// ErrLogFailed: a write or fsync failed earlier, so no change can be
	// promised durable any more. Every change answers INTERNAL_ERROR.
	ErrLogFailed = errors.New("binlog failed: changes are refused")
)

// SetJournal makes every acknowledged change go through j. It must be
// called before any client exists.
func (e *Engine) SetJournal(j Journal) {
	e.jl = j
	e.pj, _ = j.(PauseJournal)
}

// journalState is a client's view of its own records in the log. seq
// numbers count the client's records from 1; acks arrive in that order.
type journalState struct {
	appended atomic.Uint64 // written by the client's loop only
	acked    atomic.Uint64 // written by the log's writer only
	// failedAt is the seq of the client's first record whose write or
	// fsync failed (0: none). It is set before acked passes it.
	failedAt atomic.Uint64
	// wakeAt: the writer wakes the loop when acked reaches it. The loop
	// sets it; the writer swaps it to noWake when it wakes, so one wake is
	// sent per request.
	wakeAt atomic.Uint64
	// lastPut is the seq of the client's latest put (PutsUnacked). It
	// belongs to the client's loop.
	lastPut uint64
}

const noWake = ^uint64(0)

// Durability reports the client's record counts: appended so far (by its
// own loop), acknowledged by the log, and the seq of the first that failed
// (0 if none). Replies that depend on records up to seq n may be sent once
// acked >= n; if failedAt != 0 and failedAt <= n they must not claim
// success.
func (c *Client) Durability() (appended, acked, failedAt uint64) {
	if c.journalState == nil {
		return 0, 0, 0
	}
	// failedAt is stored before acked: load acked first.
	acked = c.acked.Load()
	return c.appended.Load(), acked, c.failedAt.Load()
}

// PutsUnacked is the seq of the client's latest put if its log has not
// acknowledged it yet, else 0. A put's job is published only once its
// record is durable, so until then it is the one change of the client's
// own that nobody can see (every other change is made in memory as it is
// appended); its acknowledgement publishes the client's earlier puts too.
func (c *Client) PutsUnacked() uint64 {
	if c.journalState == nil || c.acked.Load() >= c.lastPut {
		return 0
	}
	return c.lastPut
}

// WakeWhenAcked asks for a Wake once the log has acknowledged the
// client's records up to seq. It reports false if they already are (then
// no wake may come: the caller goes on itself).
func (c *Client) WakeWhenAcked(seq uint64) bool {
	c.wakeAt.Store(seq)
	if c.acked.Load() >= seq {
		c.wakeAt.CompareAndSwap(seq, noWake)
		return false
	}
	return true
}

// logged finishes an append made on c's behalf: err is the log's answer.
func (c *Client) logged(err error) error {
	if err != nil {
		return c.e.refused(err)
	}
	c.appended.Add(1)
	return nil
}

// ack is c's ack for a record that is not a put.
func (c *Client) ack() record.Ack { return (*clientAck)(c) }

// refused maps a log error to what the engine reports.
func (e *Engine) refused(err error) error {
	if errors.Is(err, record.ErrNoSpace) {
		return ErrNoRoom
	}
	e.noteFailure(err)
	return ErrLogFailed
}

// noteFailure records the log's first failure.
func (e *Engine) noteFailure(err error) {
	msg := err.Error()
	e.logFailure.CompareAndSwap(nil, &msg)
}

// LogFailure is the first binlog failure seen, or "" while the log is
// healthy.
func (e *Engine) LogFailure() string {
	if p := e.logFailure.Load(); p != nil {
		return *p
	}
	return ""
}

// clientAck is a client's ack for records that only need counting.
type clientAck Client

func (a *clientAck) Durable(err error) { (*Client)(a).acknowledged(err) }

// acknowledged runs on the log's writer for each of c's records, in order.
func (c *Client) acknowledged(err error) {
	seq := c.acked.Load() + 1
	if err != nil {
		c.e.noteFailure(err)
		c.failedAt.CompareAndSwap(0, seq)
	}
	c.acked.Store(seq)
	if w := c.wakeAt.Load(); seq >= w && c.wakeAt.CompareAndSwap(w, noWake) {
		c.waker.Wake(c)
	}
}

// putAck is a new job's ack: the job is published (made visible to every
// client) once its record is durable, and dropped if it never will be.
type putAck Job

func (a *putAck) Durable(err error) {
	j := (*Job)(a)
	c := j.owner
	j.owner = nil
	if err != nil {
		c.e.unpublished(j, 0)
	} else {
		c.e.publish(j, 0, c.e.mono()) // the writer's counters share the timers' shard
	}
	c.acknowledged(err)
}

// wall converts the engine's monotonic time to wall-clock ns for the log:
// a restart cannot resume a monotonic clock.
func (e *Engine) wall(mono int64) int64 { return e.baseWall + mono }

// record is the full record of j as it stands. Caller holds j's tube lock.
func (e *Engine) record(j *Job) record.Job {
	r := record.Job{
		ID: j.ID, Tube: j.Tube.Name, Pri: j.Pri, State: record.State(j.state),
		Delay: time.Duration(j.delay) * time.Second, TTR: time.Duration(j.ttr) * time.Second, CreatedAt: j.createdAt,
		BuriedSeq: j.buriedSeq, Counters: j.counters(), Body: j.Body,
	}
	switch j.state {
	case Reserved:
		r.State = record.StateReady // a reservation does not outlive the process
	case Delayed:
		r.Deadline = e.wall(j.deadline)
	}
	return r
}

func (j *Job) counters() record.Counters {
	return record.Counters{Reserves: j.reserves, Timeouts: j.timeouts,
		Releases: j.releases, Buries: j.buries, Kicks: j.kicks}
}

// Rewrite is the log's compaction hook: it appends a fresh full record for
// each job that still exists, under the job's tube lock like every other
// record of that job.
func (e *Engine) Rewrite(ids []uint64) {
	for _, id := range ids {
		j := e.lockJob(id)
		if j == nil {
			continue
		}
		r := e.record(j)
		_ = e.jl.Rewrite(&r)
		j.Tube.mu.Unlock()
	}
}

// FileOf is the binlog file holding a job's latest full record (stats-job).
func (e *Engine) fileOf(id uint64) uint64 {
	if e.jl == nil {
		return 0
	}
	return e.jl.FileOf(id)
}

// Restore loads the jobs recovered from the binlog, before any client
// connects: ready jobs by (pri, id), delayed ones with what is left of
// their wall-clock deadline, buried ones in their logged order. Nothing is
// logged and total-jobs is not counted, as upstream.
func (e *Engine) Restore(jobs []*record.Job, maxID uint64) {
	now := e.mono()
	var buried []*Job
	for _, r := range jobs {
		e.reg.mu.Lock()
		t := e.reg.byName[r.Tube]
		if t == nil {
			t = newTube(e, []byte(r.Tube))
			e.ctr.add(0, cTubeBytes, tubeCost(t.nameBytes)) // past any ceiling: the jobs exist
			e.reg.add(t)
		}
		e.reg.mu.Unlock()
		j := &Job{ID: r.ID, Tube: t, Body: r.Body, Pri: r.Pri, heapIndex: -1,
			delay: seconds(r.Delay), ttr: seconds(r.TTR), createdAt: r.CreatedAt, buriedSeq: r.BuriedSeq,
			reserves: r.Reserves, timeouts: r.Timeouts, releases: r.Releases, buries: r.Buries, kicks: r.Kicks}
		e.jobs.Put(j)
		e.ctr.add(0, cJobBytes, jobCost(j.Body)) // past any ceiling: the jobs exist
		t.mu.Lock()
		t.jobs++
		switch r.State {
		case record.StateBuried:
			buried = append(buried, j)
		case record.StateDelayed:
			if left := r.Deadline - e.wall(now); left > 0 {
				j.deadline = now + left
				t.insert(j, Delayed, 0)
				break
			}
			t.insertReady(j, now, 0)
		default:
			t.insertReady(j, now, 0)
		}
		t.buriedSeq = max(t.buriedSeq, r.BuriedSeq)
		t.mu.Unlock()
	}
	slices.SortFunc(buried, func(a, b *Job) int {
		if a.buriedSeq != b.buriedSeq {
			if a.buriedSeq < b.buriedSeq {
				return -1
			}
			return 1
		}
		if a.ID < b.ID {
			return -1
		}
		return 1
	})
	for _, j := range buried {
		j.Tube.mu.Lock()
		j.Tube.insert(j, Buried, 0)
		j.Tube.mu.Unlock()
	}
	top := maxID
	for _, r := range jobs {
		top = max(top, r.ID)
	}
	if e.nextID.Load() < top {
		e.nextID.Store(top)
	}
}

// RestorePauses pauses the tubes the cluster's state holds pauses of,
// each for what is left of it on this node's wall clock; a pause whose
// end has passed is dropped. A paused tube that has no job is made (past
// any memory ceiling, as Restore's tubes): it lives until its pause ends
// or, as any tube, until the last client using or watching it lets go.
// Call it after Restore, before any client connects; nothing is logged.
func (e *Engine) RestorePauses(ps []record.Pause) {
	now := e.mono()
	for i := range ps {
		p := &ps[i]
		left := p.Until - e.wall(now)
		if left <= 0 || p.Delay <= 0 {
			continue
		}
		e.reg.mu.Lock()
		t := e.reg.byName[p.Tube]
		if t == nil {
			t = newTube(e, []byte(p.Tube))
			e.ctr.add(0, cTubeBytes, tubeCost(t.nameBytes))
			e.reg.add(t)
		}
		t.mu.Lock()
		e.reg.mu.Unlock()
		t.pauseDur = int64(p.Delay)
		t.pauseUntil = now + left
		t.schedule(t.pauseUntil)
		t.mu.Unlock()
	}
}
