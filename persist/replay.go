package persist

import (
	"fmt"

	"github.com/beanpole/beanpole/persist/internal/intern"
	"github.com/beanpole/beanpole/record"
)

// replay folds records, in log order, into the set of live jobs, and
// remembers where each live job's latest full record is.
type replay struct {
	live    *record.Live
	pins    map[uint64]pin
	lastLSN uint64
	records int
	tubes   intern.Strings // tube names
}

func newReplay() *replay {
	return &replay{live: record.NewLive(), pins: make(map[uint64]pin), tubes: intern.Strings{}}
}

func (r *replay) apply(rec *record.Record, seq, lsn uint64, frameLen int64) error {
	if rec.Kind == record.KindFull && rec.ID == 0 {
		return fmt.Errorf("%w: job id 0", ErrBadRecord)
	}
	if rec.Kind == record.KindPause {
		// Pauses are the cluster's: a binlog never holds one.
		return fmt.Errorf("%w: a pause record, which no binlog holds", ErrBadRecord)
	}
	r.lastLSN = lsn
	r.records++
	if rec.Kind == record.KindFull {
		rec.Body = append([]byte(nil), rec.Body...) // the scan buffer is reused
	}
	if r.live.Apply(rec, r.tubes.Of) != nil {
		r.pins[rec.ID] = pin{seq: seq, bytes: uint32(frameLen)}
	} else if rec.Kind == record.KindDelete {
		delete(r.pins, rec.ID)
	}
	return nil
}
