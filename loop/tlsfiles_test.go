package loop

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// selfSigned returns a self-signed certificate and its key, in PEM.
func selfSigned(t testing.TB, name string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// served is the certificate name and client policy a handshake would get.
func served(t *testing.T, f *TLSFiles) (string, tls.ClientAuthType) {
	t.Helper()
	c, err := f.Config().GetConfigForClient(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(c.Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.Subject.CommonName, c.ClientAuth
}

// tlsFixture is a directory of TLS files loaded as "first" (certificate,
// key and a client CA), with a "second" pair to reload with.
type tlsFixture struct {
	t                     *testing.T
	dir                   string
	key1, cert2, key2, ca []byte
}

func loadFirst(t *testing.T) (*tlsFixture, *TLSFiles) {
	t.Helper()
	x := &tlsFixture{t: t, dir: t.TempDir()}
	cert1, key1 := selfSigned(t, "first")
	x.key1 = key1
	x.cert2, x.key2 = selfSigned(t, "second")
	x.ca, _ = selfSigned(t, "clients")
	x.write("cert", cert1)
	x.write("key", x.key1)
	x.write("ca", x.ca)
	f, err := LoadTLS(x.path("cert"), x.path("key"), x.path("ca"))
	if err != nil {
		t.Fatal(err)
	}
	return x, f
}

func (x *tlsFixture) path(name string) string { return filepath.Join(x.dir, name) }

func (x *tlsFixture) write(name string, data []byte) {
	x.t.Helper()
	if err := os.WriteFile(x.path(name), data, 0o600); err != nil {
		x.t.Fatal(err)
	}
}

// A reload that fails, whichever file is wrong, leaves the files loaded
// before in use; one that succeeds replaces all three.
func TestTLSFilesBadReloadKeepsTheLoadedOnes(t *testing.T) {
	x, f := loadFirst(t)
	path, write := x.path, x.write
	key1, cert2, key2, ca := x.key1, x.cert2, x.key2, x.ca
	if name, auth := served(t, f); name != "first" || auth != tls.RequireAndVerifyClientCert {
		t.Fatalf("serving %q with %v, want first with RequireAndVerifyClientCert", name, auth)
	}

	for _, bad := range []struct {
		what      string
		cert, key []byte
		ca        []byte
		err       string
	}{
		{"a key of another certificate", cert2, key1, ca, "--tls-cert"},
		{"no certificate", []byte("junk\n"), key2, ca, "--tls-cert"},
		{"a client CA file without PEM", cert2, key2, []byte("junk\n"), "--tls-client-ca"},
	} {
		write("cert", bad.cert)
		write("key", bad.key)
		write("ca", bad.ca)
		if err := f.Reload(); err == nil || !strings.Contains(err.Error(), bad.err) {
			t.Errorf("%s: Reload() = %v, want an error naming %s", bad.what, err, bad.err)
		}
		if name, auth := served(t, f); name != "first" || auth != tls.RequireAndVerifyClientCert {
			t.Errorf("%s: serving %q with %v after a failed reload, want first with RequireAndVerifyClientCert", bad.what, name, auth)
		}
	}
	write("ca", ca)
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if name, _ := served(t, f); name != "second" {
		t.Errorf("serving %q after a good reload, want second", name)
	}
	if _, err := LoadTLS(path("cert"), path("missing"), ""); err == nil {
		t.Error("LoadTLS with a missing key succeeded")
	}
}

// The HTTP side serves the certificate of the same load as the protocol's
// listener, reloads with it, and checks a client certificate only if one
// is presented.
func TestTLSFilesHTTPConfigFollowsTheProtocolsLoad(t *testing.T) {
	httpServed := func(f *TLSFiles) (string, tls.ClientAuthType, []string) {
		t.Helper()
		c, err := f.HTTPConfig().GetConfigForClient(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificates[0].Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.Subject.CommonName, c.ClientAuth, c.NextProtos
	}
	x, f := loadFirst(t)
	path, write, cert2, key2 := x.path, x.write, x.cert2, x.key2
	if name, auth, protos := httpServed(f); name != "first" || auth != tls.VerifyClientCertIfGiven || len(protos) != 1 || protos[0] != "http/1.1" {
		t.Fatalf("HTTP side serves %q with %v and ALPN %q, want first with VerifyClientCertIfGiven and http/1.1", name, auth, protos)
	}
	if _, auth := served(t, f); auth != tls.RequireAndVerifyClientCert {
		t.Fatalf("the protocol's listener asks %v, want RequireAndVerifyClientCert", auth)
	}
	write("cert", cert2)
	write("key", key2)
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if name, _, _ := httpServed(f); name != "second" {
		t.Errorf("HTTP side serves %q after a reload, want second", name)
	}
	g, err := LoadTLS(path("cert"), path("key"), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, auth, _ := httpServed(g); auth != tls.NoClientCert {
		t.Errorf("without a client CA the HTTP side asks %v, want NoClientCert", auth)
	}
}
