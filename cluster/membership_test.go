package cluster

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
)

// addNode opens a node that is no member yet (as one started with
// --join), linked both ways with every node of g.
func (g *group) addNode(id string) (*Node, raft.ServerAddress) {
	g.t.Helper()
	addr, tr := raft.NewInmemTransport(raft.NewInmemAddr())
	for _, o := range g.trans {
		tr.Connect(o.LocalAddr(), o)
		o.Connect(addr, tr)
	}
	nd, err := Open(Config{ID: id, Dir: g.t.TempDir(), Transport: tr, Log: zerolog.Nop()})
	if err != nil {
		g.t.Fatal(err)
	}
	g.nodes, g.trans = append(g.nodes, nd), append(g.trans, tr)
	return nd, addr
}

// suffrage is id's place in nd's configuration (false: not a member).
func suffrage(t *testing.T, nd *Node, id string) (raft.ServerSuffrage, bool) {
	t.Helper()
	f := nd.Raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id {
			return s.Suffrage, true
		}
	}
	return 0, false
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A node added to the group joins as a non-voter and is promoted to voter
// only once it has caught up with the leader's log.
func TestAddedNodeJoinsAsNonVoterAndIsPromotedOnceCaughtUp(t *testing.T) {
	g := newGroup(t, 1)
	lead, jl := g.leader()
	const n = 2 * maxTrailing // entries, one a put
	for id := uint64(1); id <= n; id++ {
		a := newAcks(1)
		if err := jl.Put(job(id), a.ack(0)); err != nil {
			t.Fatal(err)
		}
		a.wait(t)
	}
	nd, addr := g.addNode("n2")
	msg, err := lead.Add("n2", string(addr))
	if err != nil || !strings.Contains(msg, "as a non-voter") {
		t.Fatalf("Add: %q, %v", msg, err)
	}
	if s, ok := suffrage(t, lead, "n2"); !ok || s != raft.Nonvoter {
		t.Fatalf("n2 joined as %v (member %v), want a non-voter", s, ok)
	}
	waitUntil(t, "n2 to be promoted", func() bool {
		s, _ := suffrage(t, lead, "n2")
		if s != raft.Voter {
			return false
		}
		if last := nd.Raft.LastIndex(); last+maxTrailing < lead.Raft.LastIndex() {
			t.Fatalf("n2 promoted with its log at %d, the leader's at %d", last, lead.Raft.LastIndex())
		}
		return true
	})
	if isClosed(nd.Removed()) {
		t.Fatal("a node that joined takes itself for removed")
	}
	waitUntil(t, "n2 to apply the leader's log", func() bool { return nd.Raft.AppliedIndex() >= lead.Raft.AppliedIndex() })
	if jobs, _ := nd.FSM.State(); len(jobs) != n {
		t.Fatalf("n2 holds %d jobs, want %d", len(jobs), n)
	}
}

// One wrong address added to a one-node group makes a non-voter that does
// not answer: the group goes on committing, the address is reported
// unreachable, it is never promoted, and it can be removed.
func TestUnreachableNodeIsReportedNeverPromotedAndCannotWedgeTheGroup(t *testing.T) {
	g := newGroup(t, 1)
	lead, jl := g.leader()
	wrong := string(raft.NewInmemAddr())
	if msg, err := lead.Add("n2", wrong); err == nil || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("Add of an address nothing answers on: %q, %v", msg, err)
	}
	a := newAcks(1)
	if err := jl.Put(job(1), a.ack(0)); err != nil {
		t.Fatal(err)
	}
	a.wait(t)
	var m MemberStatus
	waitUntil(t, "n2 reported unreachable", func() bool {
		for _, x := range lead.Status().(Status).Members {
			if x.ID == "n2" {
				m = x
			}
		}
		return m.Reachable != nil
	})
	if *m.Reachable || m.Error == "" || m.Voter {
		t.Fatalf("n2 on a wrong address: %+v", m)
	}
	for deadline := time.Now().Add(3 * lead.promoteAfter()); time.Now().Before(deadline); time.Sleep(lead.probeEvery()) {
		if s, _ := suffrage(t, lead, "n2"); s != raft.Nonvoter {
			t.Fatalf("an unreachable node became %v", s)
		}
	}
	if msg, err := lead.Remove("n2"); err != nil || msg != "removed n2" {
		t.Fatalf("Remove n2: %q, %v", msg, err)
	}
	if _, ok := suffrage(t, lead, "n2"); ok {
		t.Fatal("n2 is still a member")
	}
}

