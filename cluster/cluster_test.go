package cluster

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/beanpole/beanpole/record"
)

// group is n in-process nodes on raft's in-memory transport.
type group struct {
	t     testing.TB
	nodes []*Node
	trans []*raft.InmemTransport
}

func newGroup(t *testing.T, n int) *group {
	return newGroupOver(t, n, 0, func(_ int, tr *raft.InmemTransport) raft.Transport { return tr })
}

// newGroupOver is newGroup with each node's transport wrapped by over, and
// a heartbeat timeout of hb (0: the default).
func newGroupOver(t *testing.T, n int, hb time.Duration, over func(i int, tr *raft.InmemTransport) raft.Transport) *group {
	g := &group{t: t}
	var members []Member
	addrs := make([]raft.ServerAddress, n)
	for i := range n {
		addrs[i], g.trans = raft.NewInmemAddr(), append(g.trans, nil)
		_, g.trans[i] = raft.NewInmemTransport(addrs[i])
		members = append(members, Member{ID: fmt.Sprintf("n%d", i+1), Raft: string(addrs[i])})
	}
	for i := range n {
		for k := range n {
			if i != k {
				g.trans[i].Connect(addrs[k], g.trans[k])
			}
		}
	}
	for i := range n {
		nd, err := Open(Config{ID: members[i].ID, Dir: t.TempDir(), Bootstrap: members, Transport: over(i, g.trans[i]),
			HeartbeatTimeout: hb, ElectionTimeout: hb, Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		g.nodes = append(g.nodes, nd)
	}
	t.Cleanup(func() {
		for _, nd := range g.nodes {
			if nd != nil {
				nd.Close()
			}
		}
	})
	return g
}

// leader waits for a node (other than the excluded ones) to lead and
// returns it with its journal.
func (g *group) leader(excluded ...*Node) (*Node, *Journal) {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		for _, nd := range g.nodes {
			if nd == nil || slicesContains(excluded, nd) || nd.Raft.State() != raft.Leader {
				continue
			}
			j, err := nd.AwaitLeadership(ctx)
			if err == nil {
				return nd, j
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	g.t.Fatal("no leader within 30 s")
	return nil, nil
}

// replicates checks that the group's leader gets a put acknowledged and
// that every node then holds it.
func (g *group) replicates() {
	g.t.Helper()
	leader, jl := g.leader()
	a := newAcks(1)
	if err := jl.Put(job(1), a.ack(0)); err != nil {
		g.t.Fatal(err)
	}
	a.wait(g.t)
	if jobs, _ := g.converged(leader); len(jobs) != 1 {
		g.t.Fatalf("%d jobs on every node, want 1", len(jobs))
	}
}

func slicesContains(s []*Node, n *Node) bool {
	for _, x := range s {
		if x == n {
			return true
		}
	}
	return false
}

// acks collects acknowledgements: the journal's contract is exactly once
// each, in append order.
type acks struct {
	mu   sync.Mutex
	got  []int
	errs []error
	all  chan struct{}
	want int
}

func newAcks(want int) *acks { return &acks{all: make(chan struct{}), want: want} }

func (a *acks) ack(i int) record.Ack {
	return record.AckFunc(func(err error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.got = append(a.got, i)
		a.errs = append(a.errs, err)
		if len(a.got) == a.want {
			close(a.all)
		}
	})
}

func (a *acks) wait(t testing.TB) {
	t.Helper()
	select {
	case <-a.all:
	case <-time.After(30 * time.Second):
		t.Fatalf("%d of %d acks after 30 s", len(a.got), a.want)
	}
	for i, g := range a.got {
		if g != i {
			t.Fatalf("ack %d arrived in place %d: acks must run in append order", g, i)
		}
		if a.errs[i] != nil {
			t.Fatalf("ack %d: %v", g, a.errs[i])
		}
	}
}

func job(id uint64) *record.Job {
	return &record.Job{ID: id, Tube: fmt.Sprintf("t%d", id%3), Pri: uint32(id), State: record.StateReady,
		TTR: time.Minute, CreatedAt: int64(id) * 1e9, Body: []byte(fmt.Sprintf("body %d\r\n", id))}
}

// converged waits until every live node has applied the leader's index and
// returns their states, which must be equal.
func (g *group) converged(leader *Node) ([]*record.Job, uint64) {
	g.t.Helper()
	want := leader.Raft.AppliedIndex()
	deadline := time.Now().Add(30 * time.Second)
	var jobs []*record.Job
	var maxID uint64
	for _, nd := range g.nodes {
		if nd == nil {
			continue
		}
		for nd.FSM.appliedIndex() < want {
			if time.Now().After(deadline) {
				g.t.Fatalf("a node applied %d of %d entries after 30 s", nd.FSM.appliedIndex(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
		js, m := nd.FSM.State()
		if jobs == nil {
			jobs, maxID = js, m
			continue
		}
		if !reflect.DeepEqual(js, jobs) || m != maxID {
			g.t.Fatalf("nodes disagree: %d jobs (max id %d) against %d (max id %d)", len(js), m, len(jobs), maxID)
		}
	}
	return jobs, maxID
}

func TestAcknowledgedChangesAreOnEveryNodeInOrder(t *testing.T) {
	g := newGroup(t, 3)
	leader, jl := g.leader()
	const n = 300
	a := newAcks(n + n/3 + n/3)
	k := 0
	for id := uint64(1); id <= n; id++ {
		if err := jl.Put(job(id), a.ack(k)); err != nil {
			t.Fatal(err)
		}
		k++
	}
	for id := uint64(3); id <= n; id += 3 {
		if err := jl.Delete(id, a.ack(k)); err != nil {
			t.Fatal(err)
		}
		k++
		if err := jl.Bury(id-1, 7, id, record.Counters{Buries: 1}, a.ack(k)); err != nil {
			t.Fatal(err)
		}
		k++
	}
	a.wait(t)
	jobs, maxID := g.converged(leader)
	if len(jobs) != n-n/3 || maxID != n {
		t.Fatalf("%d jobs, max id %d; want %d and %d", len(jobs), maxID, n-n/3, n)
	}
	for _, j := range jobs {
		if j.ID%3 == 0 {
			t.Fatalf("job %d was deleted and is back", j.ID)
		}
		want := job(j.ID)
		if j.ID%3 == 2 {
			want.State, want.Pri, want.BuriedSeq, want.Buries = record.StateBuried, 7, j.ID+1, 1
		}
		if !reflect.DeepEqual(j, want) {
			t.Fatalf("job %d is %+v, want %+v", j.ID, j, want)
		}
	}
}

func TestNewLeaderHasEveryAcknowledgedJob(t *testing.T) {
	g := newGroup(t, 3)
	old, jl := g.leader()
	const n = 100
	a := newAcks(n)
	for id := uint64(1); id <= n; id++ {
		if err := jl.Put(job(id), a.ack(int(id-1))); err != nil {
			t.Fatal(err)
		}
	}
	a.wait(t)
	for i, nd := range g.nodes {
		if nd == old {
			nd.Close()
			g.nodes[i] = nil
		}
	}
	// The deposed leader's journal refuses changes: it can promise nothing.
	if err := jl.Put(job(n+1), nil); err == nil {
		// A put queued before the journal saw the loss must then fail in its ack.
		done := make(chan error, 1)
		_ = jl.Delete(n+1, record.AckFunc(func(err error) { done <- err }))
		if err := <-done; err == nil {
			t.Fatal("a change was acknowledged by a leader that was shut down")
		}
	}
	nl, jl2 := g.leader()
	jobs, maxID := nl.FSM.State()
	if len(jobs) != n || maxID < n {
		t.Fatalf("the new leader has %d jobs and max id %d, want %d and at least %d", len(jobs), maxID, n, n)
	}
	a2 := newAcks(1)
	if err := jl2.Put(job(maxID+1), a2.ack(0)); err != nil {
		t.Fatal(err)
	}
	a2.wait(t)
	g.converged(nl)
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct {
	bytes.Buffer
	cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { return nil }

func TestSnapshotRestoresTheSameState(t *testing.T) {
	f := NewFSM()
	var entry []byte
	entry = append(entry, entryRecords)
	for id := uint64(1); id <= 50; id++ {
		entry = appendFramed(entry, record.AppendFull(nil, job(id)))
	}
	entry = appendFramed(entry, record.AppendDelete(nil, 10))
	entry = appendFramed(entry, record.AppendRelease(nil, 11, 3, 5*time.Second, 99e9, record.Counters{Reserves: 1, Releases: 1}))
	entry = appendFramed(entry, record.AppendDelete(nil, 77)) // an id above every live one
	if resp := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: entry}); resp != nil {
		t.Fatal(resp)
	}
	g := restoreFrom(t, f)
	wantJobs, wantMax := f.State()
	gotJobs, gotMax := g.State()
	if !reflect.DeepEqual(gotJobs, wantJobs) || gotMax != wantMax || wantMax != 77 || len(gotJobs) != 49 {
		t.Fatalf("restored %d jobs, max id %d; had %d, max id %d", len(gotJobs), gotMax, len(wantJobs), wantMax)
	}
}

func TestMalformedEntryIsRefusedWhole(t *testing.T) {
	good := record.AppendFull(nil, job(1))
	bad := func(edit func(j *record.Job)) []byte {
		j := job(2)
		edit(j)
		return record.AppendFull(nil, j)
	}
	for name, tail := range map[string][]byte{
		"a frame that overruns the entry":             {9, 0, 0, 0, 1},
		"a body without its CRLF":                     appendFramed(nil, bad(func(j *record.Job) { j.Body = []byte("body 2") })),
		"a body whose CRLF is cut short":              appendFramed(nil, bad(func(j *record.Job) { j.Body = []byte("\n") })),
		"id 0":                                        appendFramed(nil, bad(func(j *record.Job) { j.ID = 0 })),
		"the largest id":                              appendFramed(nil, record.AppendDelete(nil, math.MaxUint64)),
		"a tube name the protocol refuses":            appendFramed(nil, bad(func(j *record.Job) { j.Tube = "-dash" })),
		"a negative TTR":                              appendFramed(nil, bad(func(j *record.Job) { j.TTR = -time.Second })),
		"a pause of a tube name the protocol refuses": appendFramed(nil, pauseRec("-dash", time.Second, 1)),
		"a negative pause":                            appendFramed(nil, pauseRec("t", -time.Second, 1)),
		"a pause with no end":                         appendFramed(nil, pauseRec("t", time.Second, 0)),
		"an unpause with an end":                      appendFramed(nil, pauseRec("t", 0, 5)),
		"a pause longer than 2^32-1 s":                appendFramed(nil, pauseRec("t", maxPause+time.Second, 1)),
	} {
		f := NewFSM()
		m := newMetrics()
		f.m = m
		entry := append(appendFramed([]byte{entryRecords}, good), tail...)
		if resp := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: entry}); resp == nil {
			t.Fatalf("%s: the entry was applied without an error", name)
		}
		if jobs, maxID := f.State(); len(jobs) != 0 || maxID != 0 || len(f.Pauses()) != 0 {
			t.Fatalf("%s: %d jobs, max id %d, %d pauses: no record of a refused entry may be applied", name, len(jobs), maxID, len(f.Pauses()))
		}
		if m.refused.Load() != 1 {
			t.Fatalf("%s: %d entries counted as refused, want 1", name, m.refused.Load())
		}
	}
	for name, data := range map[string][]byte{
		"an unknown type":               {9, 1, 2},
		"an announcement with no id":    append([]byte{entryLeader}, "\x00127.0.0.1:1"...),
		"an announcement not HOST:PORT": append([]byte{entryLeader}, "n1\x00nowhere"...),
	} {
		f := NewFSM()
		if resp := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: data}); resp == nil {
			t.Fatalf("%s: the entry was applied without an error", name)
		}
		if id, _, _ := f.Leader(); id != "" {
			t.Fatalf("%s: the leader became %q", name, id)
		}
	}
}

// A snapshot is checked as entries are: one that holds a job no engine
// could have written, or a leader announcement that is not HOST:PORT, is
// refused, and the state it would have replaced stays.
func TestMalformedSnapshotIsRefusedWhole(t *testing.T) {
	forge := func(j *record.Job, leader string) []byte {
		var b []byte
		b = append(b, snapMagic1...)
		b = binary.LittleEndian.AppendUint64(b, 9)
		b = binary.LittleEndian.AppendUint64(b, 1)
		full := record.AppendFull(nil, j)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(full)))
		b = append(b, full...)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(leader)))
		return append(b, leader...)
	}
	bad := func(edit func(j *record.Job)) []byte {
		j := job(9)
		edit(j)
		return forge(j, "n1\x00127.0.0.1:11300")
	}
	for name, snap := range map[string][]byte{
		"id 0":                             bad(func(j *record.Job) { j.ID = 0 }),
		"the largest id":                   bad(func(j *record.Job) { j.ID = math.MaxUint64 }),
		"a tube name the protocol refuses": bad(func(j *record.Job) { j.Tube = "-dash" }),
		"a body without its CRLF":          bad(func(j *record.Job) { j.Body = []byte("body 9") }),
		"a negative TTR":                   bad(func(j *record.Job) { j.TTR = -time.Second }),
		"a leader not HOST:PORT":           forge(job(9), "n1\x00nowhere"),
		"a leader with no id":              forge(job(9), "\x00127.0.0.1:11300"),
	} {
		f := NewFSM()
		entry := appendFramed([]byte{entryRecords}, record.AppendFull(nil, job(1)))
		if resp := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: entry}); resp != nil {
			t.Fatal(resp)
		}
		var sink memSink
		sink.Write(snap)
		if err := f.Restore(io.NopCloser(&sink)); err == nil {
			t.Fatalf("%s: the snapshot was restored without an error", name)
		}
		if jobs, maxID := f.State(); len(jobs) != 1 || jobs[0].ID != 1 || maxID != 1 {
			t.Fatalf("%s: %d jobs, max id %d after a refused snapshot; want job 1 alone", name, len(jobs), maxID)
		}
	}
	// The same snapshot with a job an engine writes restores.
	f := NewFSM()
	var sink memSink
	sink.Write(forge(job(9), "n1\x00127.0.0.1:11300"))
	if err := f.Restore(io.NopCloser(&sink)); err != nil {
		t.Fatal(err)
	}
}

