package e2e

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Attacks on a cluster's raft port, by a stranger that speaks raft
// (raftpeer_test.go): what it can do to a group, with link TLS and
// without, and what the group keeps from it.

// forgedID is the job a forged entry puts.
const forgedID = 424242

// clusterTLSArgs writes a node certificate that ca signs, its key and the
// CA's certificate under dir and returns the flags that give them to a
// node as the links' own (--cluster-cert, --cluster-key, --cluster-ca).
func clusterTLSArgs(t *testing.T, ca *testCA, dir, name string) []string {
	t.Helper()
	cert, key, caFile := nodeTLSFiles(t, ca, dir, name)
	return []string{"--cluster-cert", cert, "--cluster-key", key, "--cluster-ca", caFile}
}

// A worker's certificate (clientAuth only) that the links' CA signed, or
// the clients' CA signed, is no node's, nor is one of the links' CA that
// names no member's host: the raft port refuses it, and the RPCs sent
// with it, a forged AppendEntries to a follower and a forged RequestVote
// with LeadershipTransfer to the leader, get no answer and change
// nothing. A stranger speaking raft in plaintext to a TLS raft port gets
// nothing either.
func TestRaftPortRefusesAWorkerCertificateAndItsForgedRPCs(t *testing.T) {
	t.Parallel()
	t.Run("shared CA", func(t *testing.T) {
		// --tls-cert, --tls-key and --tls-client-ca: the same CA signs the
		// nodes' and the workers' certificates.
		ca := newTestCA(t, "cluster CA")
		certs := t.TempDir()
		tc := newTestCluster(t, 3)
		for _, nd := range tc.nodes {
			tc.start(nd, plainHTTP(nodeTLSArgs(t, ca, certs, nd.id))...)
		}
		_, _, worker := ca.issue(t, "worker", clientCert)
		_, _, elsewhere := ca.issue(t, "another host", elsewhereCert)
		attackWithCertificates(t, tc, ca, map[string]tls.Certificate{
			"a worker certificate of the CA":                        worker,
			"a certificate of the CA for another host, both usages": elsewhere,
		})
	})
	t.Run("cluster CA", func(t *testing.T) {
		// --cluster-cert, --cluster-key and --cluster-ca for the links;
		// the clients (--tls-listen) have a CA of their own.
		clusterCA, clientCA := newTestCA(t, "cluster CA"), newTestCA(t, "client CA")
		clusterCerts, clientCerts := t.TempDir(), t.TempDir()
		tc := newTestCluster(t, 3)
		for _, nd := range tc.nodes {
			port, err := freePort()
			if err != nil {
				t.Fatal(err)
			}
			args := append(plainHTTP(nodeTLSArgs(t, clientCA, clientCerts, nd.id)),
				"--tls-listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			tc.start(nd, append(args, clusterTLSArgs(t, clusterCA, clusterCerts, nd.id)...)...)
		}
		_, _, clusterWorker := clusterCA.issue(t, "worker", clientCert)
		_, _, clientWorker := clientCA.issue(t, "worker", clientCert)
		_, _, clientNode := clientCA.issue(t, "node-shaped", nodeCert)
		attackWithCertificates(t, tc, clusterCA, map[string]tls.Certificate{
			"a worker certificate of the cluster CA":                    clusterWorker,
			"a worker certificate of the client CA":                     clientWorker,
			"a certificate of the client CA for 127.0.0.1, both usages": clientNode,
		})
	})
}

// attackWithCertificates runs the attacks of
// TestRaftPortRefusesAWorkerCertificateAndItsForgedRPCs on tc, whose raft
// links ca signed, with each of certs, then checks the group is as it was.
func attackWithCertificates(t *testing.T, tc *testCluster, ca *testCA, certs map[string]tls.Certificate) {
	lead := tc.agreedLeader()
	f := tc.other(lead)
	c := f.srv.dial(t)
	put(t, c, 0, 0, 60, "before", 1)
	before := tc.fullStatus(lead)
	if before.State != "leader" {
		t.Fatalf("%s logged that it leads; GET /cluster says %+v", lead.id, before)
	}
	fst := tc.fullStatus(f)
	aeTerm, rvTerm := before.Term+1000, before.Term+2000

	for what, cert := range certs {
		// The certificate goes whatever CAs the node asks for (crypto/tls
		// would otherwise send none of another CA's).
		cfg := &tls.Config{RootCAs: ca.pool(),
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }}
		for _, nd := range []*clusterNode{f, lead} {
			expectRaftPortRefuses(t, nd.raft, cfg, what)
		}
		p := newRaftPeer(t, cfg)
		hbErr, resp, err := p.forgeEntry(f.raft, aeTerm, fst.CommitIndex, forgedPut(forgedID, "forged\r\n", 0))
		if hbErr == nil || err == nil {
			t.Fatalf("with %s, a forged AppendEntries to %s was answered (heartbeat: %v; entry: %+v, %v)", what, f.id, hbErr, resp, err)
		}
		if rv, err := p.forgeVote(lead.raft, f.id, rvTerm); err == nil {
			t.Fatalf("with %s, a forged RequestVote to the leader %s was answered: %+v", what, lead.id, rv)
		}
	}
	// A stranger without TLS gets no answer from a TLS raft port.
	plain := newRaftPeer(t, nil)
	if hbErr, resp, err := plain.forgeEntry(f.raft, aeTerm, fst.CommitIndex, forgedPut(forgedID, "forged\r\n", 0)); hbErr == nil || err == nil {
		t.Fatalf("a plaintext AppendEntries to %s's TLS raft port was answered (heartbeat: %v; entry: %+v, %v)", f.id, hbErr, resp, err)
	}
	if rv, err := plain.forgeVote(lead.raft, f.id, rvTerm); err == nil {
		t.Fatalf("a plaintext RequestVote to %s's TLS raft port was answered: %+v", lead.id, rv)
	}

	// Nothing changed: the leader leads in the same term, no node took a
	// forged term, the follower still forwards to the leader, and no node
	// serves the forged job.
	if after := tc.fullStatus(lead); after.State != "leader" || after.Term != before.Term {
		t.Fatalf("the leader %s was in term %d; after the attacks GET /cluster says %+v", lead.id, before.Term, after)
	}
	for _, nd := range tc.nodes {
		if st := tc.fullStatus(nd); st.Term >= aeTerm || st.Leader != lead.id {
			t.Fatalf("%s after the attacks: %+v (the leader is %s in term %d)", nd.id, st, lead.id, before.Term)
		}
	}
	// Through a new connection: the follower closes the clients it
	// forwards whenever it misses a heartbeat (a loaded machine), and c has
	// been open through every attack.
	if id, _ := putUntilInserted(t, f.srv.addr, "after", 30*time.Second); id < 2 {
		t.Fatalf("a put after the attacks got id %d", id)
	}
	tc.peekEverywhere(forgedID, "NOT_FOUND\r\n")
	tc.peekEverywhere(1, "FOUND 1 6\r\nbefore\r\n")
}

