package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/beanpole/beanpole/record"
)

// Membership changes that cannot wedge the group.
//
// A node added to the group (Add: `beanpole cluster add`, --join) joins
// as a non-voter, which the majority does not count: a wrong address, or a
// node that never starts, leaves the group as it was. The leader probes
// every other member every probeEvery with the message raft's own
// heartbeats are (an AppendEntries of its term with no entries): the
// answer says whether the member is reachable and, in its LastLog, the last
// index in the member's log. hashicorp/raft keeps its own view of each
// follower's progress to itself, so the probe is how the leader learns it.
// A non-voter found reachable and within maxTrailing entries of the
// leader's last index in every probe for promoteAfter is promoted to voter
// (raft's AddVoter), as Consul's autopilot promotes a server once it is
// stable and has caught up; an unreachable one is reported (Status, Add's
// answer) and never promoted.
//
// A node that sees itself in the group's configuration notes it in its
// directory (memberFile); once it has, the last committed configuration
// leaving it out, while raft's latest does too, means it was removed (a
// node still catching up on the configurations before its own is not): it
// notes that as well (removedNote), Removed is closed and the process exits
// (package server returns config.ExitRemoved), instead of lingering as a
// follower of nothing. Started again, it finds the note and exits again.
// raft hands the FSM each configuration it commits (FSM.StoreConfiguration).
//
// hashicorp/raft stops replicating to a removed node as soon as the
// configuration without it is appended, after one last best-effort append,
// and that append is sent before the configuration commits: lost, late or
// rejected, the node would never learn of its removal. So every node notes
// which members a newly committed configuration left out (noteDeparted),
// and whoever leads tells each of them for tellRemovedFor (tellDeparted):
// it sends the node, over the raft link, the entries up to that
// configuration and commits them, as raft's own replication would, until
// the node answers that it holds them. Only a leader sends them, only
// entries it has committed, and only over the group's links (mutual TLS
// with a node's certificate when the links are secured, tls.go).
//
// A data group of a host whose every member hosts every group follows
// group 0's members (follow, called by the host): its leader adds group
// 0's voters as non-voters, which the same probes promote, removes the
// members group 0 no longer has, and leaves last itself, handing the lead
// over as above.

const (
	// maxTrailing is how many entries a non-voter may lag the leader's
	// last index and still count as caught up (Consul's MaxTrailingLogs
	// is 250).
	maxTrailing = 256
	// memberFile, in the node's directory, says the node has been a
	// member (its id), or holds removedNote once it has been removed.
	memberFile  = "member"
	removedNote = "removed\n"
	// tellRemovedFor is how long the leader goes on telling a removed node
	// of its removal: long enough for a lost message, a partition that
	// heals or a restart; a node down for longer is not told.
	tellRemovedFor = time.Minute
	// tellBatch bounds the entries of one message to a removed node that
	// lags the configuration without it (raft's MaxAppendEntries).
	tellBatch = 64
)

// probeEvery is how often the leader probes each member, and promoteAfter
// how long a non-voter must have been reachable and caught up to be
// promoted: both from the heartbeat timeout.
func (n *Node) probeEvery() time.Duration   { return n.cfg.HeartbeatTimeout / 2 }
func (n *Node) promoteAfter() time.Duration { return 2 * n.cfg.HeartbeatTimeout }

// health is what the leader's probes found of one member.
type health struct {
	probing  bool      // a probe is on its way
	probed   time.Time // when the last probe answered or failed
	err      error     // the last probe's failure, nil if it answered
	last     uint64    // the member's last log index, as last answered
	caughtUp time.Time // since when every probe found it caught up (zero: the last did not)
}

// departed is a node that a committed configuration left out, to be told.
type departed struct {
	srv     raft.Server // as the configuration before named it
	index   uint64      // the committed configuration without it
	until   time.Time   // when the leader stops telling it
	next    uint64      // the first entry the next message sends it
	telling bool        // a message is on its way
}

