package engine

import (
	"slices"
	"time"

	"github.com/beanpole/beanpole/persist"
)

// Journal is the binlog as the engine sees it (persist.Log implements it).
// Records are appended while the job's tube lock is held, so each job's
// records reach the log in the order its changes happened; done runs once
// the record is as durable as the -f flags promise.
type Journal interface {
	Append(rec []byte, done func(error)) error
	FileOf(id uint64) uint64
}

// SetJournal makes every acknowledged change go through j. It must be
// called before any client exists.
func (e *Engine) SetJournal(j Journal) { e.jl = j }

// wall converts the engine's monotonic time to wall-clock ns for the log:
// a restart cannot resume a monotonic clock.
func (e *Engine) wall(mono int64) int64 { return e.baseWall + mono }

// record is the full record of j as it stands. Caller holds j's tube lock.
func (e *Engine) record(j *Job) persist.Job {
	r := persist.Job{
		ID: j.ID, Tube: j.Tube.Name, Pri: j.Pri, State: persist.State(j.state),
		Delay: time.Duration(j.delay), TTR: time.Duration(j.ttr), CreatedAt: j.createdAt,
		BuriedSeq: j.buriedSeq, Counters: j.counters(), Body: j.Body,
	}
	switch j.state {
	case Reserved:
		r.State = persist.StateReady // a reservation does not outlive the process
	case Delayed:
		r.Deadline = e.wall(j.deadline)
	}
	return r
}

func (j *Job) counters() persist.Counters {
	return persist.Counters{Reserves: j.reserves, Timeouts: j.timeouts,
		Releases: j.releases, Buries: j.buries, Kicks: j.kicks}
}

// journal appends rec on behalf of c: c's replies wait until it is durable
// (see HoldIfUndurable). Without a binlog it does nothing.
func (c *Client) journal(rec []byte) error {
	if c.e.jl == nil {
		return nil
	}
	c.pending.Add(1)
	if err := c.e.jl.Append(rec, c.durable); err != nil {
		c.pending.Add(-1)
		c.e.logErr.Store(err)
		return err
	}
	return nil
}

// onDurable runs on the log's writer goroutine.
func (c *Client) onDurable(err error) {
	if err != nil {
		c.e.logErr.Store(err)
	}
	if c.pending.Add(-1) == 0 && c.holding.Load() {
		c.waker.Wake(c)
	}
}

// HoldIfUndurable is called by the loop before it sends a batch of replies:
// true means some of them acknowledge records not yet durable, so they must
// wait; the Waker is called when they may go (then ReleaseHold is true).
func (c *Client) HoldIfUndurable() bool {
	if c.journalState == nil || c.pending.Load() == 0 {
		return false
	}
	c.holding.Store(true)
	// The last record may have become durable before holding was set, in
	// which case nobody will wake us: take the hold back ourselves.
	if c.pending.Load() == 0 && c.holding.CompareAndSwap(true, false) {
		return false
	}
	return true
}

// ReleaseHold reports whether held replies may now be sent.
func (c *Client) ReleaseHold() bool {
	return c.journalState == nil || c.pending.Load() == 0 && c.holding.CompareAndSwap(true, false)
}

// Rewrite is the log's compaction hook: it appends a fresh full record for
// each job that still exists, under the job's tube lock like every other
// record of that job.
func (e *Engine) Rewrite(ids []uint64) {
	var buf []byte
	for _, id := range ids {
		j := e.lockJob(id)
		if j == nil {
			continue
		}
		r := e.record(j)
		buf = persist.AppendFull(buf[:0], &r)
		_ = e.jl.Append(buf, nil)
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

// LogError is the last binlog error seen, if any.
func (e *Engine) LogError() error {
	if v := e.logErr.Load(); v != nil {
		return v.(error)
	}
	return nil
}

// Restore loads the jobs recovered from the binlog, before any client
// connects: ready jobs by (pri, id), delayed ones with what is left of
// their wall-clock deadline, buried ones in their logged order. Nothing is
// logged and total-jobs is not counted, as upstream.
func (e *Engine) Restore(rec *persist.Recovered) {
	now := e.mono()
	var buried []*Job
	for _, r := range rec.Jobs {
		e.reg.mu.Lock()
		t := e.reg.byName[r.Tube]
		if t == nil {
			t = newTube(e, []byte(r.Tube))
			e.reg.add(t)
		}
		e.reg.mu.Unlock()
		j := &Job{ID: r.ID, Tube: t, Body: r.Body, Pri: r.Pri, heapIndex: -1,
			delay: int64(r.Delay), ttr: int64(r.TTR), createdAt: r.CreatedAt, buriedSeq: r.BuriedSeq,
			reserves: r.Reserves, timeouts: r.Timeouts, releases: r.Releases, buries: r.Buries, kicks: r.Kicks}
		e.jobs.Put(j)
		t.mu.Lock()
		t.jobs++
		switch r.State {
		case persist.StateBuried:
			buried = append(buried, j)
		case persist.StateDelayed:
			if left := r.Deadline - e.wall(now); left > 0 {
				j.deadline = now + left
				t.insert(j, Delayed, 0)
				break
			}
			t.insert(j, Ready, 0)
		default:
			t.insert(j, Ready, 0)
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
	top := rec.MaxID
	if n := len(rec.Jobs); n > 0 {
		top = max(top, rec.Jobs[n-1].ID)
	}
	if e.nextID.Load() < top {
		e.nextID.Store(top)
	}
}
