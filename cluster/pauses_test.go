package cluster

import (
	"encoding/binary"
	"fmt"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/beanpole/beanpole/engine"
	"github.com/beanpole/beanpole/record"
)

// The leader's engine logs its pauses through the cluster's journal.
var _ engine.PauseJournal = (*Journal)(nil)

// applyRecords applies one entry of records at index i, appended by the
// leader at wall-clock Unix ns at (0: no time).
func applyRecords(t *testing.T, f *FSM, i uint64, at int64, recs ...[]byte) {
	t.Helper()
	entry := []byte{entryRecords}
	for _, r := range recs {
		entry = appendFramed(entry, r)
	}
	l := &raft.Log{Index: i, Type: raft.LogCommand, Data: entry}
	if at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	if resp := f.Apply(l); resp != nil {
		t.Fatal(resp)
	}
}

func pauseRec(tube string, d time.Duration, until int64) []byte {
	return record.AppendPause(nil, &record.Pause{Tube: tube, Delay: d, Until: until})
}

// TestFSMKeepsPausesUntilTheyEnd: a pause record pauses its tube in the
// state every node holds, a later one replaces it, a delay of 0 ends it,
// and a pause whose end has passed by the time the leader appended a
// later entry is gone.
func TestFSMKeepsPausesUntilTheyEnd(t *testing.T) {
	f := NewFSM()
	const t0 = int64(1_700_000_000e9)
	applyRecords(t, f, 1, t0, pauseRec("a", time.Minute, t0+60e9), pauseRec("b", time.Hour, t0+3600e9),
		pauseRec("c", 10*time.Second, t0+10e9))
	want := []record.Pause{{Tube: "a", Delay: time.Minute, Until: t0 + 60e9}, {Tube: "b", Delay: time.Hour, Until: t0 + 3600e9}, {Tube: "c", Delay: 10 * time.Second, Until: t0 + 10e9}}
	if got := f.Pauses(); !reflect.DeepEqual(got, want) {
		t.Fatalf("pauses %+v, want %+v", got, want)
	}
	applyRecords(t, f, 2, t0+1e9, pauseRec("a", 2*time.Minute, t0+121e9), pauseRec("b", 0, 0))
	want = []record.Pause{{Tube: "a", Delay: 2 * time.Minute, Until: t0 + 121e9}, {Tube: "c", Delay: 10 * time.Second, Until: t0 + 10e9}}
	if got := f.Pauses(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a re-pause and an unpause: pauses %+v, want %+v", got, want)
	}
	applyRecords(t, f, 3, t0+10e9) // c's pause ends as the entry is appended
	want = want[:1]
	if got := f.Pauses(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after c's end: pauses %+v, want %+v", got, want)
	}
	if len(f.tubes) != 1 {
		t.Fatalf("%d tube names kept for one paused tube", len(f.tubes))
	}
}

// TestFSMTubeNamesGoWithTheirLastJobAndPause: a tube's name is kept while
// a live job or a pause holds it and dropped after, so a client cycling
// through unique tube names does not grow the state.
func TestFSMTubeNamesGoWithTheirLastJobAndPause(t *testing.T) {
	f := NewFSM()
	const t0 = int64(1_700_000_000e9)
	idx := uint64(0)
	for id := uint64(1); id <= 1000; id++ {
		j := job(id)
		j.Tube = fmt.Sprintf("unique-%d", id)
		idx++
		applyRecords(t, f, idx, t0, record.AppendFull(nil, j), pauseRec(j.Tube, time.Second, t0+1e9))
		idx++
		applyRecords(t, f, idx, t0, record.AppendDelete(nil, id), pauseRec(j.Tube, 0, 0))
	}
	if len(f.tubes) != 0 {
		t.Fatalf("%d tube names kept after every job and pause went", len(f.tubes))
	}

	// Two jobs and a pause hold tube x: it goes with the last of them.
	a, b := job(2001), job(2002)
	a.Tube, b.Tube = "x", "x"
	applyRecords(t, f, idx+1, t0, record.AppendFull(nil, a), record.AppendFull(nil, b), pauseRec("x", time.Second, t0+1e9))
	applyRecords(t, f, idx+2, t0, record.AppendFull(nil, a)) // a rewrite of a live job
	applyRecords(t, f, idx+3, t0, record.AppendDelete(nil, 2001), record.AppendDelete(nil, 2002))
	if len(f.tubes) != 1 {
		t.Fatalf("tube x's name went while its pause holds it (%d names)", len(f.tubes))
	}
	applyRecords(t, f, idx+4, t0+1e9) // the pause ends
	if len(f.tubes) != 0 || len(f.Pauses()) != 0 {
		t.Fatalf("%d names and %d pauses after the last holder went", len(f.tubes), len(f.Pauses()))
	}
}

