package engine

import (
	"runtime"
	"slices"
	"time"

	"github.com/beanpole/beanpole/record"
)

// JobView is what the dashboard shows of a job: stats-job's figures and
// the start of the body.
type JobView struct {
	ID       uint64
	Tube     string
	State    State
	Pri      uint32
	Age      time.Duration
	TimeLeft time.Duration // reserved and delayed jobs
	Delay    time.Duration
	TTR      time.Duration
	Counters record.Counters
	Size     int    // body length, CRLF excluded
	Head     []byte // the first bytes of the body (a copy), at most the limit asked for
}

// MaxBrowse bounds how deep a listing may go (skip + limit): walking a heap
// in order costs O(k log k) under the tube's lock, and each step is a
// cache miss in a big heap, so k stays small. In a tube of a million
// ready jobs, 1,000 deep takes about 0.2 to 0.9 ms; 100,000 deep would
// take 130 to 170 ms, long enough for a few browsers to starve the tube's
// producers and workers.
const MaxBrowse = 1_000

// view fills a JobView. Caller holds j's tube lock.
func (e *Engine) view(j *Job, now int64, head int) JobView {
	body := j.Body[:len(j.Body)-2]
	v := JobView{ID: j.ID, Tube: j.Tube.Name, State: j.state, Pri: j.Pri,
		Age:   time.Duration(e.age(j, now)),
		Delay: time.Duration(j.delay) * time.Second, TTR: time.Duration(j.ttrNs()),
		Counters: j.counters(),
		Size:     len(body), Head: slices.Clone(body[:min(len(body), head)])}
	if j.state == Reserved || j.state == Delayed {
		v.TimeLeft = time.Duration(max(j.deadline-now, 0))
	}
	return v
}

// Job is a view of job id, with at most head bytes of its body.
func (e *Engine) Job(id uint64, head int) (JobView, bool) {
	j := e.lockJob(id)
	if j == nil {
		return JobView{}, false
	}
	v := e.view(j, e.mono(), head)
	j.Tube.mu.Unlock()
	return v, true
}

// Browse lists the jobs of the named tube in state s (Ready, Delayed or
// Buried) in the order the protocol serves them: ready by priority then
// id, delayed soonest first, buried oldest first. It skips the first skip
// and returns at most limit, each with at most head bytes of body; total
// is how many jobs are in that state. skip+limit is capped at MaxBrowse.
// ok is false when the tube does not exist.
func (e *Engine) Browse(tube string, s State, skip, limit, head int) (jobs []JobView, total int, ok bool) {
	t := e.reg.lookup([]byte(tube))
	if t == nil {
		return nil, 0, false
	}
	skip = min(max(skip, 0), MaxBrowse)
	limit = min(max(limit, 0), MaxBrowse-skip)
	t.mu.Lock()
	defer t.mu.Unlock()
	now := e.mono()
	total = int(t.count[s])
	add := func(j *Job) bool {
		if skip > 0 {
			skip--
		} else {
			jobs = append(jobs, e.view(j, now, head))
		}
		return len(jobs) < limit
	}
	if limit == 0 {
		return nil, total, true
	}
	switch s {
	case Ready:
		t.ready.walk(add)
	case Delayed:
		t.delay.walk(add)
	case Buried:
		for j := t.buried.head; j != nil && add(j); j = j.next {
		}
	}
	return jobs, total, true
}

// walk calls f on the heap's jobs in order until f returns false. It keeps
// a frontier of slots (a small heap of its own) and merges the run in: k
// jobs cost O(k log k), whatever the heap's size.
func (h *jobHeap) walk(f func(*Job) bool) {
	run := h.run.buf[h.run.head:]
	var frontier []int32
	if len(h.items) > 0 {
		frontier = append(frontier, 0)
	}
	less := func(a, b int32) bool { return h.less(h.items[a], h.items[b]) }
	for {
		for len(run) > 0 && run[0] == nil {
			run = run[1:]
		}
		if len(run) > 0 && (len(frontier) == 0 || h.less(run[0], h.items[frontier[0]])) {
			if !f(run[0]) {
				return
			}
			run = run[1:]
			continue
		}
		if len(frontier) == 0 {
			return
		}
		i := frontier[0]
		// Pop the least slot of the frontier.
		last := len(frontier) - 1
		frontier[0] = frontier[last]
		frontier = frontier[:last]
		siftDown(frontier, 0, less)
		if !f(h.items[i]) {
			return
		}
		for c := heapArity*int(i) + 1; c < min(heapArity*int(i)+1+heapArity, len(h.items)); c++ {
			frontier = append(frontier, int32(c))
			siftUp(frontier, len(frontier)-1, less)
		}
	}
}

func siftUp(h []int32, i int, less func(a, b int32) bool) {
	for i > 0 {
		p := (i - 1) / 2
		if !less(h[i], h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func siftDown(h []int32, i int, less func(a, b int32) bool) {
	for {
		m := i
		for _, c := range [2]int{2*i + 1, 2*i + 2} {
			if c < len(h) && less(h[c], h[m]) {
				m = c
			}
		}
		if m == i {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// OldestReady is the age of the tube's oldest ready job (by creation
// time); 0 with none. It reads every ready job, lockChunk jobs per hold of
// the tube's lock, from the heap's last slot toward its root. Between two
// chunks the heap moves: jobs moving toward the root (as a reserve's sift
// moves them) are still ahead of the walk, but a job pushed down past it
// (by a job made ready, or by the one that fills a deleted job's slot)
// goes unread, and the age is then the oldest the walk did read, a
// younger one. A tube of a million ready jobs takes 10 to 40 ms in all.
func (e *Engine) OldestReady(tube []byte) (time.Duration, bool) {
	t := e.reg.lookup(tube)
	if t == nil {
		return 0, false
	}
	oldest := int64(0)
	t.mu.Lock()
	for i := t.ready.slots() - 1; ; {
		for stop := max(i-lockChunk, -1); i > stop; i-- {
			if j := t.ready.at(i); j != nil && (oldest == 0 || j.createdAt < oldest) {
				oldest = j.createdAt
			}
		}
		if i < 0 {
			break
		}
		t.mu.Unlock()
		runtime.Gosched()
		t.mu.Lock()
		i = min(i, t.ready.slots()-1)
	}
	now := e.mono()
	t.mu.Unlock()
	if oldest == 0 {
		return 0, true
	}
	return time.Duration(max(e.wall(now)-oldest, 0)), true
}
