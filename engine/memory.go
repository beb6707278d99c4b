package engine

import (
	"errors"
	"sort"
	"unsafe"
)

// ErrNoMemory: the job would take the memory held by jobs past the ceiling
// (--max-job-memory). The put is answered OUT_OF_MEMORY, as upstream answers
// it when malloc fails; nothing changed.
var ErrNoMemory = errors.New("the memory held by jobs is at its ceiling")

// Job memory (and, against the same ceiling, the other memory clients can
// make the server hold: MemKind).
//
// Every job is charged what it keeps alive on the heap: its body as the
// allocator rounds it (a 64 KiB body takes nine 8 KiB pages) plus
// JobOverhead. The charge is made when the put is accepted, before its
// binlog record is written, so puts still waiting for the log count too,
// and it is returned when the job is deleted (or its put fails in the log).
//
// The bytes are counted in the engine's sharded counters (counters.go):
// each loop adds to its own shard, so counting costs no shared cache line.
// With a ceiling, a put must also know the total, which means reading
// every shard. To keep that off the common path a shard takes a grant: when
// it sums the shards it also reserves a share of the room left (1/32 of it
// per shard, counted in cJobBytes at once), and spends the grant on its
// next puts without looking at the other shards. Near the ceiling the room,
// and so the grant, is small and every put sums the shards: the ceiling
// holds to within the puts of loops that sum at the same instant (one job
// each). Far from it, a shard sums once per 1/32 of the room it spends.
// A grant a shard does not spend keeps up to 1/32 of the room it was cut
// from unusable by the others: with the room small, that is little.

// JobOverhead is what a job costs besides its body: the Job struct (its
// size class), its slot in the id table (kept between a quarter and half
// full, so 2-4 pointers, 8 when it last shrank) and in a heap (a pointer,
// twice that after append's doubling), and with -b the binlog's pin for it
// (an entry of a map[uint64]pin). TestJobOverheadCoversTheHeap measures
// the heap a job takes without and with a binlog-like index and checks
// that this covers it.
var JobOverhead = int64(allocSize(int(unsafe.Sizeof(Job{}))) + 64 + 16 + 64)

// grantShare: a shard that sums the shards reserves 1/(grantShare × shards)
// of the room left as its grant.
const grantShare = 32

// jobCost is what a job with this body is charged. The body is immutable,
// so the cost at delete is the cost at put.
func jobCost(body []byte) int64 { return int64(allocSize(cap(body))) + JobOverhead }

// SetJobMemoryLimit sets the ceiling on the memory charged to jobs (0: no
// ceiling). It must be called before any client exists.
func (e *Engine) SetJobMemoryLimit(n int64) { e.memLimit = max(n, 0) }

// JobMemory reports the memory charged to jobs and the ceiling (0: none).
func (e *Engine) JobMemory() (used, limit int64) {
	return max(e.ctr.sum(cJobBytes)-e.ctr.sum(cJobGrant), 0), e.memLimit
}

// MemKind is what a charge against the ceiling is for. Jobs are charged by
// the engine itself (Put); tubes too (Use, Watch); the network layer
// charges the put bodies it is still receiving and the replies a client
// has not read yet (Charge, Uncharge). One ceiling bounds them all, so no
// client can make the server hold more than it by any of these means.
type MemKind int

const (
	MemJobs MemKind = iota
	MemTubes
	MemPartialBodies
	MemReplies
	NumMemKinds
)

var memCounters = [NumMemKinds]counter{cJobBytes, cTubeBytes, cPartialBytes, cReplyBytes}

// MemKindNames name the kinds for metrics.
var MemKindNames = [NumMemKinds]string{"jobs", "tubes", "partial_bodies", "replies"}

// Memory reports the bytes charged for one kind.
func (e *Engine) Memory(k MemKind) int64 {
	if k == MemJobs {
		used, _ := e.JobMemory()
		return used
	}
	return max(e.ctr.sum(memCounters[k]), 0)
}

// Charge counts n bytes of kind k against the ceiling on the caller's
// shard (its event loop's: the shard's grant is the loop's alone), or
// reports false, counting nothing, if they do not fit.
func (e *Engine) Charge(shard int, k MemKind, n int64) bool {
	return e.charge(shard, memCounters[k], n)
}

// ChargeAnyway counts n bytes of kind k that are already held, past the
// ceiling if need be (they exist: refusing to count them would hide them).
func (e *Engine) ChargeAnyway(shard int, k MemKind, n int64) {
	e.ctr.add(shard, memCounters[k], n)
}

// Uncharge returns n bytes of kind k, on any shard.
func (e *Engine) Uncharge(shard int, k MemKind, n int64) {
	e.ctr.add(shard, memCounters[k], -n)
}

// charge counts cost in counter k against the ceiling on shard's counters,
// or reports false (and counts nothing) if it does not fit. The grant is
// counted in cJobBytes until it is spent; spending it on another kind moves
// the bytes to that kind's counter.
func (e *Engine) charge(shard int, k counter, cost int64) bool {
	v := &e.ctr.shards[shard].v
	if e.memLimit <= 0 {
		v[k].Add(cost)
		return true
	}
	g := v[cJobGrant].Load()
	if g >= cost {
		v[cJobGrant].Store(g - cost) // already in cJobBytes
		if k != cJobBytes {
			v[cJobBytes].Add(-cost)
			v[k].Add(cost)
		}
		return true
	}
	// Give back what is left of the grant, then look at the total.
	v[cJobGrant].Store(0)
	v[cJobBytes].Add(-g)
	room := e.memLimit - e.ctr.sum(cJobBytes) - e.ctr.sum(cTubeBytes) - e.ctr.sum(cPartialBytes) - e.ctr.sum(cReplyBytes)
	if room < cost {
		return false
	}
	g = (room - cost) / int64(grantShare*len(e.ctr.shards))
	v[k].Add(cost)
	v[cJobBytes].Add(g)
	v[cJobGrant].Store(g)
	return true
}

// uncharge returns a job's cost, on whichever shard frees it.
func (e *Engine) uncharge(shard int, cost int64) { e.ctr.add(shard, cJobBytes, -cost) }

// tubeCost is what a tube with this name is charged: the Tube struct, its
// name twice (a string and a byte copy), its entry in the registry's map
// and list.
func tubeCost(name []byte) int64 {
	return int64(allocSize(int(unsafe.Sizeof(Tube{}))) + 2*allocSize(max(len(name), 1)) + 64)
}

// AllocSize is the memory the Go allocator takes for an object of n bytes
// without pointers (allocSize).
func AllocSize(n int) int { return allocSize(n) }

// allocSize is the memory the Go allocator takes for an object of n bytes
// without pointers: its size class up to 32 KiB, whole 8 KiB pages beyond.
func allocSize(n int) int {
	if n > maxSmallSize {
		return (n + pageSize - 1) &^ (pageSize - 1)
	}
	i := sort.Search(len(sizeClasses), func(i int) bool { return int(sizeClasses[i]) >= n })
	return int(sizeClasses[i])
}

const (
	maxSmallSize = 32768
	pageSize     = 8192
)

// sizeClasses are the Go runtime's small object sizes, as of Go 1.26
// (internal/runtime/gc/sizeclasses.go). Should a later runtime change them,
// the charge is a little off, no more.
var sizeClasses = [...]uint16{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224,
	240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408,
	1536, 1792, 2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192,
	9472, 9728, 10240, 10880, 12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264,
	28672, 32768}
