package engine

// jobHeap is a binary min-heap of jobs with each job's index stored in the
// job itself, so removal of an arbitrary job is O(log n) (as in beanstalkd's
// heap.c). A job is in at most one heap at a time: ready, delay or ttr.
type jobHeap struct {
	items []*Job
	less  func(a, b *Job) bool
}

func byPriority(a, b *Job) bool {
	if a.Pri != b.Pri {
		return a.Pri < b.Pri
	}
	return a.ID < b.ID
}

func byDeadline(a, b *Job) bool {
	if a.deadline != b.deadline {
		return a.deadline < b.deadline
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
	j.heapIndex = int32(len(h.items))
	h.items = append(h.items, j)
	h.up(len(h.items) - 1)
}

func (h *jobHeap) Pop() *Job {
	if len(h.items) == 0 {
		return nil
	}
	j := h.items[0]
	h.Remove(j)
	return j
}

// Remove takes j out of the heap; j must be in it.
func (h *jobHeap) Remove(j *Job) {
	i := int(j.heapIndex)
	last := len(h.items) - 1
	if i != last {
		h.swap(i, last)
	}
	h.items[last] = nil
	h.items = h.items[:last]
	j.heapIndex = -1
	if i != last {
		if !h.down(i) {
			h.up(i)
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
	if !h.down(i) {
		h.up(i)
	}
}

func (h *jobHeap) swap(i, k int) {
	h.items[i], h.items[k] = h.items[k], h.items[i]
	h.items[i].heapIndex = int32(i)
	h.items[k].heapIndex = int32(k)
}

func (h *jobHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(h.items[i], h.items[p]) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *jobHeap) down(i int) bool {
	start, n := i, len(h.items)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h.less(h.items[r], h.items[l]) {
			m = r
		}
		if !h.less(h.items[m], h.items[i]) {
			break
		}
		h.swap(i, m)
		i = m
	}
	return i > start
}
