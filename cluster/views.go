package cluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// With --replicas, a node hosts only some of the data groups, yet its
// router sends commands to every group's leader. Each node learns where
// the leaders of the groups it does not host serve from the nodes that
// host them: it keeps a link to every other member of group 0 on the raft
// port (link id viewsLink, so the same mutual TLS and node check), over
// which that node reports, for each group it hosts, the leader its
// replica knows of, in which term, and where that leader serves. A report
// is sent when it changes, and at least every viewsBeat; a link silent for
// viewsTimeout is closed and dialled again. Of the reports for a group,
// the one of the highest term wins: a member cut off from its group
// reports an older term than the members that elected a new leader.
const (
	viewsLink    = maxGroup
	viewsEvery   = 50 * time.Millisecond
	viewsBeat    = time.Second
	viewsTimeout = 3 * viewsBeat
	viewsRetry   = 200 * time.Millisecond
	// viewsMax bounds a report: an entry of under 256 bytes for each of
	// at most config's 256 data groups.
	viewsMax = 64 << 10
)

// view is one group's leader as a node that hosts the group sees it.
type view struct {
	G      int    `json:"g"`
	Term   uint64 `json:"t"`
	Leader string `json:"l,omitempty"` // its id, "" while none is known
	Addr   string `json:"a,omitempty"` // where it serves (ServingAddr)
}

// views are the reports of the other nodes, by their raft address, and
// this node's own.
type views struct {
	h     *Host
	layer *groupLayer
	mu    sync.Mutex
	peers map[string][]view
	conns map[net.Conn]struct{}
	// report is this node's report as last made (publish), and changed is
	// closed when the next one differs.
	report  []byte
	changed chan struct{}
	stop    chan struct{}
	wg      sync.WaitGroup
}

// openViews serves this node's reports on the raft port and reads those
// of the other members of group 0.
func openViews(h *Host) (*views, error) {
	zero := h.Groups[0]
	layer, err := zero.links.group(viewsLink)
	if err != nil {
		return nil, err
	}
	v := &views{h: h, layer: layer, peers: map[string][]view{}, conns: map[net.Conn]struct{}{}, changed: make(chan struct{}),
		stop: make(chan struct{})}
	v.publish()
	v.wg.Add(2)
	go v.accept()
	go func() {
		defer v.wg.Done()
		t := time.NewTicker(viewsEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				v.publish()
			case <-v.stop:
				return
			}
		}
	}()
	if f := zero.Raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if string(s.ID) != zero.cfg.ID {
				v.wg.Add(1)
				go v.watch(s.Address)
			}
		}
	}
	return v, nil
}

// close stops the links, both ways. The links are closed outside v.mu:
// closing one takes the raft port's lock.
func (v *views) close() {
	v.mu.Lock()
	close(v.stop)
	conns := make([]net.Conn, 0, len(v.conns))
	for c := range v.conns {
		conns = append(conns, c)
	}
	v.mu.Unlock()
	v.layer.Close()
	for _, c := range conns {
		c.Close()
	}
	v.wg.Wait()
}

// track adds c to the links close closes; false (c closed) once closing.
func (v *views) track(c net.Conn) bool {
	v.mu.Lock()
	select {
	case <-v.stop:
		v.mu.Unlock()
		c.Close()
		return false
	default:
	}
	v.conns[c] = struct{}{}
	v.mu.Unlock()
	return true
}

func (v *views) untrack(c net.Conn) {
	v.mu.Lock()
	delete(v.conns, c)
	v.mu.Unlock()
	c.Close()
}

func (v *views) accept() {
	defer v.wg.Done()
	for {
		c, err := v.layer.Accept()
		if err != nil {
			return
		}
		if v.track(c) {
			v.wg.Add(1)
			go v.serve(c)
		}
	}
}

// own is this node's report: the groups it hosts.
func (v *views) own() []view {
	var out []view
	for g, nd := range v.h.Groups {
		if g == 0 || nd == nil {
			continue
		}
		id, addr := v.h.Leader(g)
		out = append(out, view{G: g, Term: nd.Raft.CurrentTerm(), Leader: id, Addr: addr})
	}
	return out
}

// publish makes this node's report, once for every link that carries it.
func (v *views) publish() {
	b, err := json.Marshal(v.own())
	if err != nil {
		return
	}
	b = append(b, '\n')
	v.mu.Lock()
	defer v.mu.Unlock()
	if !bytes.Equal(b, v.report) {
		v.report = b
		close(v.changed)
		v.changed = make(chan struct{})
	}
}

// serve sends this node's report over c at once, then whenever it changes
// and at least every viewsBeat, until c fails or the views close.
func (v *views) serve(c net.Conn) {
	defer v.wg.Done()
	defer v.untrack(c)
	beat := time.NewTimer(viewsBeat)
	defer beat.Stop()
	for {
		v.mu.Lock()
		report, changed := v.report, v.changed
		v.mu.Unlock()
		_ = c.SetWriteDeadline(time.Now().Add(viewsTimeout))
		if _, err := c.Write(report); err != nil {
			return
		}
		beat.Reset(viewsBeat)
		select {
		case <-changed:
		case <-beat.C:
		case <-v.stop:
			return
		}
	}
}

// watch keeps a link to the node at addr and its last report, dialling
// again after a failure, until the views close.
func (v *views) watch(addr raft.ServerAddress) {
	defer v.wg.Done()
	for {
		if c, err := v.layer.Dial(addr, viewsTimeout); err == nil && v.track(c) {
			v.read(string(addr), c)
			v.untrack(c)
		}
		v.mu.Lock()
		delete(v.peers, string(addr))
		v.mu.Unlock()
		select {
		case <-v.stop:
			return
		case <-time.After(viewsRetry):
		}
	}
}

// read takes the reports of the node at addr from c until c fails, is
// silent for viewsTimeout, or sends what is not a report.
func (v *views) read(addr string, c net.Conn) {
	r := bufio.NewReaderSize(c, viewsMax)
	for {
		_ = c.SetReadDeadline(time.Now().Add(viewsTimeout))
		line, err := r.ReadSlice('\n')
		if err != nil {
			return
		}
		var report []view
		if json.Unmarshal(line, &report) != nil {
			return
		}
		v.mu.Lock()
		v.peers[addr] = report
		v.mu.Unlock()
	}
}

// leader is group g's leader and where it serves, as the reports of the
// highest term give them ("" while no report names one).
func (v *views) leader(g int) (id, addr string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var best view
	for _, report := range v.peers {
		for _, w := range report {
			if w.G == g && w.Leader != "" && (w.Term > best.Term || w.Term == best.Term && best.Addr == "" && w.Addr != "") {
				best = w
			}
		}
	}
	return best.Leader, best.Addr
}
