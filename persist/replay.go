package persist

import (
	"fmt"
	"sort"
	"time"

	"github.com/beanpole/beanpole/persist/internal/intern"
)

// replay folds records, in log order, into the set of live jobs.
type replay struct {
	jobs    map[uint64]*rjob
	maxID   uint64
	lastLSN uint64
	records int
	// orphans counts update records for jobs with no full record: normal
	// when the full record's segment was reclaimed after a delete.
	orphans int
	tubes   intern.Strings // tube names
}

// rjob is a live job and where its latest full record is.
type rjob struct {
	Job
	pinSeq   uint64
	pinBytes uint32
}

func newReplay() *replay {
	return &replay{jobs: make(map[uint64]*rjob), tubes: intern.Strings{}}
}

func (r *replay) apply(rec *record, seq, lsn uint64, frameLen int64) error {
	if rec.kind == kindFull && rec.id == 0 {
		return fmt.Errorf("%w: job id 0", ErrBadRecord)
	}
	r.maxID = max(r.maxID, rec.id)
	r.lastLSN = lsn
	r.records++
	if rec.kind == kindHighWater {
		return nil
	}
	j := r.jobs[rec.id]
	switch rec.kind {
	case kindFull:
		if j == nil {
			j = &rjob{}
			r.jobs[rec.id] = j
		}
		// A full record replaces everything: it is either the put or a
		// rewrite of the job as it was when compaction copied it.
		j.Job = Job{
			ID: rec.id, Tube: r.tubes.Of(rec.tube), Pri: rec.pri, State: rec.state,
			Delay: time.Duration(rec.delay), TTR: time.Duration(rec.ttr),
			CreatedAt: rec.created, Deadline: rec.deadline, BuriedSeq: rec.buriedSeq,
			Counters: rec.c, Body: append([]byte(nil), rec.body...),
		}
		j.pinSeq, j.pinBytes = seq, uint32(frameLen)
		return nil
	case kindDelete:
		delete(r.jobs, rec.id)
		return nil
	}
	if j == nil {
		r.orphans++
		return nil
	}
	switch rec.kind {
	case kindBury:
		j.State, j.Pri, j.BuriedSeq, j.Deadline = StateBuried, rec.pri, rec.buriedSeq, 0
	case kindKick:
		j.State, j.Deadline = StateReady, 0
	case kindRelease:
		j.Pri, j.Delay, j.State, j.Deadline = rec.pri, time.Duration(rec.delay), StateReady, 0
		if rec.delay > 0 {
			j.State, j.Deadline = StateDelayed, rec.deadline
		}
	}
	j.Counters = rec.c
	return nil
}

// result lists the live jobs in id order. Reserved jobs come back ready,
// as upstream: the reservation ended with the process.
func (r *replay) result() []*Job {
	out := make([]*Job, 0, len(r.jobs))
	for _, j := range r.jobs {
		if j.State == StateReserved {
			j.State = StateReady
		}
		out = append(out, &j.Job)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out
}
