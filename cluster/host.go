package cluster

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
)

// Host is a node with the raft groups it hosts, all on one raft port:
// group 0, the group every cluster has, and data groups 1 to n beside it
// (docs/cluster.md, "Many groups"). Every member hosts group 0, and every
// data group or, with replicas, those GroupMembers gives it; it learns
// where the leaders of the others serve from the nodes that host them
// (views.go).
//
// A host spreads the data groups' leaders over the members (group 0's
// with no data groups): a node hands a group to the member it prefers as
// its leader, or, when it leads at least two more than a member of one of
// those groups that leads the fewest, to that member (handOff), one
// transfer at a time. The rule holds
// no state of its own, so it goes on whatever happens between two looks:
// a node that dies leaves its groups to elections, and the nodes that won
// them give some back once it is up and caught up again.
//
// Without replicas, each data group's leader makes the group's members
// follow group 0's (follow), so a node added to or removed from group 0
// joins or leaves every group, and the spreading, which reads group 0's
// voters at each look, gives a joined node its share of the leads.
type Host struct {
	// Groups[g] is this node's replica of group g, nil for a data group
	// it does not host.
	Groups []*Node
	views  *views // nil without data groups
	// replicas is each data group's number of members (GroupMembers).
	replicas int
	stop     chan struct{}
	done     chan struct{}
}

// Leader is group g's leader and where it serves, "" while none is known:
// as this node's replica of the group knows them, or for a group this
// node does not host, as the nodes that host it report.
func (h *Host) Leader(g int) (id, addr string) {
	if nd := h.Groups[g]; nd != nil {
		_, l := nd.Raft.LeaderWithID()
		return string(l), nd.ServingAddr()
	}
	return h.views.leader(g)
}

// spreadEvery is how often a host looks at how the leaders are spread: a
// few heartbeats, so that an election has settled before a look acts on
// it.
func spreadEvery(heartbeat time.Duration) time.Duration { return 2 * heartbeat }

// OpenHost opens group 0 as Open does, and the data groups 1 to data
// this node is a member of (GroupMembers: with replicas, each group on
// that many of the members) on the same raft port, group g's stores in
// the directory groups/g under cfg.Dir, bootstrapped (cfg.Bootstrap) with
// the group's members.
func OpenHost(cfg Config, data, replicas int) (*Host, error) {
	if data < 0 || data > maxGroup-1 {
		return nil, fmt.Errorf("cluster: %d data groups; a host carries 0 to %d", data, maxGroup-1)
	}
	if data > 0 && cfg.Transport != nil {
		return nil, fmt.Errorf("cluster: data groups share the raft port, which a node on its own transport does not have")
	}
	dg, err := checkGroups(cfg.Dir, data, replicas, cfg.ID, cfg.Bootstrap)
	if err != nil {
		return nil, err
	}
	zero, err := Open(cfg)
	if err != nil {
		return nil, err
	}
	h := &Host{Groups: make([]*Node, data+1), replicas: replicas, stop: make(chan struct{}), done: make(chan struct{})}
	h.Groups[0] = zero
	for _, g := range dg.hosts {
		c := cfg
		c.Dir = filepath.Join(cfg.Dir, "groups", strconv.Itoa(g))
		c.links, c.group = zero.links, uint16(g)
		c.Log = cfg.Log.With().Int("group", g).Logger()
		if len(cfg.Bootstrap) > 0 {
			c.Bootstrap = GroupMembers(cfg.Bootstrap, g, replicas)
		}
		nd, err := Open(c)
		if err != nil {
			close(h.done)
			h.Close()
			return nil, fmt.Errorf("cluster: group %d: %w", g, err)
		}
		h.Groups[g] = nd
	}
	if data > 0 {
		if h.views, err = openViews(h); err != nil {
			close(h.done)
			h.Close()
			return nil, err
		}
	}
	go h.spread(spreadEvery(zero.cfg.HeartbeatTimeout))
	return h, nil
}

// maxGroup is the highest group id a link's preamble can name.
const maxGroup = 1<<16 - 1

// Close stops the host's groups, the data groups first: group 0 holds the
// raft port they share.
func (h *Host) Close() error {
	h.quiet()
	if h.views != nil {
		h.views.close()
	}
	var err error
	for g := len(h.Groups) - 1; g >= 0; g-- {
		if h.Groups[g] == nil {
			continue
		}
		if cerr := h.Groups[g].Close(); err == nil {
			err = cerr
		}
	}
	return err
}

