package engine

// jobHeap is a 4-ary min-heap of jobs with each job's index stored in the
// job itself, so removal of an arbitrary job is O(log n) (as in beanstalkd's
// heap.c). A job is in at most one heap at a time: ready, delay or ttr.
//
// Four children a node rather than two: half the levels for a sift-down
// (the work of every reserve), and the children of a node sit side by side
// in memory. Sifting moves a hole rather than swapping, so each level
// writes one slot and one index. The order is a field, not a function
// value, so comparisons inline.
type jobHeap struct {
	items      []*Job
	byDeadline bool // (deadline, id) for the delay and ttr heaps; else (pri, id)
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

func (h *jobHeap) Len() int { return len(h.items) }

func (h *jobHeap) Top() *Job {
	if len(h.items) == 0 {
		return nil
	}
	return h.items[0]
}

func (h *jobHeap) Push(j *Job) {
	h.items = append(h.items, j)
	h.up(len(h.items)-1, j)
}

// Remove takes j out of the heap; j must be in it.
func (h *jobHeap) Remove(j *Job) {
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
	i := int(j.heapIndex)
	if !h.down(i, j) {
		h.up(i, j)
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
