package cluster

import (
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
)

// hostGroups opens, on each of n raft ports on loopback, a host of
// groups groups (group 0 and data groups 1 to groups-1): every group's raft
// shares its node's port with the others. With ca, the links are mutual
// TLS. It returns once the groups' leaders are spread (spread), so that
// no transfer of a lead comes under a test's feet; gs[g] are the replicas
// of group g.
func hostGroups(t testing.TB, n, groups int, ca *testCA) (ports []*linkLayer, gs [][]*Node) {
	c := newHostCluster(t, n, groups, ca)
	c.spread()
	for g := range groups {
		var nodes []*Node
		for _, h := range c.hosts {
			nodes = append(nodes, h.Groups[g])
		}
		gs = append(gs, nodes)
	}
	return c.ports, gs
}

func TestGroupsSharingARaftPortKeepTheirEntriesApart(t *testing.T) {
	for name, ca := range map[string]*testCA{"plaintext": nil, "mutual TLS": newTestCA(t)} {
		t.Run(name, func(t *testing.T) {
			const groups = 3
			_, gs := hostGroups(t, 3, groups, ca)
			for i, nodes := range gs {
				g := &group{t: t, nodes: nodes}
				leader, jl := g.leader()
				a := newAcks(2)
				for k := range 2 {
					if err := jl.Put(job(uint64(100*(i+1)+k)), a.ack(k)); err != nil {
						t.Fatal(err)
					}
				}
				a.wait(t)
				jobs, maxID := g.converged(leader)
				if len(jobs) != 2 || maxID != uint64(100*(i+1)+1) {
					t.Fatalf("group %d: %d jobs, highest id %d on every node; want its own 2, highest %d", i, len(jobs), maxID, 100*(i+1)+1)
				}
			}
			// Each group's entries stayed in it: a group applied only
			// what its own leader appended.
			for i, nodes := range gs {
				for _, nd := range nodes {
					jobs, _ := nd.FSM.State()
					for _, j := range jobs {
						if j.ID/100 != uint64(i+1) {
							t.Fatalf("group %d holds job %d of another group", i, j.ID)
						}
					}
				}
			}
		})
	}
}

// plainPort is a plaintext raft port on loopback whose greeting lasts
// 300 ms, with group 0 on it.
func plainPort(t *testing.T) (net.Listener, *linkLayer, *groupLayer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newLinkLayer(ln, nil, func() []string { return nil }, 300*time.Millisecond)
	t.Cleanup(func() { l.Close() })
	g0, err := l.group(0)
	if err != nil {
		t.Fatal(err)
	}
	return ln, l, g0
}

func TestRaftPortClosesLinksForGroupsItDoesNotHost(t *testing.T) {
	ln, l, g0 := plainPort(t)
	g7, err := l.group(7)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.group(7); err == nil {
		t.Fatal("a group was put on the port twice")
	}
	closed := func(hello []byte) {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(hello)
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatalf("a link greeted %q was sent something", hello)
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("a link greeted %q was still open after 30 s", hello)
		}
	}
	closed([]byte{groupMagic, 0, 8}) // a group the node does not host
	closed([]byte{groupMagic, 0})    // a preamble cut short, then silence
	if got := l.refused.Load(); got != 2 {
		t.Fatalf("%d links refused, want 2", got)
	}
	g8Gone, err := l.group(8)
	if err != nil {
		t.Fatal(err)
	}
	g8Gone.Close()
	closed([]byte{groupMagic, 0, 8}) // a group taken off the port

	// Each hosted group gets its own links, and sees only what follows
	// the preamble.
	for _, tc := range []struct {
		g     *groupLayer
		hello []byte
	}{{g7, []byte{groupMagic, 0, 7, 'h', 'i'}}, {g0, []byte("hi")}} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		handsOver(t, tc.g, c, tc.hello, "hi")
	}
	// A group's dialled links begin with its preamble.
	c, err := g7.Dial(raft.ServerAddress(ln.Addr().String()), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	handsOver(t, g7, c, []byte("ok"), "ok")
}

// handsOver sends hello on c and checks that g's raft accepts the link and
// reads want from it.
func handsOver(t *testing.T, g *groupLayer, c net.Conn, hello []byte, want string) {
	t.Helper()
	defer c.Close()
	c.Write(hello)
	got, err := g.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	b := make([]byte, len(want))
	if _, err := io.ReadFull(got, b); err != nil || string(b) != want {
		t.Fatalf("group %d's raft read %q, %v; want %q", g.id, b, err, want)
	}
}

// A node that hosts one group and speaks hashicorp/raft's plain TCP
// transport, as a node without the port's groups does, is a member of
// group 0 beside nodes whose port carries other groups too.
func TestNodesOfOneGroupAndOfManySpeakOverGroupZero(t *testing.T) {
	var members []Member
	var ports []*linkLayer
	for i := range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, newLinkLayer(ln, nil, func() []string { return nil }, linkGreeting))
		members = append(members, Member{ID: fmt.Sprintf("n%d", i+1), Raft: ln.Addr().String()})
	}
	plainAddr := freeAddrs(t, 1)[0]
	plain, err := raft.NewTCPTransport(plainAddr, nil, 3, 10*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	members = append(members, Member{ID: "n3", Raft: plainAddr})
	g := &group{t: t}
	t.Cleanup(func() {
		for _, nd := range g.nodes {
			nd.Close()
		}
		for _, p := range ports {
			p.Close()
		}
	})
	for i, m := range members {
		cfg := Config{ID: m.ID, Dir: t.TempDir(), Raft: m.Raft, Bootstrap: members, Log: zerolog.Nop()}
		if i < len(ports) {
			cfg.links = ports[i]
			// A second group on the port, with no members elsewhere.
			if _, err := ports[i].group(5); err != nil {
				t.Fatal(err)
			}
		} else {
			cfg.Transport = plain
		}
		nd, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		g.nodes = append(g.nodes, nd)
	}
	g.replicates()
}
