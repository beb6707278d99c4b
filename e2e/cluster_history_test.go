package e2e

// The cluster's histories, checked by porcupine, one job at a time. The
// randomized fault test records every put, reserve and delete it sends
// (with the times it sent them and read their answers) and every
// connection a worker lost; porcupine then looks, for each job, for an
// order of its operations, each placed between its call and its answer,
// that the sequential model below accepts.
//
// A job's state is a set of the states it may be in (a bit each), since
// some answers never come: Absent, Ready, Deleted, or Reserved by worker
// w. A put the server answered moves Absent to Ready; one it did not
// answer (the connection died, or a deposed leader answered
// INTERNAL_ERROR, which a new leader may still commit) may or may not
// have. A reserve takes a Ready job for its worker. A worker's lost
// connection may hand its jobs back (Reserved(w) to Ready): the server
// dropped the connection at some moment between the worker's last answer
// on it and the worker seeing it gone. DELETED needs the job reserved by
// that worker; NOT_FOUND needs it absent, deleted or another's. So a job
// held by two workers at once, a delete undone or a job that appears
// twice has no order the model accepts.

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

type jobOpKind int

const (
	opPut jobOpKind = iota
	opReserve
	opDelete
	opLost // a worker's connection was lost while it held job id
)

type jobInput struct {
	kind   jobOpKind
	worker int
	id     uint64 // 0 for a put whose answer never came (matched by body)
	body   string
}

// Outcomes.
const (
	outOK       = "ok"
	outNotFound = "not found"
	outUnknown  = "unknown" // no answer: it may or may not have taken effect
)

const (
	stAbsent uint64 = 1 << iota
	stReady
	stDeleted
	stReservedBase // stReservedBase << w: reserved by worker w
)

func reservedBy(w int) uint64 { return stReservedBase << w }

const stReservedAny = ^(stAbsent | stReady | stDeleted)

var jobModel = porcupine.Model{
	// One partition a job. A worker holds at most one job at a time (it
	// reserves, then deletes), so a lost connection is recorded for the
	// job it held on it, if any.
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byID := map[uint64][]porcupine.Operation{}
		for _, op := range h {
			id := op.Input.(jobInput).id
			byID[id] = append(byID[id], op)
		}
		out := make([][]porcupine.Operation, 0, len(byID))
		for _, ops := range byID {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return stAbsent },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(uint64), input.(jobInput), output.(string)
		var next uint64
		switch in.kind {
		case opPut:
			if s&stAbsent != 0 {
				next = stReady
			}
			if out == outUnknown {
				next |= s
			}
		case opReserve:
			if s&stReady != 0 {
				next = reservedBy(in.worker)
			}
		case opDelete:
			switch out {
			case outOK:
				if s&reservedBy(in.worker) != 0 {
					next = stDeleted
				}
			case outNotFound:
				next = s & (stAbsent | stDeleted | stReservedAny&^reservedBy(in.worker))
			default:
				next = s
				if s&reservedBy(in.worker) != 0 {
					next |= stDeleted
				}
			}
		case opLost:
			next = s
			if s&reservedBy(in.worker) != 0 {
				next |= stReady
			}
		}
		return next != 0, next
	},
	DescribeOperation: func(input, output any) string {
		in := input.(jobInput)
		name := [...]string{"put", "reserve", "delete", "lost connection"}[in.kind]
		return fmt.Sprintf("worker %d: %s %d %q → %v", in.worker, name, in.id, in.body, output)
	},
}

// jobHistory records the operations of one randomized run.
type jobHistory struct {
	mu  sync.Mutex
	t0  time.Time
	ops []porcupine.Operation
}

func newJobHistory() *jobHistory { return &jobHistory{t0: time.Now()} }

func (h *jobHistory) now() int64 { return int64(time.Since(h.t0)) }

// add records an operation called at call and answered now (or never,
// for an outcome that is unknown).
func (h *jobHistory) add(in jobInput, call int64, out string) {
	ret := h.now()
	if out == outUnknown {
		ret = math.MaxInt64
	}
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: in.worker, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
}

// check matches the puts whose answer never came to the ids their bodies
// were reserved under, leaves out those never seen, and has porcupine
// check each job's operations.
func (h *jobHistory) check(idOfBody map[string]uint64) (porcupine.CheckResult, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ops := make([]porcupine.Operation, 0, len(h.ops))
	for _, op := range h.ops {
		in := op.Input.(jobInput)
		if in.kind == opPut && in.id == 0 {
			id, seen := idOfBody[in.body]
			if !seen {
				continue
			}
			in.id = id
			op.Input = in
		}
		ops = append(ops, op)
	}
	return porcupine.CheckOperationsTimeout(jobModel, ops, time.Minute), len(ops)
}

func TestJobModelRefusesAJobHeldByTwoWorkers(t *testing.T) {
	t.Parallel()
	op := func(in jobInput, call, ret int64, out string) porcupine.Operation {
		return porcupine.Operation{ClientId: in.worker, Input: in, Call: call, Output: out, Return: ret}
	}
	put := op(jobInput{kind: opPut, worker: 10, id: 1, body: "x"}, 0, 1, outOK)
	r0 := op(jobInput{kind: opReserve, worker: 0, id: 1}, 2, 3, outOK)
	r1 := op(jobInput{kind: opReserve, worker: 1, id: 1}, 6, 7, outOK)
	d0 := op(jobInput{kind: opDelete, worker: 0, id: 1}, 8, 9, outOK)
	lost0 := op(jobInput{kind: opLost, worker: 0, id: 1}, 3, 5, outOK)
	for _, c := range []struct {
		name string
		ops  []porcupine.Operation
		ok   bool
	}{
		{"reserved by two workers", []porcupine.Operation{put, r0, r1}, false},
		{"handed back when its worker's connection was lost", []porcupine.Operation{put, r0, lost0, r1}, true},
		{"deleted by a worker that no longer held it", []porcupine.Operation{put, r0, lost0, r1, d0}, false},
		{"reserved after its delete", []porcupine.Operation{put, r0, d0, op(jobInput{kind: opReserve, worker: 1, id: 1}, 10, 11, outOK)}, false},
		{"a put never answered, reserved later", []porcupine.Operation{op(jobInput{kind: opPut, worker: 10, id: 1, body: "x"}, 0, math.MaxInt64, outUnknown), r0}, true},
	} {
		if got := porcupine.CheckOperations(jobModel, c.ops); got != c.ok {
			t.Errorf("%s: linearizable %v, want %v", c.name, got, c.ok)
		}
	}
}