func TestSeedReplicatesABinlogsJobsAndItsHighestID(t *testing.T) {
	// A seed fails if the leader loses the lead while it commits (as it
	// should); with the default 500 ms heartbeat timeout a loaded machine
	// deposed it in the middle of these 3 MB. A longer one keeps the lead.
	g := newGroupOver(t, 3, 2*time.Second, func(_ int, tr *raft.InmemTransport) raft.Transport { return tr })
	leader, jl := g.leader()
	var jobs []*record.Job
	for id := uint64(1); id <= 2000; id += 2 {
		j := job(id)
		j.Body = append(bytes.Repeat([]byte{byte(id)}, 3000), "\r\n"...) // several entries
		jobs = append(jobs, j)
	}
	if err := leader.Seed(jobs, 5000); err != nil {
		t.Fatal(err)
	}
	got, maxID := g.converged(leader)
	if len(got) != len(jobs) || maxID != 5000 {
		t.Fatalf("%d jobs and max id %d after the seed, want %d and 5000", len(got), maxID, len(jobs))
	}
	for i, j := range got {
		if !reflect.DeepEqual(j, jobs[i]) {
			t.Fatalf("job %d is %+v after the seed", jobs[i].ID, j)
		}
	}
	if err := leader.Seed(jobs, 5000); err == nil {
		t.Fatal("a second seed of a group that holds jobs was not refused")
	}
	_ = jl
}