// membership is a node's view of the members' health (on the leader) and
// of its own membership.
type membership struct {
	mu     sync.Mutex
	health map[raft.ServerID]*health
	gone   map[raft.ServerID]*departed
	member bool // memberFile exists
	// left: the last configuration committed leaves this node out.
	left    bool
	removed chan struct{}
	once    sync.Once
	// seen is the last configuration noteDeparted saw committed.
	seen []raft.Server
	// busy: a request to leave is being carried out.
	busy atomic.Bool
}

// watchMembers starts the loop that, while this node leads, probes the
// other members and promotes the non-voters that have caught up, and on
// every node notices its own removal.
func (n *Node) watchMembers() {
	n.loadMembership()
	go func() {
		tick := time.NewTicker(n.probeEvery())
		defer tick.Stop()
		for range tick.C {
			if n.Raft.State() == raft.Shutdown {
				return
			}
			f := n.Raft.GetConfiguration()
			if f.Error() != nil {
				continue
			}
			servers := f.Configuration().Servers
			confs := n.FSM.takeConfigurations()
			n.checkMembership(servers, confs)
			n.noteDeparted(confs)
			if n.Raft.State() == raft.Leader {
				term := n.Raft.CurrentTerm()
				n.tend(servers, term)
				n.tellDeparted(term)
				n.carryOutLeave(servers)
			} else {
				n.mem.mu.Lock()
				clear(n.mem.health)
				n.mem.mu.Unlock()
			}
		}
	}()
}

// loadMembership reads what the node noted of its membership (memberFile):
// a node noted removed has Removed closed from the start.
func (n *Node) loadMembership() {
	n.mem.health = map[raft.ServerID]*health{}
	n.mem.gone = map[raft.ServerID]*departed{}
	n.mem.removed = make(chan struct{})
	note, err := os.ReadFile(filepath.Join(n.cfg.Dir, memberFile))
	n.mem.member = err == nil
	if string(note) == removedNote {
		n.mem.once.Do(func() { close(n.mem.removed) })
	}
}

// checkMembership notes that this node is a member once raft's latest
// configuration, servers, names it, or closes Removed once a member finds
// itself in neither that nor the last of the configurations committed
// (confs, committed since the last call, in order).
func (n *Node) checkMembership(servers []raft.Server, confs []committedConf) {
	self := func(s raft.Server) bool { return string(s.ID) == n.cfg.ID }
	if k := len(confs); k > 0 {
		n.mem.left = !slices.ContainsFunc(confs[k-1].servers, self)
	}
	in := slices.ContainsFunc(servers, self)
	switch {
	case in && !n.mem.member:
		// A node that cannot note it is no worse off than before: it
		// is only not told of its removal.
		if err := os.WriteFile(filepath.Join(n.cfg.Dir, memberFile), []byte(n.cfg.ID+"\n"), 0o600); err == nil {
			n.mem.member = true
		}
	case !in && n.mem.member && n.mem.left:
		// Not noted, it is told again if it restarts in time.
		_ = os.WriteFile(filepath.Join(n.cfg.Dir, memberFile), []byte(removedNote), 0o600)
		n.mem.once.Do(func() { close(n.mem.removed) })
	}
}

// noteDeparted notes the members that each of the configurations confs,
// committed in that order, left out, and forgets those that one names
// again (or whose address it gives another member) and those told for long
// enough.
func (n *Node) noteDeparted(confs []committedConf) {
	now := time.Now()
	n.mem.mu.Lock()
	defer n.mem.mu.Unlock()
	for _, c := range confs {
		for _, s := range n.mem.seen {
			if string(s.ID) != n.cfg.ID && !slices.ContainsFunc(c.servers, func(x raft.Server) bool { return x.ID == s.ID }) {
				n.mem.gone[s.ID] = &departed{srv: s, index: c.index, next: c.index, until: now.Add(tellRemovedFor)}
			}
		}
		for id, d := range n.mem.gone {
			if slices.ContainsFunc(c.servers, func(x raft.Server) bool { return x.ID == id || x.Address == d.srv.Address }) {
				delete(n.mem.gone, id)
			}
		}
		n.mem.seen = c.servers
	}
	for id, d := range n.mem.gone {
		if now.After(d.until) {
			delete(n.mem.gone, id)
		}
	}
}

