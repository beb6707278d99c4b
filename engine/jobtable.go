package engine

import (
	"math/bits"
	"sync"
)

// jobTable maps ids to jobs. It is sharded by id so that loops putting and
// deleting different jobs never take the same lock: consecutive ids land in
// consecutive shards, each on its own cache line.
type jobTable struct {
	shards [tableShards]tableShard
}

const tableShards = 256

type tableShard struct {
	mu sync.Mutex
	idIndex
	_ [16]byte // keep neighbouring shards' locks off this cache line
}

func newJobTable() *jobTable { return &jobTable{} }

func (t *jobTable) shard(id uint64) *tableShard { return &t.shards[id%tableShards] }

func (t *jobTable) Get(id uint64) *Job {
	s := t.shard(id)
	s.mu.Lock()
	j := s.get(id)
	s.mu.Unlock()
	return j
}

func (t *jobTable) Put(j *Job) {
	s := t.shard(j.ID)
	s.mu.Lock()
	s.put(j)
	s.mu.Unlock()
}

func (t *jobTable) Delete(id uint64) {
	s := t.shard(id)
	s.mu.Lock()
	s.delete(id)
	s.mu.Unlock()
}

// idIndex is one shard's open-addressing table of jobs by id, with linear
// probing and backward-shift deletion (no tombstones).
//
// Why not a Go map: the put path measured a quarter of its time in map
// probes and growth. Ids here are integers from one counter, and a slot is
// just the job pointer (the key is the job's own ID). home keeps runs of
// idGroup consecutive ids (of the shard) in adjacent slots, one cache line,
// and spreads the runs over the table with a Fibonacci (multiplicative)
// hash, one multiply: a queue's puts and deletes, which come in id order,
// then miss the cache once every idGroup jobs rather than at every job (a
// deep queue's index is megabytes), while probe runs stay short. An
// identity hash would keep every live id in adjacent slots, but then they
// form one long run and every backward-shift delete walks all of it.
type idIndex struct {
	slots []*Job // the job's ID is the key; nil is empty
	n     int
	shift uint8 // 64 - log2(len(slots))
}

const minIndexSlots = 8

// idGroup is how many consecutive ids of a shard share a cache line of
// slots (a power of two); idGroupBits is its log2.
const (
	idGroup     = 8
	idGroupBits = 3
)

// home is id's first slot: its group of idGroup slots, picked by the hash
// of the id's run (id / idGroup), and its place in the group.
func (x *idIndex) home(id uint64) int {
	k := id / tableShards
	g := ((k >> idGroupBits) * 0x9E3779B97F4A7C15) >> (x.shift + idGroupBits)
	return int(g<<idGroupBits | k&(idGroup-1))
}

func (x *idIndex) get(id uint64) *Job {
	if x.n == 0 {
		return nil
	}
	mask := len(x.slots) - 1
	for i := x.home(id); ; i = (i + 1) & mask {
		j := x.slots[i]
		if j == nil || j.ID == id {
			return j
		}
	}
}

// put adds j; its id must not be in the table.
func (x *idIndex) put(j *Job) {
	if 2*(x.n+1) > len(x.slots) {
		x.resize(max(minIndexSlots, 2*len(x.slots)))
	}
	x.insert(j)
	x.n++
}

func (x *idIndex) insert(j *Job) {
	mask := len(x.slots) - 1
	i := x.home(j.ID)
	for x.slots[i] != nil {
		i = (i + 1) & mask
	}
	x.slots[i] = j
}

func (x *idIndex) delete(id uint64) {
	if x.n == 0 {
		return
	}
	mask := len(x.slots) - 1
	i := x.home(id)
	for {
		j := x.slots[i]
		if j == nil {
			return // not here
		}
		if j.ID == id {
			break
		}
		i = (i + 1) & mask
	}
	// Backward shift: pull later entries of the probe run into the hole
	// unless their home lies cyclically after the hole, up to where they sit.
	for k := (i + 1) & mask; x.slots[k] != nil; k = (k + 1) & mask {
		h := x.home(x.slots[k].ID)
		if (i <= k && (h <= i || h > k)) || (i > k && h <= i && h > k) {
			x.slots[i] = x.slots[k]
			i = k
		}
	}
	x.slots[i] = nil
	x.n--
	// Give memory back after a burst, as the heaps do.
	if len(x.slots) > 1024 && 8*x.n < len(x.slots) {
		x.resize(len(x.slots) / 4)
	}
}

func (x *idIndex) resize(size int) {
	old := x.slots
	x.slots = make([]*Job, size)
	x.shift = uint8(64 - bits.TrailingZeros(uint(size)))
	for _, j := range old {
		if j != nil {
			x.insert(j)
		}
	}
}
