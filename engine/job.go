package engine

import (
	"math"
	"time"
)

// State is where a job is in its life.
type State uint8

const (
	Ready State = iota + 1
	Reserved
	Delayed
	Buried
	Deleted
)

var stateNames = [...]string{"invalid", "ready", "reserved", "delayed", "buried", "invalid"}

func (s State) String() string { return stateNames[s] }

// Job is one unit of work. Its tube never changes, so every mutable field is
// guarded by the tube's lock; the body is immutable once the job exists, so
// it can be written to a socket without holding any lock.
//
// Its fields are ordered to fill 128 bytes, a size class of Go's allocator,
// exactly (TestJobFillsItsSizeClass): a million queued jobs cost what C's
// do. Delay and TTR are whole seconds, as the protocol gives them.
type Job struct {
	// The first cache line holds what the heaps compare and write on every
	// sift (ID, Pri, deadline, heapIndex) and what a reply sends (Tube,
	// Body): a reserve sifts through ~log4(n) levels of jobs, and touching
	// one line of each instead of two is what keeps it fast at a million.
	ID        uint64
	Pri       uint32
	heapIndex int32 // position in the ready, delay or ttr heap (or its run: inRun); -1 when in none
	// deadline is monotonic ns: when a delayed job becomes ready, when a
	// reserved job's TTR runs out, or since when a ready job has been ready
	// (latency.go).
	deadline int64
	Tube     *Tube
	// Body includes the trailing CRLF, so a RESERVED/FOUND reply sends it as
	// one slice straight from here.
	Body []byte

	// owner is the client holding the job while reserved. prev/next link the
	// job into that client's reserved list, or into its tube's buried list:
	// the two states are exclusive, so the links are shared.
	owner      *Client
	prev, next *Job

	createdAt int64  // wall-clock ns: survives a restart, drives stats-job age
	buriedSeq uint64 // place in the tube's buried list, as logged

	delay uint32 // s, as last given by put or release
	ttr   uint32 // s

	reserves, timeouts, releases, buries, kicks uint32

	state  State
	inList bool // in owner's reserved list (guarded by owner.mu)
	inRun  bool // in its heap's run: heapIndex is its sequence number there
}

// seconds is a delay or TTR as a job keeps it: whole seconds (the protocol
// has nothing finer), at most 2^32-1 as on the wire.
func seconds(d time.Duration) uint32 { return uint32(min(max(d/time.Second, 0), math.MaxUint32)) }

// ttrNs is the job's time to run in ns.
func (j *Job) ttrNs() int64 { return int64(j.ttr) * second }

// State reports the job's state; callers must hold the tube lock or accept a
// racy answer.
func (j *Job) State() State { return j.state }

func urgent(pri uint32) bool { return pri < 1024 }

// unlinkFrom takes j out of the list, linked through prev and next, whose
// first job is *head: its tube's buried list or its owner's reserved list
// (a job is in at most one). tail points at the list's last job, or is nil
// for a list that keeps none (the reserved list: a Client stays small).
func (j *Job) unlinkFrom(head, tail **Job) {
	if j.prev != nil {
		j.prev.next = j.next
	} else {
		*head = j.next
	}
	if j.next != nil {
		j.next.prev = j.prev
	} else if tail != nil {
		*tail = j.prev
	}
	j.prev, j.next = nil, nil
}