// tellDeparted sends every removed node still to be told, that no message
// is on its way to, the next message (tellInto). Leader only, in term.
func (n *Node) tellDeparted(term uint64) {
	n.mem.mu.Lock()
	defer n.mem.mu.Unlock()
	for _, d := range n.mem.gone {
		if !d.telling {
			d.telling = true
			go n.tellInto(d, term)
		}
	}
}

// tellInto sends the removed node d the entries from d.next up to the
// configuration without it, at most tellBatch of them, committed up to the
// last it sends, and records how far it got: d is told once it answers
// that it holds them all. It gives up on a node whose entries this node's
// log no longer holds.
func (n *Node) tellInto(d *departed, term uint64) {
	next, err := n.tell(d.srv, term, d.next, min(d.index, d.next+tellBatch-1))
	compacted := errors.Is(err, raft.ErrLogNotFound)
	told := err == nil && next > d.index
	n.mem.mu.Lock()
	d.telling = false
	switch {
	case (compacted || told) && n.mem.gone[d.srv.ID] == d:
		delete(n.mem.gone, d.srv.ID)
	case err == nil:
		d.next = next
	}
	n.mem.mu.Unlock()
	if compacted {
		n.cfg.Log.Warn().Err(err).Str("node", string(d.srv.ID)).Msg("cluster: cannot tell a removed node of its removal: the entries it lacks are compacted")
	} else if told {
		n.cfg.Log.Info().Str("node", string(d.srv.ID)).Msg("cluster: told a removed node of its removal")
	}
}

// tell sends s, in term, this node's entries from next to end, all
// committed, as raft's replication does, with end as the commit index,
// and returns the next entry to send: end+1 if s stored them, one a batch
// earlier (or just past its last) if its log does not hold the entry
// before next.
func (n *Node) tell(s raft.Server, term, next, end uint64) (uint64, error) {
	req := raft.AppendEntriesRequest{RPCHeader: n.header(), Term: term, PrevLogEntry: next - 1, LeaderCommitIndex: end}
	if next > 1 {
		var prev raft.Log
		if err := n.wal.GetLog(next-1, &prev); err != nil {
			return 0, err
		}
		req.PrevLogTerm = prev.Term
	}
	for i := next; i <= end; i++ {
		e := new(raft.Log)
		if err := n.wal.GetLog(i, e); err != nil {
			return 0, err
		}
		req.Entries = append(req.Entries, e)
	}
	var resp raft.AppendEntriesResponse
	if err := n.trans.AppendEntries(s.ID, s.Address, &req, &resp); err != nil {
		return 0, err
	}
	if resp.Term > term {
		return 0, errNewerTerm
	}
	if !resp.Success {
		back := uint64(1)
		if next > tellBatch {
			back = next - tellBatch
		}
		return max(min(back, resp.LastLog+1), 1), nil
	}
	return end + 1, nil
}

// Removed is closed once this node, having been a member, finds itself
// removed from the group's configuration.
func (n *Node) Removed() <-chan struct{} { return n.mem.removed }

// tend probes every other member and promotes the non-voters that have
// caught up. Leader only, in term.
func (n *Node) tend(servers []raft.Server, term uint64) {
	last := n.Raft.LastIndex()
	now := time.Now()
	n.mem.mu.Lock()
	defer n.mem.mu.Unlock()
	keep := map[raft.ServerID]bool{}
	for _, s := range servers {
		if string(s.ID) == n.cfg.ID {
			continue
		}
		keep[s.ID] = true
		h := n.mem.health[s.ID]
		if h == nil {
			h = &health{}
			n.mem.health[s.ID] = h
		}
		if !h.probing {
			h.probing = true
			go n.probeInto(s, term)
		}
		if s.Suffrage == raft.Nonvoter && h.err == nil && !h.caughtUp.IsZero() && h.last+maxTrailing >= last &&
			now.Sub(h.caughtUp) >= n.promoteAfter() {
			h.caughtUp = time.Time{}
			go n.promote(s)
		}
	}
	for id := range n.mem.health {
		if !keep[id] {
			delete(n.mem.health, id)
		}
	}
}

