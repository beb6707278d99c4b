package engine

// jobHeap is the ordered set of a tube's ready, delayed or reserved jobs:
// a 4-ary min-heap with each job's index stored in the job itself, so
// removal of an arbitrary job is O(log n) (as in beanstalkd's heap.c),
// beside a run, a FIFO of jobs pushed in order. A job is in at most one
// jobHeap at a time: ready, delay or ttr.
//
// Four children a node rather than two: half the levels for a sift-down
// (the work of every reserve), and the children of a node sit side by side
// in memory. Sifting moves a hole rather than swapping, so each level
// writes one slot and one index. The order is a field, not a function
// value, so comparisons inline.
//
// The run is the common case: jobs put at one priority are ready in id
// order, reserved jobs of one TTR time out in reserve order, so each comes
// after every job of the run and is appended to it, and the next one
// reserved is its first. Both are O(1) and touch no other job, where a
// heap of half a million jobs sifts through ten levels of jobs, most of
// them not in the cache, on every reserve. A job that would not come last
// in the run (a released job, another priority) goes to the heap; Top is
// the lesser of the two firsts.
type jobHeap struct {
	items      []*Job
	run        jobRun
	byDeadline bool // (deadline, id) for the delay and ttr heaps; else (pri, id)
}

// jobRun is a heap's FIFO of jobs in order, live in buf[head:]. A job
// removed from its middle leaves a nil behind (a job's place is its
// sequence number, base for buf[0], kept in its heapIndex, so no other job
// moves). Removed jobs at either end are trimmed at once, so the first and
// last entries are live, and the run is compacted when the removed
// outnumber the live.
type jobRun struct {
	buf  []*Job
	head int
	base uint32 // the sequence number of buf[0]; they wrap
	live int
}

const heapArity = 4

// less is the heap's order; ids break ties, so it is total.
func (h *jobHeap) less(a, b *Job) bool {
	if h.byDeadline {
		if a.deadline != b.deadline {
			return a.deadline < b.deadline
		}
	} else if a.Pri != b.Pri {
		return a.Pri < b.Pri
	}
	return a.ID < b.ID
}

func (h *jobHeap) Len() int { return len(h.items) + h.run.live }

func (h *jobHeap) Top() *Job {
	var top *Job
	if len(h.items) > 0 {
		top = h.items[0]
	}
	if r := &h.run; r.live > 0 {
		if first := r.buf[r.head]; top == nil || h.less(first, top) {
			top = first
		}
	}
	return top
}

func (h *jobHeap) Push(j *Job) {
	if r := &h.run; r.live == 0 || h.less(r.buf[len(r.buf)-1], j) {
		r.push(j)
		return
	}
	h.items = append(h.items, j)
	h.up(len(h.items)-1, j)
}

// Remove takes j out of the heap; j must be in it.
func (h *jobHeap) Remove(j *Job) {
	if j.inRun {
		h.run.remove(j)
		return
	}
	i := int(j.heapIndex)
	last := len(h.items) - 1
	moved := h.items[last]
	h.items[last] = nil
	h.items = h.items[:last]
	j.heapIndex = -1
	if i != last {
		// The last job fills j's place, then finds its own.
		if !h.down(i, moved) {
			h.up(i, moved)
		}
	}
	// Give memory back after a burst: a heap that once held a million jobs
	// should not pin that array forever.
	if cap(h.items) > 1024 && len(h.items) < cap(h.items)/4 {
		h.items = append([]*Job(nil), h.items...)
	}
}

// Fix restores order after j's key changed.
func (h *jobHeap) Fix(j *Job) {
	if j.inRun {
		h.run.remove(j)
		h.Push(j)
		return
	}
	i := int(j.heapIndex)
	if !h.down(i, j) {
		h.up(i, j)
	}
}

// slots is how many places at reads: the heap's slots, then the run's.
func (h *jobHeap) slots() int { return len(h.items) + len(h.run.buf) - h.run.head }

// at is the job in place i (0 <= i < slots()), or nil where the run has a
// removed job's place. Removals and the run's trims move jobs only toward
// lower places; a push to the heap moves the run's one place up.
func (h *jobHeap) at(i int) *Job {
	if i < len(h.items) {
		return h.items[i]
	}
	return h.run.buf[h.run.head+i-len(h.items)]
}

// push appends j, which orders after every job in the run.
func (r *jobRun) push(j *Job) {
	if r.live == 0 {
		r.buf, r.head = r.buf[:0], 0
	} else if len(r.buf) == cap(r.buf) && 2*r.head >= len(r.buf) {
		// Slide the run to the front rather than grow the array: a
		// queue that keeps its length keeps its memory.
		n := copy(r.buf, r.buf[r.head:])
		clear(r.buf[n:])
		r.buf, r.base, r.head = r.buf[:n], r.base+uint32(r.head), 0
	}
	j.heapIndex, j.inRun = int32(r.base+uint32(len(r.buf))), true
	r.buf = append(r.buf, j)
	r.live++
}

// remove takes j, which is in the run, out of it.
func (r *jobRun) remove(j *Job) {
	r.buf[uint32(j.heapIndex)-r.base] = nil
	j.heapIndex, j.inRun = -1, false
	r.live--
	for r.head < len(r.buf) && r.buf[r.head] == nil {
		r.head++
	}
	n := len(r.buf)
	for n > r.head && r.buf[n-1] == nil {
		n--
	}
	r.buf = r.buf[:n]
	switch removed := n - r.head - r.live; {
	case r.live == 0:
		r.buf, r.head = r.buf[:0], 0
		if cap(r.buf) > 1024 {
			r.buf = nil
		}
	case removed > r.live && removed >= 64:
		// Compact: as many removals as there are live jobs paid for it.
		w := 0
		for _, k := range r.buf[r.head:] {
			if k != nil {
				r.buf[w] = k
				k.heapIndex = int32(r.base + uint32(w))
				w++
			}
		}
		clear(r.buf[w:])
		r.buf, r.head = r.buf[:w], 0
	}
	// Give memory back after a burst, as the heap does.
	if cap(r.buf) > 1024 && len(r.buf)-r.head < cap(r.buf)/4 {
		r.buf = append([]*Job(nil), r.buf[r.head:]...)
		r.base += uint32(r.head)
		r.head = 0
	}
}

// up places j, whose slot is i (a hole), at or above i.
func (h *jobHeap) up(i int, j *Job) {
	for i > 0 {
		p := (i - 1) / heapArity
		pj := h.items[p]
		if !h.less(j, pj) {
			break
		}
		h.items[i] = pj
		pj.heapIndex = int32(i)
		i = p
	}
	h.items[i] = j
	j.heapIndex = int32(i)
}

// down places j, whose slot is i (a hole), at or below i, and reports
// whether it moved.
func (h *jobHeap) down(i int, j *Job) bool {
	start, n := i, len(h.items)
	for {
		c := heapArity*i + 1
		if c >= n {
			break
		}
		m, mj := c, h.items[c]
		for k := c + 1; k < min(c+heapArity, n); k++ {
			if kj := h.items[k]; h.less(kj, mj) {
				m, mj = k, kj
			}
		}
		if !h.less(mj, j) {
			break
		}
		h.items[i] = mj
		mj.heapIndex = int32(i)
		i = m
	}
	h.items[i] = j
	j.heapIndex = int32(i)
	return i > start
}