func TestLeaderHoldsEachBodyOnce(t *testing.T) {
	g := newGroup(t, 3)
	leader, jl := g.leader()
	j := job(1)
	a := newAcks(1)
	if err := jl.Put(j, a.ack(0)); err != nil {
		t.Fatal(err)
	}
	a.wait(t)
	leader.FSM.mu.Lock()
	held := leader.FSM.live.Jobs[1].Body
	leader.FSM.mu.Unlock()
	if unsafe.SliceData(held) != unsafe.SliceData(j.Body) {
		t.Fatal("the leader's state holds a copy of the body the engine put, not the engine's own")
	}
	for _, nd := range g.nodes {
		if nd == leader {
			continue
		}
		g.converged(leader)
		nd.FSM.mu.Lock()
		b := nd.FSM.live.Jobs[1].Body
		nd.FSM.mu.Unlock()
		if string(b) != string(j.Body) || unsafe.SliceData(b) == unsafe.SliceData(j.Body) {
			t.Fatal("a follower's body is not its own copy of the put's")
		}
	}
}

// partition cuts node i off from every other node of the group, both ways;
// heal restores every link.
func (g *group) partition(i int) {
	for k, tr := range g.trans {
		if k != i {
			tr.Disconnect(g.trans[i].LocalAddr())
			g.trans[i].Disconnect(tr.LocalAddr())
		}
	}
}

