package cluster

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// A node's raft port carries the links of every raft group it hosts. A
// link of group 0, the group a node has from its bootstrap, begins as
// hashicorp/raft's network transport begins any connection, with the type
// of its first RPC (a byte below 8), so that nodes that host one group and
// nodes that host many speak to each other over it. A link of any other
// group begins with a preamble, groupMagic and the group's id big-endian,
// which the port reads in the link's greeting (greet): the group's raft
// sees only what follows. A preamble naming a group the node does not host
// closes the link, as a failed greeting does.
const groupMagic = 0xBE

// groupLayer is one group's raft stream layer on the node's raft port.
type groupLayer struct {
	l        *linkLayer
	id       uint16
	accepted chan net.Conn
	closed   chan struct{}
	once     sync.Once
}

// group puts group id on the port: links greeted with its preamble are
// accepted by the layer it returns, and the layer's links begin with it.
func (l *linkLayer) group(id uint16) (*groupLayer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.groups[id]; ok {
		return nil, fmt.Errorf("cluster: group %d is on the raft port already", id)
	}
	g := &groupLayer{l: l, id: id, accepted: make(chan net.Conn), closed: make(chan struct{})}
	l.groups[id] = g
	return g, nil
}

// groupOf reads which group an accepted link is for: its preamble, or
// group 0 when its first byte is not groupMagic.
func (l *linkLayer) groupOf(r *bufio.Reader) (*groupLayer, error) {
	b, err := r.Peek(1)
	if err != nil {
		return nil, err
	}
	var id uint16
	if b[0] == groupMagic {
		if b, err = r.Peek(3); err != nil {
			return nil, err
		}
		id = binary.BigEndian.Uint16(b[1:])
		_, _ = r.Discard(3)
	}
	l.mu.Lock()
	g := l.groups[id]
	l.mu.Unlock()
	if g == nil {
		return nil, fmt.Errorf("cluster: a link for group %d, which this node does not host", id)
	}
	return g, nil
}

// Accept hands the group's raft its next greeted link.
func (g *groupLayer) Accept() (net.Conn, error) {
	select {
	case c := <-g.accepted:
		return c, nil
	case <-g.closed:
		return nil, net.ErrClosed
	case <-g.l.closed:
		return nil, net.ErrClosed
	}
}

// Close takes the group off the port; the port goes on serving the other
// groups until the layer is closed. Open links are raft's to close.
func (g *groupLayer) Close() error {
	g.once.Do(func() {
		g.l.mu.Lock()
		if g.l.groups[g.id] == g {
			delete(g.l.groups, g.id)
		}
		g.l.mu.Unlock()
		close(g.closed)
	})
	return nil
}

// Addr is the port's advertised address, the same for every group.
func (g *groupLayer) Addr() net.Addr { return g.l.Addr() }

// Dial opens a link of the group to a peer's raft port.
func (g *groupLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := g.l.dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	if g.id == 0 {
		return c, nil
	}
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	_, err = c.Write([]byte{groupMagic, byte(g.id >> 8), byte(g.id)})
	_ = c.SetWriteDeadline(time.Time{})
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
