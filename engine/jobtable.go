package engine

import "sync"

// jobTable maps ids to jobs. It is sharded by id so that loops putting and
// deleting different jobs never take the same lock: consecutive ids land in
// consecutive shards, each on its own cache line.
type jobTable struct {
	shards [tableShards]tableShard
}

const tableShards = 256

type tableShard struct {
	mu sync.Mutex
	m  map[uint64]*Job
	_  [40]byte // keep neighbouring shards' locks off this cache line
}

func newJobTable() *jobTable {
	t := &jobTable{}
	for i := range t.shards {
		t.shards[i].m = make(map[uint64]*Job)
	}
	return t
}

func (t *jobTable) shard(id uint64) *tableShard { return &t.shards[id%tableShards] }

func (t *jobTable) Get(id uint64) *Job {
	s := t.shard(id)
	s.mu.Lock()
	j := s.m[id]
	s.mu.Unlock()
	return j
}

func (t *jobTable) Put(j *Job) {
	s := t.shard(j.ID)
	s.mu.Lock()
	s.m[j.ID] = j
	s.mu.Unlock()
}

func (t *jobTable) Delete(id uint64) {
	s := t.shard(id)
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}
