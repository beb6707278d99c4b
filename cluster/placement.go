package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/beanpole/beanpole/record"
)

// GroupMembers are the members of data group g (1 to n) in a cluster
// bootstrapped with members, each data group on replicas of them (0, or
// as many as there are members: every member hosts every group). The
// members are taken in the order of their ids, group g's from the
// (g-1)th on, wrapping around: group g's first member is the one it
// prefers as its leader (handOff), so every member is preferred by as many
// groups as any other, give or take one; with a multiple of the members'
// number of groups, every member hosts as many as any other.
func GroupMembers(members []Member, g, replicas int) []Member {
	sorted := slices.Clone(members)
	slices.SortFunc(sorted, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	if replicas <= 0 || replicas >= len(sorted) {
		replicas = len(sorted)
	}
	out := make([]Member, 0, replicas)
	for k := range replicas {
		out = append(out, sorted[(g-1+k)%len(sorted)])
	}
	return out
}

// groupsFile, in a node's directory, holds the number of data groups, then
// with --replicas a line "replicas R" and a line "hosts G...", the data
// groups this node hosts a replica of. The numbers are fixed when the
// directory is made, since the tubes' places and the jobs' ids depend on
// them; the groups hosted change as group 0's placement moves replicas
// (Host.place).
const groupsFile = "data-groups"

// dataGroups is what groupsFile records.
type dataGroups struct {
	n, replicas int
	hosts       []int // the data groups this node hosts, in order
}

// checkGroups holds a node to the data groups (and replicas) its
// directory was made with; a node's first start makes the record, its
// groups those GroupMembers gives it among boot (none for a node boot does
// not name: one that joins hosts the groups the placement gives it).
func checkGroups(dir string, data, replicas int, id string, boot []Member) (dataGroups, error) {
	want := dataGroups{n: data, replicas: replicas}
	p := filepath.Join(dir, groupsFile)
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		had, err := parseGroups(string(b))
		if err != nil {
			return had, fmt.Errorf("cluster: %s: %w", p, err)
		}
		if had.n != data {
			return had, fmt.Errorf("cluster: %s was made with --groups %d, not %d: the number of groups is fixed when a node's directory is made", dir, had.n, data)
		}
		if had.replicas != replicas {
			return had, fmt.Errorf("cluster: %s was made with --replicas %d, not %d: the groups' members are fixed when a node's directory is made", dir, had.replicas, replicas)
		}
		return had, nil
	case !errors.Is(err, os.ErrNotExist):
		return want, fmt.Errorf("cluster: %w", err)
	case data == 0:
		if replicas != 0 {
			return want, errors.New("cluster: --replicas goes with --groups")
		}
		return want, nil
	}
	if _, err := os.Stat(filepath.Join(dir, "wal")); err == nil {
		return want, fmt.Errorf("cluster: %s holds a group without data groups: --groups is given on a node's first start", dir)
	}
	for g := 1; g <= data; g++ {
		if replicas == 0 || bootstrapped(boot, g, replicas, id) {
			want.hosts = append(want.hosts, g)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return want, fmt.Errorf("cluster: %w", err)
	}
	return want, want.write(dir)
}

// bootstrapped says whether node id is among the members boot places data
// group g on.
func bootstrapped(boot []Member, g, replicas int, id string) bool {
	return slices.ContainsFunc(boot, func(m Member) bool { return m.ID == id }) &&
		slices.ContainsFunc(GroupMembers(boot, g, replicas), func(m Member) bool { return m.ID == id })
}

// write records d in dir's groupsFile, whole or not at all.
func (d dataGroups) write(dir string) error {
	p := filepath.Join(dir, groupsFile)
	if err := os.WriteFile(p+".new", []byte(d.String()), 0o600); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if err := os.Rename(p+".new", p); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}

func (d dataGroups) String() string {
	s := strconv.Itoa(d.n) + "\n"
	if d.replicas == 0 {
		return s
	}
	s += "replicas " + strconv.Itoa(d.replicas) + "\nhosts"
	for _, g := range d.hosts {
		s += " " + strconv.Itoa(g)
	}
	return s + "\n"
}

// parseGroups reads groupsFile: a record without replicas is of a node
// that hosts every group.
func parseGroups(s string) (dataGroups, error) {
	var d dataGroups
	lines := strings.Split(strings.TrimSpace(s), "\n")
	n, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil || n < 0 || n > maxGroup {
		return d, fmt.Errorf("%q is not a number of data groups", lines[0])
	}
	d.n = n
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		switch {
		case len(f) == 2 && f[0] == "replicas":
			if d.replicas, err = strconv.Atoi(f[1]); err != nil || d.replicas < 1 {
				return d, fmt.Errorf("%q is not a number of replicas", l)
			}
		case len(f) >= 1 && f[0] == "hosts":
			for _, v := range f[1:] {
				g, err := strconv.Atoi(v)
				if err != nil || g < 1 || g > n || len(d.hosts) > 0 && g <= d.hosts[len(d.hosts)-1] {
					return d, fmt.Errorf("%q does not list data groups in order", l)
				}
				d.hosts = append(d.hosts, g)
			}
		default:
			return d, fmt.Errorf("%q is not a line of the record", l)
		}
	}
	if d.replicas == 0 {
		d.hosts = nil
		for g := 1; g <= n; g++ {
			d.hosts = append(d.hosts, g)
		}
	}
	return d, nil
}