// expectRaftPortRefuses dials the raft port addr over TLS with cfg and
// fails the test unless the node ends the connection without a byte: at
// the handshake, or once it has seen the certificate, within 15 s (the
// handshake deadline of the raft port with room for a loaded machine).
func expectRaftPortRefuses(t *testing.T, addr string, cfg *tls.Config, what string) {
	t.Helper()
	start := time.Now()
	nc, err := tls.DialWithDialer(&net.Dialer{Timeout: defaultTimeout}, "tcp", addr, cfg)
	if err != nil {
		var ve *tls.CertificateVerificationError
		if errors.As(err, &ve) {
			t.Fatalf("the test's client did not take the node's certificate at %s: %v", addr, err)
		}
		t.Logf("%s: the handshake at %s failed after %v: %v", what, addr, time.Since(start).Round(time.Millisecond), err)
		return
	}
	defer nc.Close()
	_ = nc.SetReadDeadline(start.Add(15 * time.Second))
	var b [1]byte
	n, err := nc.Read(b[:])
	switch {
	case n > 0:
		t.Fatalf("with %s, the raft port %s sent a byte unasked", what, addr)
	case isTimeout(err):
		t.Fatalf("with %s, the raft port %s completed the handshake and kept the connection open for %v", what, addr,
			time.Since(start).Round(time.Millisecond))
	}
	t.Logf("%s: the raft port %s closed the connection after %v: %v", what, addr, time.Since(start).Round(time.Millisecond), err)
}

