package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"testing"
	"time"

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

func (ca *testCA) node(t *testing.T, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestNodesSpeakMutualTLSAndRefuseForeignCertificates(t *testing.T) {
	ca := newTestCA(t)
	var members []Member
	for i := range 3 {
		members = append(members, Member{ID: fmt.Sprintf("n%d", i+1), Raft: freeAddr(t)})
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
	leader, jl := g.leader()
	a := newAcks(1)
	if err := jl.Put(job(1), a.ack(0)); err != nil {
		t.Fatal(err)
	}
	a.wait(t)
	if jobs, _ := g.converged(leader); len(jobs) != 1 {
		t.Fatalf("%d jobs on every node, want 1", len(jobs))
	}

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