// A follower removed from the group is told (Removed), and so is a leader
// asked to leave, which first hands the lead over: another node leads
// before the configuration without it is committed.
func TestRemovedNodesAreToldAndALeaderHandsTheLeadOverFirst(t *testing.T) {
	g := newGroup(t, 4)
	lead, _ := g.leader()
	i := slices.IndexFunc(g.nodes, func(nd *Node) bool { return nd != lead })
	f := g.nodes[i]
	if msg, err := lead.Remove(f.cfg.ID); err != nil || msg != "removed "+f.cfg.ID {
		t.Fatalf("Remove %s: %q, %v", f.cfg.ID, msg, err)
	}
	waitUntil(t, "the removed follower to be told", func() bool { return isClosed(f.Removed()) })

	msg, err := lead.Remove(lead.cfg.ID)
	if err != nil || !strings.Contains(msg, "handed the lead over") {
		t.Fatalf("Remove of the leader: %q, %v", msg, err)
	}
	if lead.Raft.State() == raft.Leader {
		t.Fatal("the leader still leads once Remove of itself returned")
	}
	waitUntil(t, "the old leader to be told it was removed", func() bool { return isClosed(lead.Removed()) })
	next, _ := g.leader(lead, f)
	if _, ok := suffrage(t, next, lead.cfg.ID); ok {
		t.Fatal("the old leader is still a member")
	}
	// The configuration without the old leader was appended by the next
	// leader, in a later term than the one the old leader led in.
	var entry raft.Log
	for i := next.Raft.LastIndex(); ; i-- {
		if err := next.wal.GetLog(i, &entry); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if entry.Type == raft.LogConfiguration {
			break
		}
	}
	if entry.Term <= lead.leadTerm.Load() {
		t.Fatalf("the configuration without the old leader is entry %d of term %d; the old leader led in term %d",
			entry.Index, entry.Term, lead.leadTerm.Load())
	}
}

// losing is the state of the group's transports (losesRemoval): from the
// moment a target is named, every append to it carrying an entry not yet
// committed, as raft sends new entries and the configuration that removes
// it, is lost and answered as though the target had stored it, so that raft
// does not send it again: as when raft's one last append to a node it
// removes does not arrive, to a node that had already fallen behind.
// Appends that commit all they carry pass. So that raft's append carrying
// the removal is sent before the removal commits, the other members are
// sent the removal only once it is lost.
type losing struct {
	target      atomic.Value  // raft.ServerID
	removalLost chan struct{} // closed once an append carrying the removal is lost
	once        sync.Once
}

// losesRemoval is a node's transport losing what losing says.
type losesRemoval struct {
	*raft.InmemTransport
	l *losing
}

// AppendEntriesPipeline: every append goes through AppendEntries, so that
// it can be lost or held.
func (l *losesRemoval) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

func (l *losesRemoval) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	t, _ := l.l.target.Load().(raft.ServerID)
	removes := t != "" && slices.ContainsFunc(args.Entries, func(e *raft.Log) bool {
		return e.Type == raft.LogConfiguration && !slices.ContainsFunc(raft.DecodeConfiguration(e.Data).Servers,
			func(s raft.Server) bool { return s.ID == t })
	})
	n := len(args.Entries)
	switch {
	case id != t && removes:
		select {
		case <-l.l.removalLost:
		case <-time.After(10 * time.Second): // the test fails: it was not lost
		}
	case id == t && n > 0 && args.LeaderCommitIndex < args.Entries[n-1].Index:
		if removes {
			l.l.once.Do(func() { close(l.l.removalLost) })
		}
		*resp = raft.AppendEntriesResponse{Term: args.Term, LastLog: args.Entries[n-1].Index, Success: true}
		return nil
	}
	return l.InmemTransport.AppendEntries(id, target, args, resp)
}