// probeInto probes s and records what it found.
func (n *Node) probeInto(s raft.Server, term uint64) {
	last, err := n.probe(s, term)
	target := n.Raft.LastIndex()
	n.mem.mu.Lock()
	defer n.mem.mu.Unlock()
	h := n.mem.health[s.ID]
	if h == nil {
		return
	}
	h.probing, h.probed, h.err = false, time.Now(), err
	if err != nil {
		h.caughtUp = time.Time{}
		return
	}
	h.last = last
	switch {
	case last+maxTrailing < target:
		h.caughtUp = time.Time{}
	case h.caughtUp.IsZero():
		h.caughtUp = h.probed
	}
}

// errNewerTerm: a member answered a probe with a term above the prober's.
var errNewerTerm = errors.New("it is in a newer term: this node no longer leads")

// probe sends s the message raft's heartbeats are, in term, and returns
// the last index in s's log.
func (n *Node) probe(s raft.Server, term uint64) (uint64, error) {
	req := raft.AppendEntriesRequest{RPCHeader: n.header(), Term: term}
	var resp raft.AppendEntriesResponse
	if err := n.trans.AppendEntries(s.ID, s.Address, &req, &resp); err != nil {
		return 0, err
	}
	if resp.Term > term {
		return 0, errNewerTerm
	}
	return resp.LastLog, nil
}

// header is the header of this node's own AppendEntries.
func (n *Node) header() raft.RPCHeader {
	self := raft.ServerID(n.cfg.ID)
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(self),
		Addr: n.trans.EncodePeer(self, n.trans.LocalAddr())}
}

// promote makes the non-voter s a voter.
func (n *Node) promote(s raft.Server) {
	if err := n.Raft.AddVoter(s.ID, s.Address, 0, 10*time.Second).Error(); err != nil {
		n.cfg.Log.Warn().Err(err).Str("node", string(s.ID)).Msg("cluster: could not promote a node that has caught up to voter")
		return
	}
	n.cfg.Log.Info().Str("node", string(s.ID)).Str("raft", string(s.Address)).Msg("cluster: promoted to voter: it has caught up")
}

// Add adds a node to the group as a non-voter (or updates a member's
// address), probes it once and says what it found. Leader only. A node
// that does not answer is added all the same, and reported: it is never
// promoted while it does not answer, and Remove takes it out.
func (n *Node) Add(id, raftAddr string) (string, error) {
	if n.Raft.State() != raft.Leader {
		return "", n.errFollower()
	}
	srv := raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(raftAddr)}
	if err := n.addNonvoter(srv); err != nil {
		return "", err
	}
	type found struct {
		last uint64
		err  error
	}
	done := make(chan found, 1)
	go func() {
		last, err := n.probe(srv, n.Raft.CurrentTerm())
		done <- found{last, err}
	}()
	select {
	case f := <-done:
		if f.err != nil {
			return "", fmt.Errorf("added %s at %s as a non-voter, but it does not answer there (%v): it is not promoted while it does not answer; `beanpole cluster remove --id %s` takes it out", id, raftAddr, f.err, id)
		}
		behind := uint64(0)
		if l := n.Raft.LastIndex(); l > f.last {
			behind = l - f.last
		}
		return fmt.Sprintf("added %s at %s as a non-voter, %d entries behind: it becomes a voter once it has caught up", id, raftAddr, behind), nil
	case <-time.After(5 * time.Second):
		return "", fmt.Errorf("added %s at %s as a non-voter, but it has not answered within 5 s: it is not promoted while it does not answer; `beanpole cluster remove --id %s` takes it out", id, raftAddr, id)
	}
}

