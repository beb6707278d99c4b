package engine

import (
	"math/bits"
	"sync"
)

// jobTable maps ids to jobs. It is sharded by id, in runs of idGroup
// consecutive ids: a run's jobs share a shard and a cache line of its slots
// (idIndex.home), so a queue's puts and deletes, which come in id order,
// find the lock and the slots they need in the cache for all but the first
// job of a run, and a delete's backward shift reads jobs that the reserves
// before it have just read (BenchmarkPipelinedDrainOfDeepTube: a quarter
// less a job than with consecutive ids in consecutive shards). The runs
// land in consecutive shards, each on its own cache line, so loops working
// on jobs of different runs never take the same lock; two loops putting at
// the same time get ids of one run now and then, and then take turns at
// its shard's lock, held for a slot's write.
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

func (t *jobTable) shard(id uint64) *tableShard { return &t.shards[id/idGroup%tableShards] }

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
// just the job pointer (the key is the job's own ID). home keeps each run
// of idGroup consecutive ids in adjacent slots, one cache line, and spreads
// the runs over the table with a Fibonacci (multiplicative) hash, one
// multiply, so probe runs stay short: a queue's puts and deletes then miss
// the cache once a run rather than at every job (a deep queue's index is
// megabytes). An identity hash would keep every live id in adjacent slots,
// but then they form one long run and every backward-shift delete walks
// all of it.
type idIndex struct {
	slots []*Job // the job's ID is the key; nil is empty
	n     int
	shift uint8 // 64 - log2(len(slots))
}

const minIndexSlots = 8

// idGroup is how many consecutive ids share a shard and a cache line of
// its slots (a power of two); idGroupBits is its log2.
const (
	idGroup     = 8
	idGroupBits = 3
)

// home is id's first slot: its group of idGroup slots, picked by the hash
// of the id's run among the shard's runs, and its place in the run.
func (x *idIndex) home(id uint64) int {
	k := id/(idGroup*tableShards)*idGroup | id%idGroup // the shard's runs, end to end
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