func (h *Host) spread(every time.Duration) {
	defer close(h.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		h.follow()
		if nd, to := h.handOff(); nd != nil {
			// A transfer that fails leaves the lead where it was (and
			// TransferLeader fences it until a new round confirms it);
			// the next look tries again.
			_ = nd.TransferLeader(to)
		}
	}
}

// handOff picks a group this node leads and the member to hand it to:
//   - the group's preferred leader, its first member (GroupMembers), if
//     that is not this node and the group's own probes find it reachable
//     and caught up (a transfer to any other would stall the group's
//     writes until it timed out);
//   - else, for a group this node is not the preferred leader of, a voter
//     of group 0 that leads the fewest groups, when that is at least two
//     fewer than this node leads, and that the probes find so (which only
//     the group's members can be).
//
// A group never leaves its preferred leader for the count, so the two
// never undo each other: while every node is up, each leads the groups it
// is the first member of, as many as any other give or take one; while
// one is down, the others share its groups. Nothing while a group has no
// known leader: an election is on, and its outcome changes the count.
func (h *Host) handOff() (*Node, string) {
	zero := h.Groups[0]
	f := zero.Raft.GetConfiguration()
	if f.Error() != nil {
		return nil, ""
	}
	leads := map[string]int{}
	var voters []Member
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			leads[string(s.ID)] = 0
			voters = append(voters, Member{ID: string(s.ID), Raft: string(s.Address)})
		}
	}
	self := zero.cfg.ID
	var mine, others []*Node
	for _, g := range h.spreadGroups() {
		id, _ := h.Leader(g)
		if id == "" {
			return nil, ""
		}
		if _, ok := leads[id]; ok {
			leads[id]++
		}
		nd := h.Groups[g]
		if nd == nil || id != self || nd.Raft.State() != raft.Leader || nd.mem.busy.Load() {
			continue
		}
		mine = append(mine, nd)
		if g == 0 {
			continue // a group of its own: nothing to spread
		}
		if to := GroupMembers(voters, g, h.replicas)[0].ID; to != self && nd.readyToLead(to) {
			return nd, to
		} else if to != self {
			others = append(others, nd)
		}
	}
	for i := len(others) - 1; i >= 0; i-- {
		nd, to := others[i], ""
		for id, n := range leads {
			if id == self || n+2 > len(mine) || !nd.readyToLead(id) {
				continue
			}
			if to == "" || n < leads[to] || n == leads[to] && id < to {
				to = id
			}
		}
		if to != "" {
			return nd, to
		}
	}
	return nil, ""
}

// follow has each data group this node leads follow group 0's members
// (Node.follow), when every member hosts every group. With replicas a
// group's members are those GroupMembers placed it on, which a change of
// group 0's members would place elsewhere: that is not carried out, and
// group 0's members do not change (the HTTP side refuses it).
func (h *Host) follow() {
	if h.replicas > 0 || len(h.Groups) == 1 {
		return
	}
	// Only a configuration that is group 0's latest here as well: a
	// replica of group 0 that has not yet applied the configurations in
	// its log (a node restarted) knows an older one committed.
	zero := h.Groups[0]
	want, f := zero.committed(), zero.Raft.GetConfiguration()
	if f.Error() != nil || !slices.Equal(f.Configuration().Servers, want) ||
		!slices.ContainsFunc(want, func(s raft.Server) bool { return s.Suffrage == raft.Voter }) {
		return
	}
	for _, nd := range h.Groups[1:] {
		if nd != nil && nd.Raft.State() == raft.Leader {
			nd.follow(want)
		}
	}
}

// AwaitLeft waits, at most wait, until no data group this node hosts
// names it in its configuration, and says whether none does: a node
// removed from group 0 stays until the data groups have removed it too
// (follow), voting and handing over the leads it holds, so that no group
// is left to elect a leader without it, which a group of two could not.
func (h *Host) AwaitLeft(wait time.Duration) bool {
	self := raft.ServerID(h.Groups[0].cfg.ID)
	t := time.NewTicker(h.Groups[0].probeEvery())
	defer t.Stop()
	deadline := time.Now().Add(wait)
	for {
		in := false
		for _, nd := range h.Groups[1:] {
			if nd == nil {
				continue
			}
			f := nd.Raft.GetConfiguration()
			in = in || f.Error() != nil || slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool { return s.ID == self })
		}
		if !in {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		<-t.C
	}
}