// addNonvoter adds srv to the group as a non-voter, or updates a
// member's address, having withdrawn a request to leave that names it
// (leaveRequest). Leader only.
func (n *Node) addNonvoter(srv raft.Server) error {
	if n.FSM.leaving().id == string(srv.ID) {
		if err := n.Raft.Apply(leaveEntry(leaveRequest{}), 10*time.Second).Error(); err != nil {
			return err
		}
	}
	return n.Raft.AddNonvoter(srv.ID, srv.Address, 0, 10*time.Second).Error()
}

// committed is the last configuration of the group this node saw
// committed (noteDeparted; before any, its latest snapshot's), nil while
// it knows none.
func (n *Node) committed() []raft.Server {
	n.mem.mu.Lock()
	defer n.mem.mu.Unlock()
	return slices.Clone(n.mem.seen)
}

// follow brings the members of this data group to those of group 0, want
// (the last configuration of group 0 this node saw committed): it removes
// the members want does not name, and adds each voter of want that the
// group lacks as a non-voter (or gives a member the address want gives
// it), which tend promotes once it has caught up, as it promotes a node
// added to group 0. This node, if want leaves it out, leaves last, as a
// leader asked to leave does (Remove: it hands the lead over first, and
// the next leader removes it). Leader only. The changes are made one
// after another on a goroutine of their own, while no other change of
// the group's members or leader is on (mem.busy).
func (n *Node) follow(want []raft.Server) {
	f := n.Raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	have := f.Configuration().Servers
	byID := func(id raft.ServerID) func(raft.Server) bool { return func(s raft.Server) bool { return s.ID == id } }
	var drop, add []raft.Server
	leave := false
	for _, s := range have {
		switch {
		case slices.ContainsFunc(want, byID(s.ID)):
		case string(s.ID) == n.cfg.ID:
			leave = true
		default:
			drop = append(drop, s)
		}
	}
	for _, w := range want {
		if i := slices.IndexFunc(have, byID(w.ID)); w.Suffrage == raft.Voter && (i < 0 || have[i].Address != w.Address) {
			add = append(add, raft.Server{ID: w.ID, Address: w.Address})
		}
	}
	if len(drop)+len(add) == 0 && !leave || !n.mem.busy.CompareAndSwap(false, true) {
		return
	}
	go func() {
		if !n.changeMembers(drop, add) {
			return
		}
		if leave {
			if _, err := n.Remove(n.cfg.ID); err != nil {
				n.cfg.Log.Warn().Err(err).Msg("cluster: this node is no member of group 0 and could not leave a data group it leads yet")
			}
		}
	}()
}

// changeMembers removes the members drop and adds add as non-voters, and
// says whether it made every change; it ends the change follow began.
func (n *Node) changeMembers(drop, add []raft.Server) bool {
	defer n.mem.busy.Store(false)
	log := n.cfg.Log
	for _, s := range drop {
		if err := n.Raft.RemoveServer(s.ID, 0, 10*time.Second).Error(); err != nil {
			log.Warn().Err(err).Str("node", string(s.ID)).Msg("cluster: could not remove from a data group a node group 0 no longer has")
			return false
		}
		log.Info().Str("node", string(s.ID)).Msg("cluster: removed from a data group a node group 0 no longer has")
	}
	for _, s := range add {
		if err := n.addNonvoter(s); err != nil {
			log.Warn().Err(err).Str("node", string(s.ID)).Msg("cluster: could not add a voter of group 0 to a data group")
			return false
		}
		log.Info().Str("node", string(s.ID)).Str("raft", string(s.Address)).
			Msg("cluster: added a voter of group 0 to a data group as a non-voter: it becomes a voter once it has caught up")
	}
	return true
}