// hashicorp/raft's last append to a node it removes is one attempt, sent
// before the removal commits. Lost, the node is told all the same: the
// leader sends it the entries up to the configuration without it once that
// commits, stepping back to those the node lacks. It notes it, and started
// again it knows at once.
func TestARemovedNodeIsToldEvenIfRaftsLastAppendToItIsLost(t *testing.T) {
	l := losing{removalLost: make(chan struct{})}
	g := newGroupOver(t, 3, 0, func(_ int, tr *raft.InmemTransport) raft.Transport {
		return &losesRemoval{InmemTransport: tr, l: &l}
	})
	lead, jl := g.leader()
	i := slices.IndexFunc(g.nodes, func(nd *Node) bool { return nd != lead })
	f := g.nodes[i]
	l.target.Store(raft.ServerID(f.cfg.ID))
	// An entry each, so that the node falls behind by up to a few
	// messages.
	const jobs = 2*tellBatch + 1
	for id := range uint64(jobs) {
		a := newAcks(1)
		if err := jl.Put(job(id+1), a.ack(0)); err != nil {
			t.Fatal(err)
		}
		a.wait(t)
	}
	if msg, err := lead.Remove(f.cfg.ID); err != nil || msg != "removed "+f.cfg.ID {
		t.Fatalf("Remove %s: %q, %v", f.cfg.ID, msg, err)
	}
	waitUntil(t, "the removed follower to be told", func() bool { return isClosed(f.Removed()) })
	if !isClosed(l.removalLost) {
		t.Fatal("no append carrying the removal was lost")
	}
	if js, _ := f.FSM.State(); len(js) != jobs {
		t.Fatalf("the removed node holds %d jobs, want the %d it was told", len(js), jobs)
	}

	f.Close()
	g.nodes[i] = nil
	_, tr := raft.NewInmemTransport(raft.NewInmemAddr())
	nd, err := Open(Config{ID: f.cfg.ID, Dir: f.cfg.Dir, Transport: tr, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	g.nodes[i] = nd
	if !isClosed(nd.Removed()) {
		t.Fatal("the removed node, started again, does not know it was removed")
	}
}

// The lead cannot be handed to a non-voter: it could not win the election
// it would start, and its higher term would depose the leader.
func TestLeadIsNotHandedToANonVoter(t *testing.T) {
	g := newGroup(t, 1)
	lead, _ := g.leader()
	_, addr := g.addNode("n2")
	if _, err := lead.Add("n2", string(addr)); err != nil {
		t.Fatal(err)
	}
	if s, _ := suffrage(t, lead, "n2"); s != raft.Nonvoter {
		t.Skip("n2 was promoted before the transfer could be tried")
	}
	if err := lead.TransferLeader("n2"); err == nil || !strings.Contains(err.Error(), "n2 is not a voter") {
		t.Fatalf("TransferLeader to a non-voter: %v", err)
	}
	if lead.Raft.State() != raft.Leader {
		t.Fatal("the leader lost the lead")
	}
}

// A node that restarts noted as removed, and then applies a committed
// configuration without it, is removed once: Removed is closed, and
// closing it again does not panic the process.
func TestANodeNotedRemovedIsRemovedOnceWhenTheRemovalCommitsAgain(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, memberFile), []byte(removedNote), 0o600); err != nil {
		t.Fatal(err)
	}
	n := &Node{cfg: Config{ID: "n3", Dir: dir}}
	n.loadMembership()
	n.checkMembership(nil, []committedConf{{index: 9, servers: []raft.Server{{ID: "n1"}, {ID: "n2"}}}})
	select {
	case <-n.Removed():
	default:
		t.Fatal("a node noted removed is not told Removed")
	}
}
