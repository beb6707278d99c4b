package e2e

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nodeTLSArgs writes a node certificate that ca signs, its key and the
// CA's certificate under dir and returns the flags that give them to a
// node for the links between nodes.
func nodeTLSArgs(t *testing.T, ca *testCA, dir, name string) []string {
	t.Helper()
	cert, key, caFile := nodeTLSFiles(t, ca, dir, name)
	return []string{"--tls-cert", cert, "--tls-key", key, "--tls-client-ca", caFile}
}

// nodeTLSFiles writes a node certificate that ca signs, its key and the
// CA's certificate under dir and returns their paths.
func nodeTLSFiles(t *testing.T, ca *testCA, dir, name string) (cert, key, caFile string) {
	t.Helper()
	certPEM, keyPEM, _ := ca.issue(t, name, nodeCert)
	cert, key, caFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key"), filepath.Join(dir, "ca.pem")
	writeFile(t, cert, certPEM)
	writeFile(t, key, keyPEM)
	writeFile(t, caFile, ca.pem)
	return cert, key, caFile
}

// startServingTLS starts every node with a node certificate that ca
// signs for its links and a TLS listener for clients (and plain HTTP),
// and returns each node's TLS address.
func (tc *testCluster) startServingTLS(ca *testCA) map[*clusterNode]string {
	tc.t.Helper()
	certs := tc.t.TempDir()
	tlsAddr := map[*clusterNode]string{}
	for _, nd := range tc.nodes {
		port, err := freePort()
		if err != nil {
			tc.t.Fatal(err)
		}
		tlsAddr[nd] = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		tc.start(nd, append(plainHTTP(nodeTLSArgs(tc.t, ca, certs, nd.id)), "--tls-listen", tlsAddr[nd])...)
	}
	return tlsAddr
}

// plainHTTP is nodeTLSArgs with --http-plain: the links between nodes over
// TLS, the HTTP side plain, as the helpers that read it expect.
func plainHTTP(args []string) []string { return append(args, "--http-plain") }

func TestClusterNodesSpeakMutualTLSAndAStrangerCannotJoin(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "cluster CA")
	certs := t.TempDir()
	tc := newTestCluster(t, 3)
	for _, nd := range tc.nodes {
		tc.start(nd, plainHTTP(nodeTLSArgs(t, ca, certs, nd.id))...)
	}
	lead := tc.agreedLeader()
	follower := tc.other(lead)
	c := follower.srv.dial(t)
	put(t, c, 0, 0, 60, "over tls", 1)

	// A node whose certificate another CA signed is added to the
	// configuration by the leader as a non-voter, but no node will talk to
	// it: the leader's probe fails, so the join fails and the node exits,
	// having taken no part; it is never promoted.
	stranger := tc.newNode("n4")
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	out, code := runBeanpoleWithin(t, 30*time.Second, append([]string{"-l", "127.0.0.1", "-p", strconv.Itoa(port),
		"--cluster-dir", stranger.dir, "--node-id", stranger.id, "--raft", stranger.raft, "--http", stranger.http,
		"--http-token-file", tc.token, "--join", lead.http}, plainHTTP(nodeTLSArgs(t, newTestCA(t, "other CA"), t.TempDir(), "n4"))...)...)
	if code != 1 || !strings.Contains(out, "added n4 at "+stranger.raft+" as a non-voter, but it does not answer there") ||
		strings.Contains(out, "cluster: leading") {
		t.Fatalf("a node with a foreign certificate asking to join exited %d:\n%s", code, out)
	}
	for _, m := range tc.status(lead).Members {
		if m.ID == "n4" && m.Voter {
			t.Fatal("a node with a foreign certificate is a voter")
		}
	}
	// The group goes on without it.
	put(t, c, 0, 0, 60, "still over tls", 2)
}

