package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// Host is a node with the raft groups it hosts, all on one raft port:
// group 0, the group every cluster has, and data groups 1 to n beside it
// (docs/cluster.md, "Many groups"). Every member hosts every group.
//
// A host spreads the data groups' leaders over the members (group 0's
// with no data groups): a node that leads at least two of them more than
// the member that leads the fewest hands one to that member (handOff), one
// transfer at a time. The rule holds
// no state of its own, so it goes on whatever happens between two looks:
// a node that dies leaves its groups to elections, and the nodes that won
// them give some back once it is up and caught up again.
type Host struct {
	// Groups[g] is this node's replica of group g.
	Groups []*Node
	stop   chan struct{}
	done   chan struct{}
}

// spreadEvery is how often a host looks at how the leaders are spread: a
// few heartbeats, so that an election has settled before a look acts on
// it.
func spreadEvery(heartbeat time.Duration) time.Duration { return 2 * heartbeat }

// OpenHost opens group 0 as Open does, and data groups 1 to data on the
// same raft port, group g's stores in the directory groups/g under
// cfg.Dir, bootstrapped (cfg.Bootstrap) with the same members.
func OpenHost(cfg Config, data int) (*Host, error) {
	if data < 0 || data > maxGroup {
		return nil, fmt.Errorf("cluster: %d data groups; a host carries 0 to %d", data, maxGroup)
	}
	if data > 0 && cfg.Transport != nil {
		return nil, fmt.Errorf("cluster: data groups share the raft port, which a node on its own transport does not have")
	}
	if err := checkGroups(cfg.Dir, data); err != nil {
		return nil, err
	}
	zero, err := Open(cfg)
	if err != nil {
		return nil, err
	}
	h := &Host{Groups: []*Node{zero}, stop: make(chan struct{}), done: make(chan struct{})}
	for g := 1; g <= data; g++ {
		c := cfg
		c.Dir = filepath.Join(cfg.Dir, "groups", strconv.Itoa(g))
		c.links, c.group = zero.links, uint16(g)
		nd, err := Open(c)
		if err != nil {
			close(h.done)
			h.Close()
			return nil, fmt.Errorf("cluster: group %d: %w", g, err)
		}
		h.Groups = append(h.Groups, nd)
	}
	go h.spread(spreadEvery(zero.cfg.HeartbeatTimeout))
	return h, nil
}

// groupsFile, in a node's directory, holds the number of data groups the
// node hosts: fixed when the directory is made, since the tubes' places
// and the jobs' ids depend on it.
const groupsFile = "data-groups"

// checkGroups holds a node to the data groups its directory was made with.
func checkGroups(dir string, data int) error {
	p := filepath.Join(dir, groupsFile)
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		if had, _ := strconv.Atoi(strings.TrimSpace(string(b))); had != data {
			return fmt.Errorf("cluster: %s was made with --groups %d, not %d: the number of groups is fixed when a node's directory is made", dir, had, data)
		}
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("cluster: %w", err)
	case data == 0:
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "wal")); err == nil {
		return fmt.Errorf("cluster: %s holds a group without data groups: --groups is given on a node's first start", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return os.WriteFile(p, []byte(strconv.Itoa(data)+"\n"), 0o600)
}

// maxGroup is the highest group id a link's preamble can name.
const maxGroup = 1<<16 - 1

// Close stops the host's groups, the data groups first: group 0 holds the
// raft port they share.
func (h *Host) Close() error {
	h.quiet()
	var err error
	for g := len(h.Groups) - 1; g >= 0; g-- {
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
		if nd, to := h.handOff(); nd != nil {
			// A transfer that fails leaves the lead where it was (and
			// TransferLeader fences it until a new round confirms it);
			// the next look tries again.
			_ = nd.TransferLeader(to)
		}
	}
}

// handOff picks a group this node leads and the member to hand it to: the
// voter of group 0 that leads the fewest groups, when that is at least two
// fewer than this node leads, and that the group's own probes find
// reachable and caught up (a transfer to any other would stall the
// group's writes until it timed out). Nothing while a group has no known
// leader: an election is on, and its outcome changes the count.
func (h *Host) handOff() (*Node, string) {
	zero := h.Groups[0]
	f := zero.Raft.GetConfiguration()
	if f.Error() != nil {
		return nil, ""
	}
	leads := map[string]int{}
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			leads[string(s.ID)] = 0
		}
	}
	self := zero.cfg.ID
	var mine []*Node
	for _, nd := range h.spreadGroups() {
		_, id := nd.Raft.LeaderWithID()
		if id == "" {
			return nil, ""
		}
		if _, ok := leads[string(id)]; ok {
			leads[string(id)]++
		}
		if string(id) == self && nd.Raft.State() == raft.Leader && !nd.mem.busy.Load() {
			mine = append(mine, nd)
		}
	}
	for i := len(mine) - 1; i >= 0; i-- {
		nd, to := mine[i], ""
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

// spreadGroups are the groups whose leaders are spread: the data groups
// when there are any (they run the commands; group 0 holds the members
// alone then, and whoever leads it leads little), else group 0.
func (h *Host) spreadGroups() []*Node {
	if len(h.Groups) > 1 {
		return h.Groups[1:]
	}
	return h.Groups
}

// readyToLead: the leader's last probe of member id answered and found it
// caught up.
func (n *Node) readyToLead(id string) bool {
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
			if nd.Raft.State() != raft.Leader {
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
	State   string `json:"state"`  // this node's: leader, follower, candidate
	Term    uint64 `json:"term"`
	Members int    `json:"members"`
	Jobs    int    `json:"jobs"` // in the group's replicated state on this node
	// CommitIndex and AppliedIndex are the group's raft indexes on this
	// node, as GET /cluster gives group 0's.
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
}

// Status is this node's view of every group it hosts, group 0 first.
func (h *Host) Status() any {
	out := make([]GroupStatus, 0, len(h.Groups))
	for g, nd := range h.Groups {
		_, leader := nd.Raft.LeaderWithID()
		st := GroupStatus{Group: g, Leader: string(leader), State: stateName(nd.Raft.State()), Term: nd.Raft.CurrentTerm(),
			Jobs: nd.FSM.jobCount(), CommitIndex: atou(nd.Raft.Stats()["commit_index"]), AppliedIndex: nd.Raft.AppliedIndex()}
		if f := nd.Raft.GetConfiguration(); f.Error() == nil {
			st.Members = len(f.Configuration().Servers)
		}
		out = append(out, st)
	}
	return out
}
