package engine

// waitNode is one client's place in one tube's waiter queue. A client owns
// one node per watched tube and reuses them across waits; every field but c
// and t is guarded by the lock of the tube t.
type waitNode struct {
	c          *Client
	t          *Tube
	gen        uint64 // the wait this node was queued for
	prev, next *waitNode
	linked     bool
}

// waitQueue is an intrusive FIFO of waitNodes: O(1) append, pop and removal.
type waitQueue struct {
	head, tail *waitNode
	n          int64
}

func (q *waitQueue) pushBack(n *waitNode) {
	n.prev, n.next = q.tail, nil
	if q.tail != nil {
		q.tail.next = n
	} else {
		q.head = n
	}
	q.tail = n
	n.linked = true
	q.n++
}

func (q *waitQueue) remove(n *waitNode) {
	if !n.linked {
		return
	}
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		q.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		q.tail = n.prev
	}
	n.prev, n.next, n.linked = nil, nil, false
	q.n--
}

func (q *waitQueue) popFront() *waitNode {
	n := q.head
	if n != nil {
		q.remove(n)
	}
	return n
}