// SIGHUP reloads the files of the links between nodes too: once every
// node's client CA file also holds a new CA and each was sent SIGHUP, a
// node whose certificate only the new CA signed joins and catches up (with
// the files read at the start, it would be refused as a stranger is).
func TestClusterNodeLinksTakeTheReloadedCAAtSIGHUP(t *testing.T) {
	t.Parallel()
	old := newTestCA(t, "cluster CA")
	certs := t.TempDir()
	tc := newTestCluster(t, 3)
	for _, nd := range tc.nodes {
		tc.start(nd, plainHTTP(nodeTLSArgs(t, old, certs, nd.id))...)
	}
	lead := tc.leader()
	c := lead.srv.dial(t)
	put(t, c, 0, 0, 60, "under the old CA", 1)

	next := newTestCA(t, "next cluster CA")
	both := append(append([]byte{}, old.pem...), next.pem...)
	writeFile(t, filepath.Join(certs, "ca.pem"), both)
	const reloaded = "SIGHUP: the TLS certificate, key and client CA were reloaded"
	for _, nd := range tc.nodes {
		nd.srv.signal(t, syscall.SIGHUP)
		waitFor(t, 30*time.Second, nd.id+" to reload its TLS files", func() bool {
			return strings.Contains(nd.srv.out.String(), reloaded)
		})
	}

	n4 := tc.newNode("n4")
	tc.nodes = append(tc.nodes, n4)
	dir := t.TempDir()
	args := plainHTTP(nodeTLSArgs(t, next, dir, "n4"))
	writeFile(t, filepath.Join(dir, "ca.pem"), both)
	tc.start(n4, append(args, "--join", lead.http)...)
	leaderApplied := tc.status(lead).AppliedIndex
	waitFor(t, 30*time.Second, "n4, under the new CA, to follow the leader and apply its log", func() bool {
		st := tc.status(n4)
		return st.Leader == lead.id && st.AppliedIndex >= leaderApplied
	})
	put(t, c, 0, 0, 60, "with n4", 2)
}

// TLS clients of a cluster: a follower's TLS listener passes the client's
// bytes to the leader's TLS listener as they are, so the client's session
// is with the leader, and a client whose certificate the group's CA signed
// is served through any node, after the leader's death through the new
// leader; a client without a certificate is refused through any node too.
func TestClusterServesTLSClientsThroughAnyNode(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "cluster CA")
	tc := newTestCluster(t, 3)
	tlsAddr := tc.startServingTLS(ca)
	_, _, worker := ca.issue(t, "worker", clientCert)
	// putTLS puts body over TLS through addr, on fresh connections, until
	// one is acknowledged, and returns the reply's id.
	putTLS := func(addr, body string, certs ...tls.Certificate) (string, error) {
		nc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
			&tls.Config{RootCAs: ca.pool(), Certificates: certs})
		if err != nil {
			return "", err
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(15 * time.Second))
		if _, err := fmt.Fprintf(nc, "put 0 0 60 %d\r\n%s\r\n", len(body), body); err != nil {
			return "", err
		}
		line, err := bufio.NewReader(nc).ReadString('\n')
		return line, err
	}

	lead := tc.agreedLeader()
	f := tc.other(lead)
	if got, err := putTLS(tlsAddr[f], "through a follower", worker); got != "INSERTED 1\r\n" {
		t.Fatalf("put over TLS through %s, a follower: %q %v", f.id, got, err)
	}
	c := lead.srv.dial(t)
	mustSend(t, c, "peek 1\r\n")
	expect(t, c, "FOUND 1 18\r\nthrough a follower\r\n")
	if got, err := putTLS(tlsAddr[f], "no certificate"); err == nil {
		t.Fatalf("a client without a certificate was served through %s: %q", f.id, got)
	}

	if err := lead.srv.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	next := tc.leader(lead)
	through := tc.other(lead, next) // the node alive beside the new leader
	waitFor(t, 30*time.Second, "a put over TLS through "+through.id+" to reach "+next.id, func() bool {
		got, _ := putTLS(tlsAddr[through], "after the failover", worker)
		return strings.HasPrefix(got, "INSERTED ") && got != "INSERTED 1\r\n"
	})
}