// TestSnapshotKeepsPausesAndEveryLeadersClientAddress: a snapshot holds
// the pauses and the client address of every node that has led, and a
// follower restored from it forwards to the latest leader's addresses.
func TestSnapshotKeepsPausesAndEveryLeadersClientAddress(t *testing.T) {
	f := NewFSM()
	const t0 = int64(1_700_000_000e9)
	for i, a := range []string{"n1\x00127.0.0.1:11300", "n2\x00127.0.0.2:11300\x00127.0.0.2:11400"} {
		if resp := f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: append([]byte{entryLeader}, a...)}); resp != nil {
			t.Fatal(resp)
		}
	}
	j := job(1)
	applyRecords(t, f, 3, t0, record.AppendFull(nil, j), pauseRec(j.Tube, time.Minute, t0+60e9), pauseRec("empty", time.Hour, t0+3600e9))
	g := restoreFrom(t, f)
	if got, want := g.Pauses(), f.Pauses(); !reflect.DeepEqual(got, want) || len(got) != 2 {
		t.Fatalf("restored pauses %+v, want %+v", got, want)
	}
	if got, want := g.Clients(), map[string]string{"n1": "127.0.0.1:11300", "n2": "127.0.0.2:11300"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("restored client addresses %v, want %v", got, want)
	}
	if id, client, tlsClient := g.Leader(); id != "n2" || client != "127.0.0.2:11300" || tlsClient != "127.0.0.2:11400" {
		t.Fatalf("restored leader %q at %q and %q, want n2 at 127.0.0.2:11300 and 127.0.0.2:11400", id, client, tlsClient)
	}
	if len(g.tubes) != 2 {
		t.Fatalf("restored %d tube names, want 2", len(g.tubes))
	}
	// The restored pauses go when they end, as applied ones do.
	applyRecords(t, g, 4, t0+3600e9)
	if len(g.Pauses()) != 0 || len(g.tubes) != 1 {
		t.Fatalf("%d pauses and %d names after every pause ended", len(g.Pauses()), len(g.tubes))
	}
}

// persisted is a snapshot of f, written out.
func persisted(t *testing.T, f *FSM) *memSink {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	return &sink
}

// restoreFrom is a new state restored from a snapshot of f.
func restoreFrom(t *testing.T, f *FSM) *FSM {
	t.Helper()
	g := NewFSM()
	if err := g.Restore(io.NopCloser(persisted(t, f))); err != nil {
		t.Fatal(err)
	}
	return g
}

// TestSnapshotOfTheFirstFormatRestores: a node that took its snapshot
// before pauses were replicated still starts from it.
func TestSnapshotOfTheFirstFormatRestores(t *testing.T) {
	var b []byte
	b = append(b, snapMagic1...)
	b = binary.LittleEndian.AppendUint64(b, 9)
	b = binary.LittleEndian.AppendUint64(b, 1)
	full := record.AppendFull(nil, job(9))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(full)))
	b = append(b, full...)
	leader := "n1\x00127.0.0.1:11300"
	b = binary.LittleEndian.AppendUint32(b, uint32(len(leader)))
	b = append(b, leader...)
	f := NewFSM()
	var sink memSink
	sink.Write(b)
	if err := f.Restore(io.NopCloser(&sink)); err != nil {
		t.Fatal(err)
	}
	if jobs, maxID := f.State(); len(jobs) != 1 || maxID != 9 {
		t.Fatalf("%d jobs, max id %d", len(jobs), maxID)
	}
	if id, client, _ := f.Leader(); id != "n1" || client != "127.0.0.1:11300" || len(f.Pauses()) != 0 {
		t.Fatalf("leader %q at %q, %d pauses", id, client, len(f.Pauses()))
	}
}

// TestFollowerRestoredFromASnapshotForwardsToTheLeader: a follower whose
// state is replaced by a snapshot of the leader's (what raft does for a
// follower too far behind) forwards its clients to the leader's announced
// addresses, plaintext and TLS.
func TestFollowerRestoredFromASnapshotForwardsToTheLeader(t *testing.T) {
	g := newGroup(t, 3)
	leader, _ := g.leader()
	if err := leader.Announce("127.0.0.9:11300", "127.0.0.9:11400"); err != nil {
		t.Fatal(err)
	}
	g.converged(leader)
	var follower *Node
	for _, nd := range g.nodes {
		if nd != leader {
			follower = nd
		}
	}
	if err := follower.FSM.Restore(io.NopCloser(persisted(t, leader.FSM))); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the follower to know its leader", func() bool { return follower.LeaderClient(false) != "" })
	if plain, tls := follower.LeaderClient(false), follower.LeaderClient(true); plain != "127.0.0.9:11300" || tls != "127.0.0.9:11400" {
		t.Fatalf("the restored follower forwards to %q and %q, want 127.0.0.9:11300 and 127.0.0.9:11400", plain, tls)
	}
	if got := follower.FSM.Clients()[string(leader.cfg.ID)]; got != "127.0.0.9:11300" {
		t.Fatalf("the restored follower has the leader's client address as %q", got)
	}
}
