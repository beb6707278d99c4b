package e2e

import (
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/beanpole/beanpole/record"
)

// A stranger on the raft port: hashicorp/raft's own NetworkTransport,
// used as a client, speaks the nodes' wire format (msgpack RPCs), so the
// RPCs it sends are exactly what a node would send, forged.

// raftRPCTimeout bounds each forged RPC: a node answers one at once, so a
// node that lets the time pass has not answered.
const raftRPCTimeout = 5 * time.Second

// raftPeer is the stranger: its transport and the address it names as
// its own (its listener, where a node that believed it would reach it).
type raftPeer struct {
	trans *raft.NetworkTransport
	addr  string
}

// peerLayer is the stranger's stream layer: it dials in plaintext, or over
// TLS with the certificate cfg carries.
type peerLayer struct {
	net.Listener
	cfg *tls.Config // nil: plaintext
}

func (l *peerLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if l.cfg == nil {
		return d.Dial("tcp", string(addr))
	}
	return tls.DialWithDialer(d, "tcp", string(addr), l.cfg)
}

// newRaftPeer is a stranger speaking raft in plaintext (cfg nil) or over
// TLS with cfg. It pools no connection: every RPC dials afresh.
func newRaftPeer(t *testing.T, cfg *tls.Config) *raftPeer {
	t.Helper()
	ln, err := listenFresh()
	if err != nil {
		t.Fatal(err)
	}
	p := &raftPeer{trans: raft.NewNetworkTransport(&peerLayer{Listener: ln, cfg: cfg}, 0, raftRPCTimeout, io.Discard),
		addr: ln.Addr().String()}
	t.Cleanup(func() { p.trans.Close() })
	return p
}

// header names the stranger as node id, at its own address.
func (p *raftPeer) header(id string) raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id), Addr: []byte(p.addr)}
}

// appendEntries sends one AppendEntries to the raft address target.
func (p *raftPeer) appendEntries(target string, req *raft.AppendEntriesRequest) (*raft.AppendEntriesResponse, error) {
	var resp raft.AppendEntriesResponse
	err := p.trans.AppendEntries("", raft.ServerAddress(target), req, &resp)
	return &resp, err
}

// forgeVote asks the node at target, in term, for its vote for member as,
// with LeadershipTransfer set (as a leader handing over its lead does), so
// that a node that has a leader, or leads, grants it all the same; the
// stranger's log claims to be longer than any.
func (p *raftPeer) forgeVote(target, as string, term uint64) (*raft.RequestVoteResponse, error) {
	var resp raft.RequestVoteResponse
	err := p.trans.RequestVote("", raft.ServerAddress(target), &raft.RequestVoteRequest{RPCHeader: p.header(as), Term: term,
		LastLogIndex: 1 << 40, LastLogTerm: term, LeadershipTransfer: true}, &resp)
	return &resp, err
}

// forgeEntry makes the node at target take data as the entry after the
// last of its log, committed, in term, from the stranger as leader "evil":
// a heartbeat learns the last index of its log (and makes the stranger its
// leader), then one AppendEntries carries the entry and a commit index
// that covers it, so that the node applies it at once. When the heartbeat
// gets no answer, the entry goes after index last (the caller's guess)
// all the same. It returns the heartbeat's error and the second RPC's
// answer.
func (p *raftPeer) forgeEntry(target string, term, last uint64, data []byte) (hbErr error, resp *raft.AppendEntriesResponse, err error) {
	hb, hbErr := p.appendEntries(target, &raft.AppendEntriesRequest{RPCHeader: p.header("evil"), Term: term})
	if hbErr == nil {
		last = hb.LastLog
	}
	resp, err = p.appendEntries(target, &raft.AppendEntriesRequest{RPCHeader: p.header("evil"), Term: term,
		Entries: []*raft.Log{{Index: last + 1, Term: term, Type: raft.LogCommand, Data: data}}, LeaderCommitIndex: last + 1})
	return hbErr, resp, err
}

// forgedPut is a raft entry in beanpole's format (cluster/fsm.go,
// cluster/batch.go): the type byte of records (1), then each record framed
// by its little-endian u32 length; here one full record (record/) that
// puts job id, ready, with body (CRLF included, as the engine keeps it) in
// tube default. skew is added to the frame's length field: 0 frames the
// record exactly; -2 makes the field and the record disagree (the record
// read by the field lacks its body's CRLF, and two bytes trail it).
func forgedPut(id uint64, body string, skew int) []byte {
	rec := record.AppendFull(nil, &record.Job{ID: id, Tube: "default", State: record.StateReady, TTR: time.Minute,
		CreatedAt: time.Now().UnixNano(), Body: []byte(body)})
	entry := []byte{1}
	entry = binary.LittleEndian.AppendUint32(entry, uint32(len(rec)+skew))
	return append(entry, rec...)
}

// getCluster is one GET /cluster of nd, with the group's token or
// without: its status code and body.
func (tc *testCluster) getCluster(nd *clusterNode, withToken bool) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+nd.http+"/cluster", nil)
	if err != nil {
		return 0, "", err
	}
	if withToken {
		req.Header.Set("Authorization", "Bearer "+tc.secret())
	}
	resp, err := (&http.Client{Timeout: defaultTimeout}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// fullStatus is nd's GET /cluster with the token, once it answers; it
// fails the test at once if nd's process has exited.
func (tc *testCluster) fullStatus(nd *clusterNode) clusterStatus {
	tc.t.Helper()
	var st clusterStatus
	waitFor(tc.t, 30*time.Second, "GET /cluster with the token on "+nd.id, func() bool {
		if exited(nd.srv) {
			tc.t.Fatalf("%s exited (%v)", nd.id, nd.srv.waitErr)
		}
		code, body, err := tc.getCluster(nd, true)
		if err != nil || code != http.StatusOK {
			return false
		}
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			tc.t.Fatalf("GET /cluster on %s: %v: %s", nd.id, err, body)
		}
		return true
	})
	return st
}

// leaderAbove waits until a node says, with the token, that it leads in a
// term above term, and returns it and its term. Every node but those
// excluded must stay up meanwhile: one that exits fails the test.
func (tc *testCluster) leaderAbove(term uint64, excluded ...*clusterNode) (*clusterNode, uint64) {
	tc.t.Helper()
	var found *clusterNode
	var at uint64
	waitFor(tc.t, 30*time.Second, fmt.Sprintf("a leader in a term above %d", term), func() bool {
		found = nil
		for _, nd := range tc.nodes {
			if nd.srv == nil || containsNode(excluded, nd) {
				continue
			}
			if st := tc.fullStatus(nd); st.State == "leader" && st.Term > term {
				found, at = nd, st.Term
			}
		}
		return found != nil
	})
	return found, at
}

// peekEverywhere sends `peek id` through the client port of every node
// but those excluded and expects want (the whole reply).
func (tc *testCluster) peekEverywhere(id uint64, want string, excluded ...*clusterNode) {
	tc.t.Helper()
	for _, nd := range tc.nodes {
		if containsNode(excluded, nd) {
			continue
		}
		cmd := fmt.Sprintf("peek %d\r\n", id)
		var got string
		waitFor(tc.t, 30*time.Second, "an answer to "+strings.TrimSpace(cmd)+" through "+nd.id, func() bool {
			got = try(nd.srv.addr, cmd, 5*time.Second)
			return got != ""
		})
		if got != want {
			tc.t.Fatalf("%s through %s:%s", strings.TrimSpace(cmd), nd.id, diffMsg(want, got))
		}
	}
}
