package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
)

// testCA makes a CA and signs certificates for 127.0.0.1 with it.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

func (ca *testCA) node(t testing.TB, name string) tls.Certificate {
	t.Helper()
	return ca.leaf(t, name, "127.0.0.1", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
}

// freeAddrs are n distinct free addresses on loopback: each one's listener
// stays open until all are picked, as the kernel may hand a port just let
// go of out again at once.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs
}

func TestNodesSpeakMutualTLSAndRefuseForeignCertificates(t *testing.T) {
	ca := newTestCA(t)
	var members []Member
	for i, addr := range freeAddrs(t, 3) {
		members = append(members, Member{ID: fmt.Sprintf("n%d", i+1), Raft: addr})
	}
	g := &group{t: t}
	for _, m := range members {
		cfg := NodeTLS(ca.node(t, m.ID), ca.pool)
		nd, err := Open(Config{ID: m.ID, Dir: t.TempDir(), Raft: m.Raft, Bootstrap: members,
			TLS: func() *tls.Config { return cfg }, Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		g.nodes = append(g.nodes, nd)
	}
	t.Cleanup(func() {
		for _, nd := range g.nodes {
			nd.Close()
		}
	})
	g.replicates()

	// A peer whose certificate another CA signed is refused in the
	// handshake, and so is one with no certificate.
	other := newTestCA(t)
	for name, certs := range map[string][]tls.Certificate{"foreign": {other.node(t, "intruder")}, "none": nil} {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", members[0].Raft,
			&tls.Config{Certificates: certs, RootCAs: ca.pool, ServerName: "127.0.0.1"})
		if err == nil {
			// TLS 1.3 reports the server's refusal of the client's
			// certificate on the first read.
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = c.Read(make([]byte, 1))
			c.Close()
		}
		if err == nil {
			t.Fatalf("a peer with %s certificate was let in", name)
		}
	}
}

// cert signs a leaf for 127.0.0.1 with the given uses, as an operator's
// CA would sign a worker's (clientAuth alone) or a server's.
func (ca *testCA) leaf(t testing.TB, name string, ip string, uses ...x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP(ip)}, ExtKeyUsage: uses}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// serveEach runs serve on each connection ln accepts, then closes it.
func serveEach(ln net.Listener, serve func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() { serve(c); c.Close() }()
	}
}

// refused reports whether the raft port at addr refuses a peer presenting
// certs: the handshake fails, or (TLS 1.3) the first read does; a peer
// let in is held open (the read times out).
func refused(addr string, certs []tls.Certificate, ca *x509.CertPool) bool {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{Certificates: certs, RootCAs: ca, ServerName: "127.0.0.1"})
	if err != nil {
		return true
	}
	defer c.Close()
	c.Write([]byte{0})
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func TestRaftPortTakesOnlyNodeCertificatesNamingAMember(t *testing.T) {
	ca := newTestCA(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var cfg atomic.Pointer[tls.Config]
	cfg.Store(NodeTLS(ca.node(t, "n1"), ca.pool))
	l := newLinkLayer(ln, cfg.Load, func() []string { return []string{"127.0.0.1"} }, linkGreeting)
	defer l.Close()
	g, err := l.group(0)
	if err != nil {
		t.Fatal(err)
	}
	go serveEach(g, func(c net.Conn) { io.Copy(io.Discard, c) })
	addr := ln.Addr().String()
	for name, cert := range map[string]tls.Certificate{
		"a worker's (clientAuth alone)":    ca.leaf(t, "worker", "127.0.0.1", x509.ExtKeyUsageClientAuth),
		"a server's (serverAuth alone)":    ca.leaf(t, "server", "127.0.0.1", x509.ExtKeyUsageServerAuth),
		"a node's naming no member's host": ca.leaf(t, "elsewhere", "10.1.2.3", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth),
	} {
		if !refused(addr, []tls.Certificate{cert}, ca.pool) {
			t.Fatalf("the raft port let in a peer with %s certificate", name)
		}
	}
	if refused(addr, []tls.Certificate{ca.node(t, "n2")}, ca.pool) {
		t.Fatal("the raft port refused a node's certificate")
	}

	// A dialling node refuses a peer whose certificate is a plain server's.
	sln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{ca.leaf(t, "server", "127.0.0.1", x509.ExtKeyUsageServerAuth)}})
	if err != nil {
		t.Fatal(err)
	}
	defer sln.Close()
	go serveEach(sln, func(c net.Conn) { c.(*tls.Conn).Handshake() })
	if c, err := g.Dial(raft.ServerAddress(sln.Addr().String()), 5*time.Second); err == nil {
		c.Close()
		t.Fatal("a node dialled a peer whose certificate is not a node's")
	}

	// Reloaded files that no longer trust a linked peer cut its link.
	c, err := tls.Dial("tcp", addr, &tls.Config{Certificates: []tls.Certificate{ca.node(t, "n3")}, RootCAs: ca.pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{0}) // the greeting's first byte
	for deadline := time.Now().Add(10 * time.Second); ; {
		l.mu.Lock()
		n := len(l.links)
		l.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the link never reached raft")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cfg.Store(NodeTLS(ca.node(t, "n1"), newTestCA(t).pool))
	if n := l.Reverify(); n != 1 {
		t.Fatalf("%d links cut after the CA changed, want 1", n)
	}
}

func TestRaftPortClosesSilentPeersAndCapsThoseInTheirGreeting(t *testing.T) {
	ln, l, g := plainPort(t)
	var silent []net.Conn
	for range maxGreeting + 20 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
	}
	// Every silent peer is closed: those past the cap at once, the others
	// after the greeting's deadline.
	start := time.Now()
	for _, c := range silent {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("a silent peer was sent something")
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("a silent peer was still open after %v", time.Since(start))
		}
		c.Close()
	}
	if got := l.refused.Load(); got != maxGreeting+20 {
		t.Fatalf("%d connections refused, want %d", got, maxGreeting+20)
	}
	// A peer that speaks is handed to raft, first byte and all.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	handsOver(t, g, c, []byte("hi"), "hi")
}
