package cluster

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// With replicas, where each data group's replicas live is group 0's
// (placement, entryPlacement): its leader writes the first placement once
// every data group has a leader that reports its members, as they are
// (GroupMembers of the bootstrap, in a cluster that has not changed), and
// from then on moves replicas one at a time (nextMove), each step a new
// placement in group 0, and each only once every group's members are
// those the last step gave it:
//   - a node added to group 0 takes replicas from the nodes that host the
//     most groups once it is a voter there, reachable and caught up;
//   - a node being removed (RemoveNode) gives its replicas to the nodes
//     that host the fewest, and once it hosts none, group 0's leader
//     removes it from group 0.
//
// Every node reads the placement from its replica of group 0 (place): it
// opens, empty, a replica of each group the placement names it for that
// it does not host, and closes, removing its stores, a replica of a group
// the placement no longer names it for once that group's configuration no
// longer names it. Each data group's leader makes the group's members
// follow the placement (Node.follow, replacing): the new member is added
// as a non-voter, promoted once caught up by the probes, and only then is
// the member it replaces removed.

// errUnplaced: group 0's leader has not written the placement yet.
var errUnplaced = errors.New("the data groups' placement is not known yet (group 0's leader writes it once every data group has a leader): try again shortly")

// place carries out the placement on this node, and on group 0's leader
// writes it: want is group 0's last committed configuration.
func (h *Host) place(want []raft.Server) {
	zero := h.Group(0)
	p, ok := zero.FSM.placement()
	if !ok {
		if zero.Raft.State() == raft.Leader {
			h.firstPlacement(want)
		}
		return
	}
	h.host(p)
	for g := 1; g < len(h.groups); g++ {
		nd := h.Group(g)
		if nd == nil || nd.Raft.State() != raft.Leader || g > len(p.Groups) {
			continue
		}
		var members []raft.Server
		for _, id := range p.Groups[g-1] {
			i := slices.IndexFunc(want, func(s raft.Server) bool { return string(s.ID) == id })
			if i < 0 {
				members = nil // not a member of group 0 (yet): wait
				break
			}
			members = append(members, raft.Server{Suffrage: raft.Voter, ID: want[i].ID, Address: want[i].Address})
		}
		if members != nil {
			nd.follow(members, true)
		}
	}
	if zero.Raft.State() == raft.Leader {
		h.balance(p, want)
	}
}

// settled says whether every data group's members are the voters p gives
// it, and no other.
func (h *Host) settled(p placement) bool {
	for g := 1; g < len(h.groups); g++ {
		voters, nonvoters, ok := h.views.config(g)
		if !ok || len(nonvoters) > 0 || g > len(p.Groups) || !sameIDs(voters, p.Groups[g-1]) {
			return false
		}
	}
	return true
}

