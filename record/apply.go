package record

import (
	"cmp"
	"slices"
	"time"
)

// Live is the set of live jobs that a sequence of records describes: what
// a restart recovers from the binlog and what a cluster node's state
// machine holds.
type Live struct {
	Jobs map[uint64]*Job
	// MaxID is the highest job id any applied record named, deleted jobs
	// included: the next id handed out must be above it.
	MaxID uint64
	// Orphans counts update records for jobs with no full record: normal
	// for a binlog whose full record's segment was reclaimed after a delete.
	Orphans int
}

// NewLive is an empty set.
func NewLive() *Live { return &Live{Jobs: make(map[uint64]*Job)} }

// Apply folds one decoded record into the set. A full record replaces the
// job with a new Job (it is either the put or a rewrite of the job as it
// then stood), so that a Job's ID, Tube, TTR, CreatedAt and Body never
// change once it exists and a holder of the pointer may read them while
// later records are applied (a cluster snapshot does);
// update records carry absolute values, so applying one twice gives the
// same job. tube returns the name to keep for a full record's tube (an
// interner shares one string per tube); body is kept as given, so a caller
// whose payload buffer is reused passes a copy. It returns the job a full
// record created or replaced, nil otherwise.
func (l *Live) Apply(r *Record, tube func([]byte) string) *Job {
	l.MaxID = max(l.MaxID, r.ID)
	if r.Kind == KindHighWater || r.Kind == KindPause {
		return nil // a pause names no job: the cluster's state keeps pauses
	}
	j := l.Jobs[r.ID]
	switch r.Kind {
	case KindFull:
		j = &Job{
			ID: r.ID, Tube: tube(r.Tube), Pri: r.Pri, State: r.State,
			Delay: time.Duration(r.Delay), TTR: time.Duration(r.TTR),
			CreatedAt: r.Created, Deadline: r.Deadline, BuriedSeq: r.BuriedSeq,
			Counters: r.Counters, Body: r.Body,
		}
		l.Jobs[r.ID] = j
		return j
	case KindDelete:
		delete(l.Jobs, r.ID)
		return nil
	}
	if j == nil {
		l.Orphans++
		return nil
	}
	switch r.Kind {
	case KindBury:
		j.State, j.Pri, j.BuriedSeq, j.Deadline = StateBuried, r.Pri, r.BuriedSeq, 0
	case KindKick:
		j.State, j.Deadline = StateReady, 0
	case KindRelease:
		j.Pri, j.Delay, j.State, j.Deadline = r.Pri, time.Duration(r.Delay), StateReady, 0
		if r.Delay > 0 {
			j.State, j.Deadline = StateDelayed, r.Deadline
		}
	}
	j.Counters = r.Counters
	return nil
}

// Sorted lists the live jobs in id order. Reserved jobs come back ready:
// a reservation does not outlive the server that granted it.
func (l *Live) Sorted() []*Job {
	out := make([]*Job, 0, len(l.Jobs))
	for _, j := range l.Jobs {
		if j.State == StateReserved {
			j.State = StateReady
		}
		out = append(out, j)
	}
	slices.SortFunc(out, func(a, b *Job) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