// On plaintext links (loopback), a forged RequestVote with
// LeadershipTransfer set deposes the leader: the deposed leader closes its
// clients' connections but does not exit, and follows again; the group
// elects a leader, a put through any node is acknowledged, and every job
// acknowledged before is still there.
func TestForgedRequestVoteDeposesALeaderThatFollowsAgainAndLosesNoJob(t *testing.T) {
	t.Parallel()
	tc := startTestCluster(t, 3)
	lead := tc.agreedLeader()
	f := tc.other(lead)
	acked := map[uint64]string{}
	fc := f.srv.dial(t)
	for i := range 5 {
		body := fmt.Sprintf("job %d", i)
		put(t, fc, 0, 0, 60, body, uint64(i+1))
		acked[uint64(i+1)] = body
	}
	lc := lead.srv.dial(t)
	put(t, lc, 0, 0, 60, "on the leader", 6)
	acked[6] = "on the leader"
	st := tc.fullStatus(lead)
	if st.State != "leader" {
		t.Fatalf("%s logged that it leads; GET /cluster says %+v", lead.id, st)
	}

	p := newRaftPeer(t, nil)
	forged := st.Term + 10
	rv, err := p.forgeVote(lead.raft, f.id, forged)
	if err != nil {
		t.Fatalf("the forged RequestVote to %s got no answer on a plaintext link: %v", lead.id, err)
	}
	if rv.Term != forged {
		t.Fatalf("the leader %s in term %d answered the forged RequestVote of term %d with %+v", lead.id, st.Term, forged, rv)
	}
	// Deposed, it closes its clients' connections, as a beanstalkd death
	// would; its process lives on (fullStatus fails the test if a node
	// exits).
	expectClosed(t, lc)
	next, term := tc.leaderAbove(forged)
	t.Logf("%s leads in term %d after the forged term %d", next.id, term, forged)
	waitFor(t, 30*time.Second, "the deposed "+lead.id+" to follow "+next.id, func() bool {
		s := tc.fullStatus(lead)
		return next == lead || (s.State == "follower" && s.Leader == next.id)
	})
	for _, nd := range tc.nodes {
		id, _ := putUntilInserted(t, nd.srv.addr, "after through "+nd.id, 30*time.Second)
		acked[id] = "after through " + nd.id
	}
	for id, body := range acked {
		tc.peekEverywhere(id, fmt.Sprintf("FOUND %d %d\r\n%s\r\n", id, len(body), body))
	}
	if exited(lead.srv) {
		t.Fatalf("the deposed leader %s exited: %v", lead.id, lead.srv.waitErr)
	}
}

// On plaintext links, a forged AppendEntries that a follower commits at
// once, carrying a record whose length field and body disagree, is
// refused by the follower's state machine: it says so in its log and its
// metrics, and no node serves the job, not even the attacked follower once
// it leads.
func TestForgedMalformedEntryIsRefusedByTheStateMachine(t *testing.T) {
	t.Parallel()
	tc := startTestCluster(t, 3)
	lead := tc.agreedLeader()
	f := tc.other(lead)
	put(t, f.srv.dial(t), 0, 0, 60, "before", 1)
	// The put is acknowledged once the leader and one follower hold it,
	// maybe not f. A forged entry of a higher term that f took in its
	// place would make f's log win the next election and take the put
	// back on every node (a plaintext forger can do that); the attack
	// here is on what f applies, so f holds the put first.
	committed := tc.status(lead).CommitIndex
	waitFor(t, 30*time.Second, f.id+" to apply the put", func() bool { return tc.status(f).AppliedIndex >= committed })
	st := tc.fullStatus(f)

	p := newRaftPeer(t, nil)
	forged := st.Term + 10
	hbErr, resp, err := p.forgeEntry(f.raft, forged, st.CommitIndex, forgedPut(forgedID, "forged\r\n", -2))
	if hbErr != nil || err != nil || !resp.Success {
		t.Fatalf("the forged AppendEntries to %s on a plaintext link: heartbeat %v; entry %+v, %v", f.id, hbErr, resp, err)
	}
	const refused = "cluster: refused a malformed entry"
	waitFor(t, 30*time.Second, f.id+" to log "+strconv.Quote(refused), func() bool {
		return strings.Contains(f.srv.out.String(), refused)
	})
	// It counts the refusal on /metrics, which a follower serves too.
	var last string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if code, body := httpGet(t, "http://"+f.http+"/metrics"); code != http.StatusOK {
			last = fmt.Sprintf("/metrics answers %d %q", code, body)
		} else {
			n, ok := value(t, scrape(t, "http://"+f.http), "beanpole_cluster_refused_entries_total", "")
			if ok && n >= 1 {
				break
			}
			last = fmt.Sprintf("beanpole_cluster_refused_entries_total %v (present: %v)", n, ok)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s refused the entry; after 30 s its %s, want beanpole_cluster_refused_entries_total >= 1", f.id, last)
		}
	}

	// The group goes on; no node serves the forged job.
	tc.leaderAbove(st.Term)
	for _, nd := range tc.nodes {
		putUntilInserted(t, nd.srv.addr, "after", 30*time.Second)
	}
	tc.peekEverywhere(forgedID, "NOT_FOUND\r\n")
	tc.peekEverywhere(1, "FOUND 1 6\r\nbefore\r\n")

	// The attacked follower's own state, which applied the entry, holds
	// no such job either: handed the lead, it serves none.
	if now := tc.leader(); now != f {
		tc.transferTo(now, f)
	} else {
		t.Logf("%s, attacked, leads after the attack", f.id)
	}
	waitFor(t, 30*time.Second, f.id+" to serve its clients", func() bool {
		return strings.HasPrefix(try(f.srv.addr, "peek 1\r\n", 5*time.Second), "FOUND 1 ")
	})
	c := f.srv.dial(t)
	mustSend(t, c, fmt.Sprintf("peek %d\r\n", forgedID))
	expect(t, c, "NOT_FOUND\r\n")
}