func (g *group) heal() {
	for i := range g.trans {
		for k := range g.trans {
			if i != k {
				g.trans[i].Connect(g.trans[k].LocalAddr(), g.trans[k])
			}
		}
	}
}

func TestPartitionedLeaderAcknowledgesNothingAndTheMajorityKeepsEveryJob(t *testing.T) {
	g := newGroup(t, 3)
	old, jl := g.leader()
	a := newAcks(1)
	if err := jl.Put(job(1), a.ack(0)); err != nil {
		t.Fatal(err)
	}
	a.wait(t)
	oi := slices.Index(g.nodes, old)
	g.partition(oi)

	// Cut off, the old leader cannot commit: a change it takes is never
	// acknowledged as durable.
	done := make(chan error, 1)
	if err := jl.Put(job(2), record.AckFunc(func(err error) { done <- err })); err == nil {
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("a leader cut off from the majority acknowledged a put")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the cut-off leader neither failed nor acknowledged the put in 30 s")
		}
	}
	nl, jl2 := g.leader(old)
	if jobs, _ := nl.FSM.State(); len(jobs) != 1 || jobs[0].ID != 1 {
		t.Fatalf("the majority's new leader has %d jobs, want job 1 only", len(jobs))
	}
	a2 := newAcks(1)
	if err := jl2.Put(job(3), a2.ack(0)); err != nil {
		t.Fatal(err)
	}
	a2.wait(t)

	// Healed, the old leader follows and catches up: job 2 never existed.
	g.heal()
	jobs, _ := g.converged(nl)
	if len(jobs) != 2 || jobs[0].ID != 1 || jobs[1].ID != 3 {
		t.Fatalf("after the heal every node has %d jobs, want jobs 1 and 3", len(jobs))
	}
}