// placement is where each data group's replicas live, as group 0 records
// it (entryPlacement) once its leader first writes it: groups[g-1] are
// data group g's members (preferred gives its preferred leader). drain
// are the nodes asked to leave (Host.RemoveNode): their replicas move to
// the others, then group 0's leader removes them.
type placement struct {
	Groups [][]string `json:"g"`
	Drain  []string   `json:"d,omitempty"`
}

// placementEntry is group 0's entry recording p.
func placementEntry(p placement) []byte {
	b, _ := json.Marshal(p) // strings and slices of them
	return append([]byte{entryPlacement}, b...)
}

// parsePlacement reads a placement entry's payload, checked as any entry:
// at most maxGroup groups, each of ids no longer than maxIDBytes, none
// empty or twice in a group.
func parsePlacement(b []byte) (placement, error) {
	var p placement
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("%w: a placement that is not one: %v", record.ErrBad, err)
	}
	if len(p.Groups) > maxGroup {
		return p, fmt.Errorf("%w: a placement of %d groups", record.ErrBad, len(p.Groups))
	}
	for _, ids := range append(slices.Clone(p.Groups), p.Drain) {
		for i, id := range ids {
			if id == "" || len(id) > maxIDBytes || slices.Contains(ids[:i], id) {
				return p, fmt.Errorf("%w: a placement naming the id %.64q", record.ErrBad, id)
			}
		}
	}
	return p, nil
}

// hosts are how many data groups p places on each node.
func (p placement) hosts() map[string]int {
	n := map[string]int{}
	for _, ids := range p.Groups {
		for _, id := range ids {
			n[id]++
		}
	}
	return n
}

// move is one step of the placement: data group g's replica on from goes
// to to.
type move struct {
	g        int
	from, to string
}

// apply is p with m made.
func (p placement) apply(m move) placement {
	out := placement{Groups: make([][]string, len(p.Groups)), Drain: slices.Clone(p.Drain)}
	for i, ids := range p.Groups {
		out.Groups[i] = slices.Clone(ids)
	}
	ids := out.Groups[m.g-1]
	ids[slices.Index(ids, m.from)] = m.to
	return out
}

// nextMove is the next step towards a balanced placement of p over nodes
// (group 0's voters), one replica at a time, each to a node ready may take
// replicas (the caller's test: reachable and caught up in group 0), never
// to one being drained nor to a member of the group already:
//   - a replica on a node that is drained or no voter of group 0 goes to
//     the node that hosts the fewest groups;
//   - else, while a node hosts at least two groups more than another that
//     may take one, one of its replicas goes to the one that hosts the
//     fewest.
//
// So a placement ends with every node but the drained hosting
// floor(N·R/nodes) or ceil(N·R/nodes) groups. ok is false when nothing is
// to move, or nothing can yet.
func nextMove(p placement, nodes []string, ready func(id string) bool) (m move, ok bool) {
	load := p.hosts()
	staying := func(id string) bool { return slices.Contains(nodes, id) && !slices.Contains(p.Drain, id) }
	var stay []string
	for _, id := range slices.Sorted(slices.Values(nodes)) {
		if staying(id) {
			stay = append(stay, id)
		}
	}
	// least is the node of stay, ready, hosting the fewest groups and not
	// g (0: any), first in the order of the ids among equals.
	least := func(g int) string {
		to := ""
		for _, id := range stay {
			if ready(id) && (g == 0 || !slices.Contains(p.Groups[g-1], id)) && (to == "" || load[id] < load[to]) {
				to = id
			}
		}
		return to
	}
	for g, ids := range p.Groups {
		for _, id := range ids {
			if !staying(id) {
				if to := least(g + 1); to != "" {
					return move{g: g + 1, from: id, to: to}, true
				}
			}
		}
	}
	to := least(0)
	from := ""
	for _, id := range stay {
		if from == "" || load[id] > load[from] {
			from = id
		}
	}
	if to == "" || from == "" || load[from] < load[to]+2 {
		return move{}, false
	}
	for g, ids := range p.Groups {
		if slices.Contains(ids, from) && !slices.Contains(ids, to) {
			return move{g: g + 1, from: from, to: to}, true
		}
	}
	return move{}, false // from hosts more groups than to: never here
}

// preferred is each data group's preferred leader under p (index g-1),
// which the host hands the group's lead to (handOff): each group's
// member that is so of the fewest groups before it, the first among
// equals, then, while a node is preferred by two groups more than another
// member of one of them, that group goes to the other. So a placement
// GroupMembers made keeps its first members, and the nodes a placement
// moved replicas to are given their share of the leads.
func preferred(p placement) []string {
	out := make([]string, len(p.Groups))
	n := map[string]int{}
	for g, ids := range p.Groups {
		for _, id := range ids {
			if out[g] == "" || n[id] < n[out[g]] {
				out[g] = id
			}
		}
		n[out[g]]++
	}
	for moved := true; moved; {
		moved = false
		for g, ids := range p.Groups {
			for _, id := range ids {
				if n[out[g]] >= n[id]+2 {
					n[out[g]]--
					n[id]++
					out[g], moved = id, true
				}
			}
		}
	}
	return out
}