// memberHealth fills in what the leader's probes found of m.
func (n *Node) memberHealth(m *MemberStatus) {
	n.mem.mu.Lock()
	defer n.mem.mu.Unlock()
	h := n.mem.health[raft.ServerID(m.ID)]
	if h == nil || h.probed.IsZero() {
		return
	}
	ok := h.err == nil
	m.Reachable = &ok
	if ok {
		m.LastIndex = h.last
	} else {
		m.Error = h.err.Error()
	}
}

// A leader asked to leave the group hands the lead over first, so that the
// group never waits for an election: it commits its request to leave (an
// entryLeave naming it), then transfers the lead; the next leader removes
// it. Whoever leads carries the latest request out (carryOutLeave): a
// leader that could not hand the lead over tries again, one that took it
// over removes the node that asked. Adding a node of that id again
// withdraws the request first (an entryLeave naming no one), so a node
// that rejoins is not removed for it. A request is not kept in snapshots:
// one that a restarted leader never saw is asked again.
type leaveRequest struct{ id string }

// maxIDBytes bounds a node id in a request to leave.
const maxIDBytes = 1024

func leaveEntry(r leaveRequest) []byte { return append([]byte{entryLeave}, r.id...) }

func parseLeave(data []byte) leaveRequest { return leaveRequest{id: string(data[1:])} }

func validLeave(data []byte) error {
	if len(data)-1 > maxIDBytes {
		return fmt.Errorf("%w: a request to leave naming an id of %d bytes", record.ErrBad, len(data)-1)
	}
	return nil
}

// leaving is the latest request to leave the group.
func (f *FSM) leaving() leaveRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.leave
}

// Remove takes a node out of the group. Leader only. The leader itself
// leaves by handing the lead over first (leaveRequest): it returns once
// the lead is handed over, and the next leader removes it.
func (n *Node) Remove(id string) (string, error) {
	if n.Raft.State() != raft.Leader {
		return "", n.errFollower()
	}
	if id != n.cfg.ID {
		if err := n.Raft.RemoveServer(raft.ServerID(id), 0, 10*time.Second).Error(); err != nil {
			return "", err
		}
		return "removed " + id, nil
	}
	f := n.Raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return "", err
	}
	voters := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != id {
			voters++
		}
	}
	if voters == 0 {
		return "", fmt.Errorf("%s is the group's only voter: it cannot leave it", id)
	}
	if !n.mem.busy.CompareAndSwap(false, true) {
		return "", fmt.Errorf("%s is already handing the lead over to leave the group", id)
	}
	defer n.mem.busy.Store(false)
	if err := n.Raft.Apply(leaveEntry(leaveRequest{id: id}), 10*time.Second).Error(); err != nil {
		return "", err
	}
	if err := n.TransferLeader(""); err != nil {
		return "", fmt.Errorf("%s leads and could not hand the lead over (%v): it tries again, and leaves once another node leads", id, err)
	}
	return fmt.Sprintf("%s handed the lead over; the next leader removes it, and it exits", id), nil
}

// carryOutLeave acts on the latest request to leave, on the leader: it
// removes the node that asked, or, if that is this node, hands the lead
// over.
func (n *Node) carryOutLeave(servers []raft.Server) {
	r := n.FSM.leaving()
	if r.id == "" || n.handingOver.Load() {
		return
	}
	member := false
	for _, s := range servers {
		member = member || string(s.ID) == r.id
	}
	if !member || !n.mem.busy.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer n.mem.busy.Store(false)
		if r.id == n.cfg.ID {
			if err := n.TransferLeader(""); err != nil {
				n.cfg.Log.Warn().Err(err).Msg("cluster: this node asked to leave the group and could not hand the lead over yet")
			}
			return
		}
		if err := n.Raft.RemoveServer(raft.ServerID(r.id), 0, 10*time.Second).Error(); err != nil {
			n.cfg.Log.Warn().Err(err).Str("node", r.id).Msg("cluster: could not remove a node that asked to leave")
			return
		}
		n.cfg.Log.Info().Str("node", r.id).Msg("cluster: removed a node that asked to leave, having led")
	}()
}
