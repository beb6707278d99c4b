package engine

import "sync/atomic"

// Global counters are kept in shards, one per event loop plus one (0) for
// timer callbacks and the acceptors (Accepted), each on its own cache
// lines. A command only ever adds to its own loop's shard, so no cache
// line is written by every command; `stats` sums the shards.
type counter int

const (
	cJobsUrgent counter = iota
	cJobsReady
	cJobsReserved
	cJobsDelayed
	cJobsBuried
	cJobTimeouts
	cTotalJobs
	cConnections
	cTotalConnections
	cProducers
	cWorkers
	cWaiting
	// cJobBytes is the memory charged to jobs (memory.go): bodies plus a
	// fixed overhead each, and, with a ceiling, the grant of the shard
	// not yet spent. cJobGrant is that unspent grant; only the shard's own
	// loop changes it.
	cJobBytes
	cJobGrant
	// The other memory charged to the same ceiling (memory.go, MemKind):
	// tubes, put bodies still arriving, replies a client has not read.
	cTubeBytes
	cPartialBytes
	cReplyBytes
	numCounters
)

type counterShard struct {
	v [numCounters]atomic.Int64
	_ [64]byte
}

type counters struct{ shards []counterShard }

func (c *counters) add(shard int, k counter, d int64) { c.shards[shard].v[k].Add(d) }

func (c *counters) sum(k counter) int64 {
	var s int64
	for i := range c.shards {
		s += c.shards[i].v[k].Load()
	}
	return s
}

// stateCounter maps a job state to its global gauge.
func stateCounter(s State) counter {
	switch s {
	case Ready:
		return cJobsReady
	case Reserved:
		return cJobsReserved
	case Delayed:
		return cJobsDelayed
	case Buried:
		return cJobsBuried
	}
	return numCounters
}