// Plaintext links are refused on a --raft address that is not loopback
// (0.0.0.0 included) unless --raft-insecure-plaintext says the operator
// wants them: the refusal is a usage error naming that flag; with it the
// node starts.
func TestRaftPlaintextOffLoopbackNeedsTheInsecureFlag(t *testing.T) {
	t.Parallel()
	skipLegacy(t, "cluster mode is beanpole's own")
	hosts := []string{"0.0.0.0"}
	if ip := nonLoopbackIPv4(); ip != "" {
		hosts = append(hosts, ip)
	} else {
		t.Log("this machine has no non-loopback IPv4 address: only 0.0.0.0 is tried")
	}
	for _, host := range hosts {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		raftAddr := net.JoinHostPort(host, strconv.Itoa(port))
		code, out := blRunToExit(t, "--cluster-dir", t.TempDir(), "--node-id", "n1", "--raft", raftAddr,
			"--bootstrap", "n1="+raftAddr)
		if code != exitUsage || !strings.Contains(out, "--raft-insecure-plaintext") {
			t.Fatalf("--raft %s without link TLS: exit status %d, want %d and a message naming --raft-insecure-plaintext; output:\n%s",
				raftAddr, code, exitUsage, out)
		}
	}
	if len(hosts) < 2 {
		return
	}
	// With the flag, a node on the machine's own address starts and leads
	// its group of one.
	tc := newTestCluster(t, 1)
	nd := tc.nodes[0]
	_, port, _ := net.SplitHostPort(nd.raft)
	nd.raft = net.JoinHostPort(hosts[1], port)
	nd.bootstrap = nd.id + "=" + nd.raft
	tc.start(nd, "--raft-insecure-plaintext")
	if tc.leader() != nd {
		t.Fatal("no leader")
	}
}

// exitUsage is the exit status of a bad command line (config.ExitUsage,
// beanstalkd's).
const exitUsage = 5

// nonLoopbackIPv4 is an IPv4 address of this machine's that is not a
// loopback address, or "".
func nonLoopbackIPv4() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	return ""
}