// discardSink is a snapshot sink that keeps nothing, so that what a
// snapshot allocates is the snapshot's own doing.
type discardSink struct{}

func (discardSink) Write(p []byte) (int, error) { return len(p), nil }
func (discardSink) ID() string                  { return "discard" }
func (discardSink) Cancel() error               { return nil }
func (discardSink) Close() error                { return nil }

// A snapshot copies each job's fixed fields, not its body, and streams
// through one buffer: everything it allocates, added to the memory the
// live jobs hold, stays within 1.5 times the latter, for small bodies
// (64 bytes, where the fixed fields weigh most) as for larger ones. The
// sum bounds the peak whenever the collector runs.
func TestSnapshotMemoryIsAtMostHalfTheLiveJobsMore(t *testing.T) {
	for _, size := range []int{64, 1024} {
		const jobs = 20000
		body := append(bytes.Repeat([]byte{'x'}, size-2), "\r\n"...)
		var before, held, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f := NewFSM()
		for id := uint64(1); id <= jobs; {
			entry := []byte{entryRecords}
			for end := id + 100; id < end; id++ {
				j := job(id)
				j.Body = body
				entry = appendFramed(entry, record.AppendFull(nil, j))
			}
			if resp := f.Apply(&raft.Log{Index: id, Type: raft.LogCommand, Data: entry}); resp != nil {
				t.Fatal(resp)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&held)
		snap, err := f.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if err := snap.Persist(discardSink{}); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(f)
		live := float64(held.HeapAlloc) - float64(before.HeapAlloc)
		extra := float64(after.TotalAlloc - held.TotalAlloc)
		ratio := (live + extra) / live
		t.Logf("%d-byte bodies: live jobs %.0f B a job, the snapshot %.0f B a job more: %.2fx", size, live/jobs, extra/jobs, ratio)
		if ratio > 1.5 {
			t.Fatalf("%d-byte bodies: a snapshot takes the memory to %.2fx the live jobs'", size, ratio)
		}
	}
}

// A snapshot is the state at the moment it was taken, whatever is applied
// while it is written: changes to jobs it holds (a release, a bury, a full
// rewrite, a delete) run beside Persist without touching what it writes
// (and without a data race: run under -race).
func TestSnapshotIsTheStateWhenTakenWhileLaterEntriesApply(t *testing.T) {
	f := NewFSM()
	entry := []byte{entryRecords}
	for id := uint64(1); id <= 200; id++ {
		entry = appendFramed(entry, record.AppendFull(nil, job(id)))
	}
	if resp := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: entry}); resp != nil {
		t.Fatal(resp)
	}
	want, wantMax := f.State()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	persisted := make(chan error, 1)
	go func() { persisted <- snap.Persist(&sink) }()
	for id := uint64(1); id <= 200; id++ {
		later := []byte{entryRecords}
		switch id % 4 {
		case 0:
			later = appendFramed(later, record.AppendRelease(nil, id, 7, time.Second, 5e9, record.Counters{Reserves: 1, Releases: 1}))
		case 1:
			later = appendFramed(later, record.AppendBury(nil, id, 9, id, record.Counters{Buries: 1}))
		case 2:
			j := job(id)
			j.Tube, j.Body, j.TTR = "moved", []byte("rewritten\r\n"), time.Hour
			later = appendFramed(later, record.AppendFull(nil, j))
		case 3:
			later = appendFramed(later, record.AppendDelete(nil, id))
		}
		if resp := f.Apply(&raft.Log{Index: 1 + id, Type: raft.LogCommand, Data: later}); resp != nil {
			t.Fatal(resp)
		}
	}
	if err := <-persisted; err != nil {
		t.Fatal(err)
	}
	g := NewFSM()
	if err := g.Restore(io.NopCloser(&sink)); err != nil {
		t.Fatal(err)
	}
	got, gotMax := g.State()
	if !reflect.DeepEqual(got, want) || gotMax != wantMax {
		t.Fatalf("the snapshot restored %d jobs (max id %d), not the %d (max id %d) it was taken with", len(got), gotMax, len(want), wantMax)
	}
}