func sameIDs(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// firstPlacement writes the placement the data groups have, once every
// one has a leader that reports its members, all voters of group 0: each
// group's voters, in the order GroupMembers gives the nodes from the
// group's own on, so that a cluster bootstrapped with replicas keeps each
// group's preferred leader. Group 0's leader only.
func (h *Host) firstPlacement(want []raft.Server) {
	var ids []Member
	for _, s := range want {
		if s.Suffrage == raft.Voter {
			ids = append(ids, Member{ID: string(s.ID)})
		}
	}
	p := placement{Groups: make([][]string, len(h.groups)-1)}
	for g := 1; g < len(h.groups); g++ {
		voters, nonvoters, ok := h.views.config(g)
		if !ok || len(nonvoters) > 0 || len(voters) == 0 {
			return
		}
		for _, m := range GroupMembers(ids, g, 0) {
			if slices.Contains(voters, m.ID) {
				p.Groups[g-1] = append(p.Groups[g-1], m.ID)
			}
		}
		if len(p.Groups[g-1]) != len(voters) {
			return // a member that is no voter of group 0: wait
		}
	}
	h.write(p, "cluster: wrote where the data groups' replicas live")
}

// write records p in group 0 and logs why.
func (h *Host) write(p placement, why string) bool {
	zero := h.Group(0)
	if err := zero.Raft.Apply(placementEntry(p), 10*time.Second).Error(); err != nil {
		zero.cfg.Log.Warn().Err(err).Msg("cluster: could not write the data groups' placement")
		return false
	}
	zero.cfg.Log.Info().Any("placement", p.Groups).Strs("drain", p.Drain).Msg(why)
	return true
}

// balance makes the placement's next step, once every group's members
// are those of the last (settled), or removes from group 0 a drained node
// that hosts no group any more. Group 0's leader only.
func (h *Host) balance(p placement, want []raft.Server) {
	if !h.settled(p) {
		return
	}
	zero := h.Group(0)
	var nodes []string
	for _, s := range want {
		if s.Suffrage == raft.Voter {
			nodes = append(nodes, string(s.ID))
		}
	}
	ready := func(id string) bool { return id == zero.cfg.ID || zero.readyToLead(id) }
	if m, ok := nextMove(p, nodes, ready); ok {
		h.write(p.apply(m), fmt.Sprintf("cluster: moving group %d's replica on %s to %s", m.g, m.from, m.to))
		return
	}
	load := p.hosts()
	for _, id := range p.Drain {
		if load[id] > 0 || !slices.Contains(nodes, id) || zero.FSM.leaving().id == id {
			continue
		}
		if msg, err := zero.Remove(id); err != nil {
			zero.cfg.Log.Warn().Err(err).Str("node", id).Msg("cluster: could not remove a drained node from group 0 yet")
		} else {
			zero.cfg.Log.Info().Str("node", id).Msg("cluster: " + msg + ": its replicas were moved to the other nodes")
		}
		return
	}
}

// host opens a replica of each data group p names this node for that it
// does not host, and closes each that p no longer names it for once the
// group's configuration, as its replica knows it, no longer names it.
// The spreading's goroutine only.
func (h *Host) host(p placement) {
	self := h.cfg.ID
	for g := 1; g < len(h.groups) && g <= len(p.Groups); g++ {
		named, nd := slices.Contains(p.Groups[g-1], self), h.Group(g)
		switch {
		case named && nd == nil:
			if err := h.open(g); err != nil {
				h.cfg.Log.Error().Err(err).Int("group", g).Msg("cluster: could not open a replica of a data group the placement gives this node")
			}
		case !named && nd != nil:
			if voters, nonvoters, ok := configOf(nd); ok && !slices.Contains(voters, self) && !slices.Contains(nonvoters, self) {
				h.closeReplica(g)
			}
		}
	}
}

// open opens an empty replica of data group g, which its leader adds.
func (h *Host) open(g int) error {
	c := h.groupConfig(g, nil)
	// Whatever a replica closed before left there is of no use: the
	// group's leader sends what it holds.
	if err := os.RemoveAll(c.Dir); err != nil {
		return err
	}
	nd, err := Open(c)
	if err != nil {
		return err
	}
	h.groups[g].Store(nd)
	h.data.hosts = append(h.data.hosts, g)
	slices.Sort(h.data.hosts)
	if err := h.data.write(h.cfg.Dir); err != nil {
		h.cfg.Log.Error().Err(err).Msg("cluster: could not record the data groups this node hosts")
	}
	h.cfg.Log.Info().Int("group", g).Msg("cluster: opened a replica of a data group the placement gives this node")
	h.startServing(g, nd)
	return nil
}

// closeReplica closes this node's replica of data group g, once what
// Serve runs for it has returned, and removes its stores.
func (h *Host) closeReplica(g int) {
	h.stopServing(g)
	nd := h.groups[g].Swap(nil)
	h.data.hosts = slices.DeleteFunc(h.data.hosts, func(x int) bool { return x == g })
	if err := h.data.write(h.cfg.Dir); err != nil {
		h.cfg.Log.Error().Err(err).Msg("cluster: could not record the data groups this node hosts")
	}
	if err := nd.Close(); err != nil {
		h.cfg.Log.Warn().Err(err).Int("group", g).Msg("cluster: closing a replica of a data group")
	}
	if err := os.RemoveAll(nd.cfg.Dir); err != nil {
		h.cfg.Log.Warn().Err(err).Int("group", g).Msg("cluster: removing a closed replica's stores")
	}
	h.cfg.Log.Info().Int("group", g).Msg("cluster: closed a replica of a data group the placement moved to another node")
}

// AddNode adds a node to group 0 (Node.Add); with replicas, the
// placement then gives it its share of the replicas once it is a voter,
// and a node being drained is drained no more. Group 0's leader only.
func (h *Host) AddNode(id, raftAddr string) (string, error) {
	zero := h.Group(0)
	if h.replicas == 0 || len(h.groups) == 1 {
		return zero.Add(id, raftAddr)
	}
	if zero.Raft.State() != raft.Leader {
		return "", zero.errFollower()
	}
	p, ok := zero.FSM.placement()
	if !ok {
		return "", errUnplaced
	}
	if slices.Contains(p.Drain, id) {
		p.Drain = slices.DeleteFunc(slices.Clone(p.Drain), func(x string) bool { return x == id })
		if !h.write(p, "cluster: "+id+" is added again: it is drained no more") {
			return "", fmt.Errorf("could not withdraw the removal of %s", id)
		}
	}
	msg, err := zero.Add(id, raftAddr)
	if err == nil {
		msg += "; then it takes its share of the data groups' replicas, one group at a time"
	}
	return msg, err
}

// RemoveNode removes a node from group 0 (Node.Remove); with replicas, it
// drains it first: its replicas move to the other nodes, and group 0's
// leader removes it once it hosts none (balance). A removal that would
// leave fewer nodes than each group's replicas is refused. Group 0's
// leader only.
func (h *Host) RemoveNode(id string) (string, error) {
	zero := h.Group(0)
	if h.replicas == 0 || len(h.groups) == 1 {
		return zero.Remove(id)
	}
	if zero.Raft.State() != raft.Leader {
		return "", zero.errFollower()
	}
	p, ok := zero.FSM.placement()
	if !ok {
		return "", errUnplaced
	}
	f := zero.Raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return "", err
	}
	member, left := false, 0
	for _, s := range f.Configuration().Servers {
		member = member || string(s.ID) == id
		if s.Suffrage == raft.Voter && string(s.ID) != id && !slices.Contains(p.Drain, string(s.ID)) {
			left++
		}
	}
	switch {
	case !member:
		return "", fmt.Errorf("%s is not a member of the group", id)
	case left < h.replicas:
		return "", fmt.Errorf("removing %s would leave %d nodes, fewer than the %d each data group runs on (--replicas)", id, left, h.replicas)
	case slices.Contains(p.Drain, id):
		return fmt.Sprintf("%s is being removed already: its replicas move to the other nodes, then it leaves the group", id), nil
	case p.hosts()[id] == 0:
		return zero.Remove(id) // it hosts no replica: nothing to move
	}
	p.Drain = append(slices.Clone(p.Drain), id)
	if !h.write(p, "cluster: draining "+id+": its replicas move to the other nodes, then it is removed") {
		return "", fmt.Errorf("could not record the removal of %s", id)
	}
	return fmt.Sprintf("%s hosts %d data groups' replicas: they move to the other nodes, one group at a time; then it is removed from the group and exits", id, p.hosts()[id]), nil
}
