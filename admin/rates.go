package admin

import (
	"context"
	"sync"
	"time"
)

// Per-tube rates: the overview's puts/s and deletes/s of each tube it
// lists, shown from the page's first paint (the server's HTML and every
// /api/overview answer carry them), not from the page's second refresh.
//
// A rate needs two readings of the tube's counters. The dashboard keeps
// the last two overviews' readings (of the tubes they listed, at most
// overviewTubes each), taken at least rateGap apart, and rates each
// overview against the newest that is at least rateGap and at most
// rateMaxAge old: an open page's refresh 2 s ago, another viewer's. With
// none (the first page opened for a while), the overview reads the tubes,
// waits rateGap and reads them again: that page takes a second longer.
// Nothing is read while no one looks.

const (
	rateGap    = time.Second
	rateMaxAge = 30 * time.Second
)

// tubeReading is the put and delete counts of the tubes an overview
// listed, at one moment.
type tubeReading struct {
	at     time.Time
	counts map[string][2]uint64 // total-jobs, cmd-delete
}

type tubeRates struct {
	mu   sync.Mutex
	kept [2]*tubeReading // the newest last
}

// baseline is the newest reading kept that is between rateGap and
// rateMaxAge older than now, or nil.
func (r *tubeRates) baseline(now time.Time) *tubeReading {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.kept) - 1; i >= 0; i-- {
		if k := r.kept[i]; k != nil {
			if age := now.Sub(k.at); age >= rateGap && age <= rateMaxAge {
				return k
			}
		}
	}
	return nil
}

// readingOf is rows' counts, read at at.
func readingOf(at time.Time, rows []tubeRow) *tubeReading {
	k := &tubeReading{at: at, counts: make(map[string][2]uint64, len(rows))}
	for i := range rows {
		k.counts[rows[i].Name] = [2]uint64{rows[i].TotalJobs, rows[i].CmdDelete}
	}
	return k
}

// keep keeps k, unless the newest kept is less than rateGap older:
// readings kept are at least rateGap apart, so that a baseline is found
// however often the overview is asked for.
func (r *tubeRates) keep(k *tubeReading) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := r.kept[1]; n != nil && k.at.Sub(n.at) < rateGap {
		return
	}
	r.kept[0], r.kept[1] = r.kept[1], k
}

// fillRates sets each row's rates against base (read at base.at; the rows at
// at). A tube base did not list, or whose counts went down (deleted and
// made again), has none.
func fillRates(rows []tubeRow, at time.Time, base *tubeReading) {
	secs := at.Sub(base.at).Seconds()
	for i := range rows {
		c, ok := base.counts[rows[i].Name]
		if !ok || rows[i].TotalJobs < c[0] || rows[i].CmdDelete < c[1] {
			continue
		}
		put, del := float64(rows[i].TotalJobs-c[0])/secs, float64(rows[i].CmdDelete-c[1])/secs
		rows[i].PutRate, rows[i].DeleteRate = &put, &del
	}
}

// rated is an overview with its tubes' rates and oldest ready jobs: read,
// rated against a baseline kept or, with none, against a reading rateGap
// before (false if ctx ends during that wait).
func (d *dashboard) rated(ctx context.Context, src *sources) (overviewData, bool) {
	now := time.Now()
	o := d.snapshot(src, overviewTubes, now)
	base := d.rates.baseline(now)
	if base == nil {
		base = readingOf(now, o.Tubes)
		d.rates.keep(base)
		select {
		case <-ctx.Done():
			return o, false
		case <-time.After(rateGap):
		}
		now = time.Now()
		o = d.snapshot(src, overviewTubes, now)
	}
	fillRates(o.Tubes, now, base)
	o.RatesSince = base.at.UnixMilli()
	d.addOldest(o.Tubes, now)
	d.rates.keep(readingOf(now, o.Tubes))
	return o, true
}