// A node deposed between winning an election and taking the lead (its
// barrier cannot commit, cut off from the majority) has served nothing:
// it waits to lead again instead of failing, and takes the lead when it
// is handed back.
func TestNodeDeposedBeforeItServesWaitsToLeadAgain(t *testing.T) {
	g := newGroup(t, 3)
	old, oi := g.elected()
	g.partition(oi)
	type result struct {
		jl  *Journal
		err error
	}
	got := make(chan result, 1)
	go func() {
		jl, err := old.AwaitLeadership(context.Background())
		got <- result{jl, err}
	}()
	nl, _ := g.leader(old)
	waitUntil(t, "the cut-off node to step down", func() bool { return old.Raft.State() != raft.Leader })
	select {
	case r := <-got:
		t.Fatalf("a node deposed before it served returned from AwaitLeadership: %v", r.err)
	default:
	}
	g.handBack(nl, oi)
	select {
	case r := <-got:
		if r.err != nil || r.jl == nil {
			t.Fatalf("AwaitLeadership once the lead was handed back: %v", r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the node did not take the lead handed back to it in 30 s")
	}
}

// raft's leadership notifications of a term a node lost before it took
// the lead (it led, was cut off, led again) are still buffered when it
// takes the lead: they must not make LostLeadership say it lost the
// lead it holds.
func TestStaleLeadershipNotificationsDoNotDeposeALeader(t *testing.T) {
	g := newGroup(t, 3)
	old, oi := g.elected()
	g.partition(oi)
	nl, _ := g.leader(old)
	waitUntil(t, "the cut-off node to step down", func() bool { return old.Raft.State() != raft.Leader })
	g.handBack(nl, oi)
	waitUntil(t, "the node to lead again", func() bool { return old.Raft.State() == raft.Leader })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := old.AwaitLeadership(ctx); err != nil {
		t.Fatal(err)
	}
	lost := old.LostLeadership()
	// Stale notifications are read at once; give the watcher a heartbeat
	// timeout to misread them, while the node keeps the lead.
	select {
	case <-lost:
		if old.Raft.State() == raft.Leader {
			t.Fatal("LostLeadership closed while the node leads in the term it took the lead in")
		}
	case <-time.After(old.cfg.HeartbeatTimeout):
	}
}

// elected waits for a node to win an election (without taking the lead:
// AwaitLeadership is not called) and returns it with its index.
func (g *group) elected() (*Node, int) {
	g.t.Helper()
	var won *Node
	waitUntil(g.t, "a node to win an election", func() bool {
		for _, nd := range g.nodes {
			if nd.Raft.State() == raft.Leader {
				won = nd
				return true
			}
		}
		return false
	})
	return won, slices.Index(g.nodes, won)
}

// handBack heals the group and has the leader nl hand the lead to node
// i once i has caught up.
func (g *group) handBack(nl *Node, i int) {
	g.t.Helper()
	g.heal()
	to := g.nodes[i]
	waitUntil(g.t, "the healed node to follow the new leader", func() bool {
		return to.Raft.AppliedIndex() >= nl.Raft.CommitIndex()
	})
	if err := nl.Raft.LeadershipTransferToServer(raft.ServerID(to.cfg.ID), raft.ServerAddress(g.trans[i].LocalAddr())).Error(); err != nil {
		g.t.Fatal(err)
	}
}

// waitUntil polls cond until it holds, for at most 30 s.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 30 s waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