// spreadGroups are the groups whose leaders are spread: the data groups
// when there are any (they run the commands; group 0 holds the members
// alone then, and whoever leads it leads little), else group 0.
func (h *Host) spreadGroups() []int {
	if len(h.Groups) == 1 {
		return []int{0}
	}
	gs := make([]int, 0, len(h.Groups)-1)
	for g := 1; g < len(h.Groups); g++ {
		gs = append(gs, g)
	}
	return gs
}

// readyToLead: id is a voter of the group, and the leader's last probe of
// it answered and found it caught up.
func (n *Node) readyToLead(id string) bool {
	f := n.Raft.GetConfiguration()
	if f.Error() != nil || !slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool {
		return string(s.ID) == id && s.Suffrage == raft.Voter
	}) {
		return false
	}
	n.mem.mu.Lock()
	defer n.mem.mu.Unlock()
	h := n.mem.health[raft.ServerID(id)]
	return h != nil && h.err == nil && !h.probed.IsZero() && !h.caughtUp.IsZero()
}

// HandOver stops the host spreading the leads, and hands every group this
// node leads to another member (raft picks the most caught-up), within
// wait in all: a node about to stop does so, so that no group waits for an
// election timeout. It returns the first transfer's failure.
func (h *Host) HandOver(wait time.Duration) error {
	h.quiet()
	done := make(chan error, 1)
	go func() {
		var first error
		for _, nd := range h.Groups {
			if nd == nil || nd.Raft.State() != raft.Leader {
				continue
			}
			if err := nd.TransferLeader(""); err != nil && first == nil {
				first = fmt.Errorf("group %d: %w", nd.cfg.group, err)
			}
		}
		done <- first
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(wait):
		return fmt.Errorf("cluster: the leads were not all handed over within %v", wait)
	}
}

// quiet stops the spreading and waits until no transfer of it is on.
func (h *Host) quiet() {
	select {
	case <-h.stop:
	default:
		close(h.stop)
	}
	<-h.done
}

// GroupStatus is this node's view of one of its groups (GET
// /cluster/groups).
type GroupStatus struct {
	Group   int    `json:"group"`
	Leader  string `json:"leader"` // the leader's id, "" while there is none
	State   string `json:"state"`  // this node's: leader, follower, candidate; elsewhere: not a member
	Term    uint64 `json:"term"`
	Members int    `json:"members"`
	// Voters and Nonvoters are the ids of the group's members, as this
	// node's replica's latest configuration names them.
	Voters    []string `json:"voters,omitempty"`
	Nonvoters []string `json:"nonvoters,omitempty"`
	Jobs      int      `json:"jobs"` // in the group's replicated state on this node
	// Tubes is how many tubes hold live jobs or are paused, in the same.
	Tubes int `json:"tubes"`
	// CommitIndex and AppliedIndex are the group's raft indexes on this
	// node, as GET /cluster gives group 0's.
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
}

// Status is this node's view of every group, group 0 first: of a group
// it does not host, the leader the hosts report, and the state "elsewhere".
func (h *Host) Status() any {
	out := make([]GroupStatus, 0, len(h.Groups))
	for g, nd := range h.Groups {
		if nd == nil {
			id, _ := h.Leader(g)
			out = append(out, GroupStatus{Group: g, Leader: id, State: "elsewhere"})
			continue
		}
		_, leader := nd.Raft.LeaderWithID()
		st := GroupStatus{Group: g, Leader: string(leader), State: stateName(nd.Raft.State()), Term: nd.Raft.CurrentTerm(),
			Jobs: nd.FSM.jobCount(), Tubes: nd.FSM.tubeCount(), CommitIndex: atou(nd.Raft.Stats()["commit_index"]), AppliedIndex: nd.Raft.AppliedIndex()}
		if f := nd.Raft.GetConfiguration(); f.Error() == nil {
			for _, s := range f.Configuration().Servers {
				if s.Suffrage == raft.Voter {
					st.Voters = append(st.Voters, string(s.ID))
				} else {
					st.Nonvoters = append(st.Nonvoters, string(s.ID))
				}
			}
			st.Members = len(f.Configuration().Servers)
		}
		out = append(out, st)
	}
	return out
}