// 200 connections to a follower's raft port that never send a byte do not
// keep the group from electing a leader once the leader is killed (-9),
// and the follower closes them all within 15 s of their opening.
func TestRaftPortFloodOfSilentConnectionsDoesNotStopAFailover(t *testing.T) {
	t.Parallel()
	const flood, within = 200, 15 * time.Second
	tc := startTestCluster(t, 3)
	lead := tc.agreedLeader()
	flooded := tc.other(lead)
	other := tc.other(lead, flooded)
	put(t, flooded.srv.dial(t), 0, 0, 60, "before", 1)
	term := tc.fullStatus(lead).Term

	conns := make([]net.Conn, 0, flood)
	for range flood {
		nc, err := net.DialTimeout("tcp", flooded.raft, defaultTimeout)
		if err != nil {
			t.Fatalf("connection %d to %s's raft port: %v", len(conns)+1, flooded.id, err)
		}
		t.Cleanup(func() { nc.Close() })
		conns = append(conns, nc)
	}
	opened := time.Now()
	// Each connection is watched until the node closes it or the bound
	// passes.
	var wg sync.WaitGroup
	open := make([]bool, flood)
	took := make([]time.Duration, flood)
	for i, nc := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = nc.SetReadDeadline(opened.Add(within))
			var b [1]byte
			_, err := nc.Read(b[:])
			open[i], took[i] = isTimeout(err), time.Since(opened)
		}()
	}

	lead.srv.stop()
	next, _ := tc.leaderAbove(term, lead)
	t.Logf("%s leads after the leader's death, %v after the flood", next.id, time.Since(opened).Round(time.Millisecond))
	for _, nd := range []*clusterNode{flooded, other} {
		if id, _ := putUntilInserted(t, nd.srv.addr, "after", 30*time.Second); id <= 1 {
			t.Fatalf("id %d after the failover", id)
		}
	}

	wg.Wait()
	still, last := 0, time.Duration(0)
	for i := range conns {
		if open[i] {
			still++
		} else {
			last = max(last, took[i])
		}
	}
	if still > 0 {
		t.Fatalf("%d of %d silent connections to %s's raft port still open %v after they were opened", still, flood, flooded.id, within)
	}
	t.Logf("the last of %d silent connections was closed %v after the flood", flood, last.Round(time.Millisecond))
}

// GET /cluster without the token is a health summary: no node's id or
// raft address, no term or index. With the token it is the whole status.
func TestClusterStatusWithoutTheTokenRevealsNoTopology(t *testing.T) {
	t.Parallel()
	tc := startTestCluster(t, 3)
	tc.leader()
	for _, nd := range tc.nodes {
		code, body, err := tc.getCluster(nd, false)
		if err != nil {
			t.Fatalf("GET /cluster on %s: %v", nd.id, err)
		}
		for _, m := range tc.nodes {
			if strings.Contains(body, m.raft) || strings.Contains(body, `"`+m.id+`"`) {
				t.Fatalf("GET /cluster on %s without the token (%d) names %s or its raft address %s:\n%s", nd.id, code, m.id, m.raft, body)
			}
		}
		var doc any
		if json.Unmarshal([]byte(body), &doc) == nil {
			if k := revealingKey(doc); k != "" {
				t.Fatalf("GET /cluster on %s without the token has the key %q:\n%s", nd.id, k, body)
			}
		}

		st := tc.fullStatus(nd)
		if st.ID != nd.id || st.Term == 0 || len(st.Members) != len(tc.nodes) {
			t.Fatalf("GET /cluster on %s with the token: %+v", nd.id, st)
		}
		for _, m := range tc.nodes {
			found := false
			for _, sm := range st.Members {
				found = found || (sm.ID == m.id && sm.Raft == m.raft)
			}
			if !found {
				t.Fatalf("GET /cluster on %s with the token does not name %s at %s: %+v", nd.id, m.id, m.raft, st)
			}
		}
	}
}

// revealingKey is the first key in a decoded JSON document that names a
// term, an index, the members or a raft address, or "".
func revealingKey(doc any) string {
	switch v := doc.(type) {
	case map[string]any:
		for k, x := range v {
			lk := strings.ToLower(k)
			for _, bad := range []string{"term", "index", "members", "raft", "last_contact"} {
				if strings.Contains(lk, bad) {
					return k
				}
			}
			if k := revealingKey(x); k != "" {
				return k
			}
		}
	case []any:
		for _, x := range v {
			if k := revealingKey(x); k != "" {
				return k
			}
		}
	}
	return ""
}

// The dashboard shows the group to anyone who reaches --http; its page
// and its JSON do not give a stranger the raft addresses that GET
// /cluster keeps for the token.
func TestDashboardWithoutTheTokenRevealsNoRaftAddresses(t *testing.T) {
	t.Parallel()
	tc := startTestCluster(t, 3)
	lead := tc.leader()
	waitFor(t, 30*time.Second, "the leader's dashboard", func() bool {
		resp, err := http.Get("http://" + lead.http + "/api/overview")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	for _, path := range []string{"/", "/api/overview"} {
		code, body := httpGet(t, "http://"+lead.http+path)
		for _, m := range tc.nodes {
			if strings.Contains(body, m.raft) {
				t.Fatalf("GET %s on the leader without the token (%d) names %s's raft address %s", path, code, m.id, m.raft)
			}
		}
	}
}
