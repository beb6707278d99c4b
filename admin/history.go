package admin

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/beanpole/beanpole/codec"
)

// History: the overview's charts plot the last hour, even on a page opened
// a moment ago, because the server keeps that hour itself. Every
// historyPeriod a sampler reads the figures a `stats` command reads (the
// engine's sharded counters and the event loops' command counts: no tube
// is scanned, no lock is held longer than a `stats` holds it) into a ring
// of historyLen samples, and /api/history answers the ring, oldest first.
//
// Memory is fixed: a sample is 11 eight-byte fields, 88 bytes, so the ring
// is 720 × 88 = 63,360 bytes, allocated once when the server starts. An
// answer to /api/history copies it into one array per figure (another
// 63,360 bytes) and encodes that (at most 162 kB of JSON, with every
// figure 20 digits long), both garbage once written.

const (
	historyPeriod = 5 * time.Second
	historyLen    = 720 // an hour at historyPeriod
)

// sample is the server's figures at one moment. The counters (Puts,
// Reserves, Deletes, Timeouts) are cumulative: the page plots their rates.
type sample struct {
	Time        int64 // Unix milliseconds
	Ready       uint64
	Reserved    uint64
	Delayed     uint64
	Buried      uint64
	Connections uint64
	Waiting     uint64
	Puts        uint64
	Reserves    uint64
	Deletes     uint64
	Timeouts    uint64
}

func sampleOf(now time.Time, st *codec.ServerStats) sample {
	return sample{Time: now.UnixMilli(),
		Ready: st.CurrentJobsReady, Reserved: st.CurrentJobsReserved,
		Delayed: st.CurrentJobsDelayed, Buried: st.CurrentJobsBuried,
		Connections: st.CurrentConnections, Waiting: st.CurrentWaiting,
		Puts: st.Cmd[codec.OpPut], Reserves: st.Cmd[codec.OpReserve] + st.Cmd[codec.OpReserveWithTimeout],
		Deletes: st.Cmd[codec.OpDelete], Timeouts: st.JobTimeouts}
}

// ring holds the latest len(buf) samples; once full, each new one
// replaces the oldest.
type ring struct {
	mu   sync.Mutex
	buf  []sample
	next int // where the next sample goes
	full bool
}

func newRing(n int) *ring { return &ring{buf: make([]sample, n)} }

func (r *ring) add(s sample) {
	r.mu.Lock()
	r.buf[r.next] = s
	r.next++
	if r.next == len(r.buf) {
		r.next, r.full = 0, true
	}
	r.mu.Unlock()
}

// appendTo appends the samples to dst, oldest first.
func (r *ring) appendTo(dst []sample) []sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.full {
		dst = append(dst, r.buf[r.next:]...)
	}
	return append(dst, r.buf[:r.next]...)
}

// sampleEvery adds a sample of src's figures to r now and every period
// until stop closes.
func sampleEvery(r *ring, period time.Duration, src Source, stop <-chan struct{}) {
	tk := time.NewTicker(period)
	defer tk.Stop()
	for {
		var st codec.ServerStats // fresh: ServerStats adds the loops' counts into it
		src.ServerStats(&st)
		r.add(sampleOf(time.Now(), &st))
		select {
		case <-stop:
			return
		case <-tk.C:
		}
	}
}

// historyJSON is /api/history: one array per figure, index i of each being
// sample i, oldest first.
type historyJSON struct {
	PeriodMs    int64    `json:"period_ms"`
	Time        []int64  `json:"time_ms"`
	Ready       []uint64 `json:"ready"`
	Reserved    []uint64 `json:"reserved"`
	Delayed     []uint64 `json:"delayed"`
	Buried      []uint64 `json:"buried"`
	Connections []uint64 `json:"connections"`
	Waiting     []uint64 `json:"waiting"`
	Puts        []uint64 `json:"cmd_put"`
	Reserves    []uint64 `json:"reserves"` // cmd-reserve + cmd-reserve-with-timeout
	Deletes     []uint64 `json:"cmd_delete"`
	Timeouts    []uint64 `json:"job_timeouts"`
}

func (d *dashboard) history(w http.ResponseWriter, _ *http.Request, _ *sources) {
	ss := d.s.hist.appendTo(make([]sample, 0, historyLen))
	n := len(ss)
	h := historyJSON{PeriodMs: historyPeriod.Milliseconds(), Time: make([]int64, n),
		Ready: make([]uint64, n), Reserved: make([]uint64, n), Delayed: make([]uint64, n),
		Buried: make([]uint64, n), Connections: make([]uint64, n), Waiting: make([]uint64, n),
		Puts: make([]uint64, n), Reserves: make([]uint64, n), Deletes: make([]uint64, n),
		Timeouts: make([]uint64, n)}
	for i, s := range ss {
		h.Time[i], h.Ready[i], h.Reserved[i], h.Delayed[i], h.Buried[i] = s.Time, s.Ready, s.Reserved, s.Delayed, s.Buried
		h.Connections[i], h.Waiting[i], h.Puts[i], h.Reserves[i] = s.Connections, s.Waiting, s.Puts, s.Reserves
		h.Deletes[i], h.Timeouts[i] = s.Deletes, s.Timeouts
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(&h)
}
