package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
// groups this node is a member of: fixed when the directory is made, since
// the tubes' places, the jobs' ids and the groups' members depend on them.
const groupsFile = "data-groups"

// dataGroups is what groupsFile records.
type dataGroups struct {
	n, replicas int
	hosts       []int // the data groups this node hosts, in order
}

// checkGroups holds a node to the data groups (and replicas) its
// directory was made with; a node's first start makes the record, its
// groups those GroupMembers gives it among boot.
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
	if replicas > 0 && !slices.ContainsFunc(boot, func(m Member) bool { return m.ID == id }) {
		return want, fmt.Errorf("cluster: node %q is not among --bootstrap's members, which --replicas places the groups on", id)
	}
	for g := 1; g <= data; g++ {
		if replicas == 0 || slices.ContainsFunc(GroupMembers(boot, g, replicas), func(m Member) bool { return m.ID == id }) {
			want.hosts = append(want.hosts, g)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return want, fmt.Errorf("cluster: %w", err)
	}
	return want, os.WriteFile(p, []byte(want.String()), 0o600)
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
