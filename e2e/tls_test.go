package e2e

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TLS (--tls-listen): the certificates are made here, an ECDSA CA and
// leaves it signs.

// tlsHandshakeTimeout is the server's limit on a handshake (loop.TLSHandshakeTimeout).
const tlsHandshakeTimeout = 10 * time.Second

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serial atomic.Int64

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// issue makes a leaf for 127.0.0.1 (server) or a client, returning its
// certificate and key in PEM and as a tls.Certificate.
// certUse is what a certificate is for: a server's (for 127.0.0.1), a
// client's, a cluster node's (both, for 127.0.0.1), or both for another
// host (elsewhere.invalid, not 127.0.0.1).
type certUse int

const (
	serverCert certUse = iota
	clientCert
	nodeCert
	elsewhereCert
)

func (ca *testCA) issue(t *testing.T, name string, use certUse) (certPEM, keyPEM []byte, pair tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	switch use {
	case clientCert:
		tmpl.ExtKeyUsage, tmpl.IPAddresses = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil
	case nodeCert:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	case elsewhereCert:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.IPAddresses, tmpl.DNSNames = nil, []string{"elsewhere.invalid"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	pair, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM, pair
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	// Written aside and renamed, so the server never reads half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// tlsServer is a server with a TLS listener as well.
type tlsServer struct {
	*server
	tlsAddr           string
	ca                *testCA
	certFile, keyFile string
}

// newServerCert writes a server certificate for 127.0.0.1, signed by a CA
// of its own, and its key, for a tlsServer yet to be started.
func newServerCert(t *testing.T) *tlsServer {
	t.Helper()
	dir := t.TempDir()
	ca := newTestCA(t, "server CA")
	certPEM, keyPEM, _ := ca.issue(t, "beanpole", serverCert)
	ts := &tlsServer{ca: ca, certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem")}
	writeFile(t, ts.certFile, certPEM)
	writeFile(t, ts.keyFile, keyPEM)
	return ts
}

// startTLSServer starts a server with --tls-listen on a free port, its
// certificate signed by a CA of its own (startServer waits until that
// port listens too).
func startTLSServer(t *testing.T, extra ...string) *tlsServer {
	t.Helper()
	return startTLSServerWith(t, func(flags ...string) *server { return startServer(t, flags...) }, extra...)
}

// startTLSServerWith is startTLSServer starting the server with start.
func startTLSServerWith(t *testing.T, start func(flags ...string) *server, extra ...string) *tlsServer {
	t.Helper()
	skipUnlessBeanpole(t, "TLS is beanpole's")
	ts := newServerCert(t)
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	ts.tlsAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ts.server = start(append([]string{"--tls-listen", ts.tlsAddr, "--tls-cert", ts.certFile, "--tls-key", ts.keyFile}, extra...)...)
	return ts
}

// dialTLS makes a TLS connection trusting the server's CA, with the
// client certificate given if any, and completes the handshake.
func (ts *tlsServer) dialTLS(t *testing.T, certs ...tls.Certificate) (*conn, error) {
	t.Helper()
	return ts.dialTLSFrom(t, "", certs...)
}

// dialTLSFrom is dialTLS from the local address from ("": any), as a
// client host of its own: 127.0.0.2, 127.0.0.3... on loopback.
func (ts *tlsServer) dialTLSFrom(t *testing.T, from string, certs ...tls.Certificate) (*conn, error) {
	t.Helper()
	d := &net.Dialer{Timeout: defaultTimeout}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	tc, err := tls.DialWithDialer(d, "tcp", ts.tlsAddr, &tls.Config{RootCAs: ts.ca.pool(), Certificates: certs})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { tc.Close() })
	return &conn{nc: tc}, nil
}

func (ts *tlsServer) mustDialTLS(t *testing.T, certs ...tls.Certificate) *conn {
	t.Helper()
	c, err := ts.dialTLS(t, certs...)
	if err != nil {
		t.Fatalf("TLS handshake with %s: %v", ts.tlsAddr, err)
	}
	return c
}

// A client that sends a large put the moment its handshake is done is
// answered: the handshake reads no further than the client's Finished,
// so the records after it reach the loop whole. Were it to read the start
// of the first one along with the Finished, the loop would take the rest
// of that record for a record of its own and wait for ever.
func TestTLSPutRightAfterTheHandshakeIsAnswered(t *testing.T) {
	t.Parallel()
	ts := startTLSServer(t)
	body := strings.Repeat("y", 50000)
	for i := 1; i <= 200; i++ {
		c := ts.mustDialTLS(t)
		mustSend(t, c, "put 0 0 60 50000\r\n"+body+"\r\n")
		expectLine(t, c, "INSERTED "+itoa(i))
		c.nc.Close()
	}
}

// The protocol over TLS is the protocol: the same bytes, the same jobs as
// the plaintext listener beside it.
func TestTLSServesTheSameProtocolAsPlaintext(t *testing.T) {
	t.Parallel()
	ts := startTLSServer(t)
	c := ts.mustDialTLS(t)
	mustSend(t, c, "use tls\r\nput 1 0 60 5\r\nhello\r\n")
	expect(t, c, "USING tls\r\nINSERTED 1\r\n")
	mustSend(t, c, "watch tls\r\nreserve-with-timeout 0\r\n")
	expect(t, c, "WATCHING 2\r\nRESERVED 1 5\r\nhello\r\n")
	mustSend(t, c, "delete 1\r\ndelete 1\r\n")
	expect(t, c, "DELETED\r\nNOT_FOUND\r\n")

	// A job put over TLS is reserved over plaintext and the other way round.
	mustSend(t, c, "put 0 0 60 3\r\nabc\r\n")
	expect(t, c, "INSERTED 2\r\n")
	p := ts.dial(t)
	mustSend(t, p, "watch tls\r\nreserve-with-timeout 0\r\nput 0 0 60 1\r\nx\r\n")
	expect(t, p, "WATCHING 2\r\nRESERVED 2 3\r\nabc\r\nINSERTED 3\r\n")
	mustSend(t, c, "reserve-with-timeout 0\r\n")
	expect(t, c, "RESERVED 3 1\r\nx\r\n")

	// A body of several TLS records (16 KiB each), opened straight into the job.
	body := strings.Repeat("0123456789abcdef", 4000)
	mustSend(t, c, "put 0 0 60 "+itoa(len(body))+"\r\n"+body+"\r\npeek 4\r\n")
	expect(t, c, "INSERTED 4\r\nFOUND 4 "+itoa(len(body))+"\r\n"+body+"\r\n")

	st := stats(t, p)
	if st["current-connections"] != "2" {
		t.Errorf("current-connections = %s, want 2 (one TLS, one plaintext)", st["current-connections"])
	}
	mustSend(t, c, "quit\r\n")
	expectClosed(t, c)
}

// With --tls-client-ca only a client whose certificate that CA signed gets
// in; one without a certificate, or with one from another CA, gets no
// reply at all.
func TestTLSClientCAAdmitsOnlyItsCertificates(t *testing.T) {
	t.Parallel()
	clientCA := newTestCA(t, "client CA")
	caFile := filepath.Join(t.TempDir(), "clients.pem")
	writeFile(t, caFile, clientCA.pem)
	ts := startTLSServer(t, "--tls-client-ca", caFile)

	_, _, good := clientCA.issue(t, "worker", clientCert)
	c := ts.mustDialTLS(t, good)
	mustSend(t, c, "put 0 0 60 2\r\nok\r\n")
	expect(t, c, "INSERTED 1\r\n")

	_, _, stranger := newTestCA(t, "other CA").issue(t, "intruder", clientCert)
	for name, certs := range map[string][]tls.Certificate{"no certificate": nil, "another CA's": {stranger}} {
		// TLS 1.3 lets the client finish its side of the handshake before
		// the server checks the certificate: the refusal shows either in
		// the handshake or as the first read.
		c, err := ts.dialTLS(t, certs...)
		if err != nil {
			continue
		}
		_ = c.nc.SetDeadline(time.Now().Add(defaultTimeout))
		_, _ = io.WriteString(c.nc, "stats\r\n")
		got, err := io.ReadAll(c.nc)
		if len(got) != 0 || err == nil || isTimeout(err) {
			t.Errorf("%s: read %q, %v; want the handshake refused", name, got, err)
		}
	}
	st := stats(t, ts.dial(t))
	if st["total-jobs"] != "1" {
		t.Errorf("total-jobs = %s, want 1", st["total-jobs"])
	}
}

// A client that connects to the TLS port and says nothing is cut when the
// handshake timeout passes, not before and not much later.
func TestTLSStalledHandshakeIsCutAfterTheTimeout(t *testing.T) {
	t.Parallel()
	ts := startTLSServer(t)
	start := time.Now()
	nc, err := net.DialTimeout("tcp", ts.tlsAddr, defaultTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	slack := 20 * time.Second
	_ = nc.SetReadDeadline(start.Add(tlsHandshakeTimeout + slack))
	n, err := nc.Read(make([]byte, 1))
	took := time.Since(start)
	if isTimeout(err) {
		t.Fatalf("still open after %v", took)
	}
	if n != 0 || err == nil {
		t.Fatalf("read %d bytes, %v; want the connection closed", n, err)
	}
	if took < tlsHandshakeTimeout-time.Second {
		t.Fatalf("closed after %v, before the %v handshake timeout", took, tlsHandshakeTimeout)
	}
	// The plaintext side was not held up meanwhile.
	p := ts.dial(t)
	mustSend(t, p, "use x\r\n")
	expect(t, p, "USING x\r\n")
}

// Plaintext or garbage on the TLS port is closed at once, unanswered,
// counted in /metrics and logged at most once a second.
func TestTLSGarbageIsClosedAtOnceAndCounted(t *testing.T) {
	t.Parallel()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ts := startTLSServer(t, "--http", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), "--http-plain")
	begin := time.Now()
	for i, junk := range []string{"stats\r\n", "put 0 0 60 5\r\nhello\r\n", "\x16\x03\x01\x00\x05junk!", strings.Repeat("\xff", 64)} {
		start := time.Now()
		nc, err := net.DialTimeout("tcp", ts.tlsAddr, defaultTimeout)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(nc, junk)
		_ = nc.SetReadDeadline(time.Now().Add(defaultTimeout))
		got, err := io.ReadAll(nc)
		nc.Close()
		if isTimeout(err) {
			t.Fatalf("%q: still open after %v", junk, time.Since(start))
		}
		// At most a TLS alert record (type 21) comes back, never a reply.
		if len(got) != 0 && got[0] != 21 {
			t.Errorf("%q: got %q, want no reply", junk, got)
		}
		want := float64(i + 1)
		waitFor(t, defaultTimeout, "the failure in /metrics", func() bool {
			v, ok := value(t, scrape(t, base), "beanpole_tls_handshake_failures_total", "")
			return ok && v == want
		})
	}
	const burst = 30
	for range burst {
		nc, err := net.DialTimeout("tcp", ts.tlsAddr, defaultTimeout)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(nc, "stats\r\n")
		_ = nc.SetReadDeadline(time.Now().Add(defaultTimeout))
		_, _ = io.ReadAll(nc)
		nc.Close()
	}
	waitFor(t, defaultTimeout, "the burst in /metrics", func() bool {
		v, ok := value(t, scrape(t, base), "beanpole_tls_handshake_failures_total", "")
		return ok && v == 4+burst
	})
	took := time.Since(begin)
	const line = "TLS handshake failed"
	waitFor(t, defaultTimeout, "a log line", func() bool { return strings.Contains(ts.out.String(), line) })
	if n, most := strings.Count(ts.out.String(), line), 1+int(took/time.Second); n > most {
		t.Errorf("%d log lines for %d failed handshakes in %v, want at most %d (one a second)", n, 4+burst, took, most)
	}
	if st := stats(t, ts.dial(t)); st["total-connections"] != "1" {
		t.Errorf("total-connections = %s, want 1: no failed handshake reaches the protocol", st["total-connections"])
	}
}

// SIGHUP reads the certificate and key again: new handshakes get the new
// certificate, a connection made before keeps working, and a bad file
// keeps the certificate loaded before.
func TestTLSSIGHUPRotatesTheCertificateKeepingConnections(t *testing.T) {
	t.Parallel()
	ts := startTLSServer(t)
	old := ts.mustDialTLS(t)
	mustSend(t, old, "put 0 0 60 3\r\nold\r\n")
	expect(t, old, "INSERTED 1\r\n")

	newCA := newTestCA(t, "new server CA")
	certPEM, keyPEM, _ := newCA.issue(t, "beanpole renewed", serverCert)
	// The key first: until both are in place a reload fails and keeps the
	// old pair, it never serves a mismatched one.
	writeFile(t, ts.keyFile, keyPEM)
	writeFile(t, ts.certFile, certPEM)
	ts.signal(t, syscall.SIGHUP)
	subject := func() string {
		tc, err := tls.DialWithDialer(&net.Dialer{Timeout: defaultTimeout}, "tcp", ts.tlsAddr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		defer tc.Close()
		return tc.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	waitFor(t, defaultTimeout, "the new certificate", func() bool { return subject() == "beanpole renewed" })
	ts.ca = newCA
	c := ts.mustDialTLS(t)
	mustSend(t, c, "reserve-with-timeout 0\r\n")
	expect(t, c, "RESERVED 1 3\r\nold\r\n")
	mustSend(t, old, "put 0 0 60 3\r\nnew\r\nstats-job 1\r\n")
	expect(t, old, "INSERTED 2\r\n")
	if st := yamlMap(t, readYAML(t, old)); st["state"] != "reserved" {
		t.Errorf("job 1 is %s over the old connection, want reserved", st["state"])
	}

	writeFile(t, ts.certFile, []byte("not a certificate\n"))
	ts.signal(t, syscall.SIGHUP)
	waitFor(t, defaultTimeout, "the reload error in the log", func() bool {
		return strings.Contains(ts.out.String(), "the TLS files were not reloaded")
	})
	if got := subject(); got != "beanpole renewed" {
		t.Errorf("after a failed reload the server presents %q, want the certificate loaded before", got)
	}
	select {
	case <-ts.exited:
		t.Fatal("the server exited on SIGHUP")
	default:
	}
}

// A client that half-closes its TLS connection (close_notify) after
// sending gets every reply before the server closes.
func TestTLSHalfCloseGetsEveryReply(t *testing.T) {
	t.Parallel()
	ts := startTLSServer(t)
	c := ts.mustDialTLS(t)
	var send, want strings.Builder
	for i := 1; i <= 200; i++ {
		send.WriteString("put 0 0 60 4\r\nbody\r\n")
		want.WriteString("INSERTED " + itoa(i) + "\r\n")
	}
	for i := 1; i <= 200; i++ {
		send.WriteString("delete " + itoa(i) + "\r\n")
		want.WriteString("DELETED\r\n")
	}
	mustSend(t, c, send.String())
	if err := c.nc.(*tls.Conn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	// Read to EOF; the bound is on each wait for more, not on all 400
	// replies (a loaded machine, a race-built server).
	var got []byte
	buf := make([]byte, 4096)
	for {
		_ = c.nc.SetReadDeadline(time.Now().Add(defaultTimeout))
		k, err := c.nc.Read(buf)
		got = append(got, buf[:k]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read: %v after %d bytes", err, len(got))
		}
	}
	if string(got) != want.String() {
		t.Fatalf("wrong replies%s", diffMsg(want.String(), string(got)))
	}
}

// --tls-only serves TLS and nothing else.
func TestTLSOnlyHasNoPlaintextListener(t *testing.T) {
	skipUnlessBeanpole(t, "TLS is beanpole's")
	t.Parallel()
	dir := t.TempDir()
	ca := newTestCA(t, "server CA")
	certPEM, keyPEM, _ := ca.issue(t, "beanpole", serverCert)
	writeFile(t, filepath.Join(dir, "c.pem"), certPEM)
	writeFile(t, filepath.Join(dir, "k.pem"), keyPEM)
	plain, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	ts := &tlsServer{ca: ca, tlsAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	cmd := serverCommand("-l", "127.0.0.1", "-p", itoa(plain), "--tls-only", "--tls-listen", ts.tlsAddr,
		"--tls-cert", filepath.Join(dir, "c.pem"), "--tls-key", filepath.Join(dir, "k.pem"))
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var c *conn
	waitFor(t, defaultTimeout, "the TLS listener", func() bool {
		c, err = ts.dialTLS(t)
		return err == nil
	})
	mustSend(t, c, "put 0 0 60 2\r\nhi\r\n")
	expect(t, c, "INSERTED 1\r\n")
	if nc, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", itoa(plain)), defaultTimeout); err == nil {
		nc.Close()
		t.Fatalf("the plaintext port %d accepts connections under --tls-only\n%s", plain, out.String())
	}
}

// openssl s_client, a client that shares no code with the server, speaks
// the protocol over TLS.
func TestTLSWithOpenSSLClient(t *testing.T) {
	skipUnlessBeanpole(t, "TLS is beanpole's")
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl not installed")
	}
	t.Parallel()
	ts := startTLSServer(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	writeFile(t, caFile, ts.ca.pem)
	cmd := exec.Command(openssl, "s_client", "-connect", ts.tlsAddr, "-CAfile", caFile, "-verify_return_error", "-quiet")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if _, err := io.WriteString(stdin, "put 0 0 60 7\r\nopenssl\r\nreserve-with-timeout 0\r\n"); err != nil {
		t.Fatal(err)
	}
	want := "INSERTED 1\r\nRESERVED 1 7\r\nopenssl\r\n"
	got := make(chan string, 1)
	go func() {
		b := make([]byte, len(want))
		n, err := io.ReadFull(bufio.NewReader(stdout), b)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			got <- "error: " + err.Error()
			return
		}
		got <- string(b[:n])
	}()
	select {
	case g := <-got:
		if g != want {
			t.Fatalf("openssl s_client got%s\nstderr: %s", diffMsg(want, g), stderr.String())
		}
	case <-time.After(3 * defaultTimeout):
		t.Fatalf("no reply through openssl s_client; stderr: %s", stderr.String())
	}
}

// Out of descriptors, TLS clients are refused like plaintext ones: each
// one the server cannot bridge is closed unanswered instead of hanging,
// the connections already open go on, and new clients are served once
// some close (loop/accept.go, loop/tls.go).
func TestTLSOutOfDescriptorsRefusesThenRecovers(t *testing.T) {
	t.Parallel()
	ts := startTLSServer(t)
	pid := ts.pid()
	const nofile = 64
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: nofile, Max: nofile}, nil); err != nil {
		t.Skipf("prlimit: %v", err)
	}
	// try opens a TLS client and asks list-tube-used: served, or refused
	// (a failed handshake, or a close with no reply).
	try := func() (*conn, bool) {
		t.Helper()
		c, err := ts.dialTLS(t)
		if err != nil {
			return nil, false
		}
		mustSend(t, c, listUsed)
		deadline := time.Now().Add(defaultTimeout)
		for len(c.buf) < usingLen && c.fill(deadline) == nil {
		}
		switch {
		case string(c.buf) == usingDflt:
			c.buf = nil
			return c, true
		case c.eof != nil && len(c.buf) == 0:
			return nil, false
		}
		t.Fatalf("want %q or a close, got %s (%v)", usingDflt, show(string(c.buf)), c.eof)
		return nil, false
	}
	// Each acceptor takes its own descriptors (a duplicate of its
	// listener, a spare to give up at the limit) once it runs, which may
	// be after the server logs that it listens: a client served on each
	// listener shows both running.
	first, ok := try()
	if !ok {
		t.Fatal("the first TLS client is refused")
	}
	p := ts.dial(t)
	mustSend(t, p, listUsed)
	expect(t, p, usingDflt)
	// Each TLS connection holds one descriptor, its socket, and for a
	// moment at the handoff to a loop a duplicate of it: all the room
	// left but the duplicates of up to two handoffs in flight is served.
	// Only descriptors numbered below the limit take its room (the server
	// may inherit higher ones).
	open := []*conn{first}
	want := len(open) + nofile - fdsBelow(t, pid, nofile) - 2
	for {
		if len(open) > nofile {
			t.Fatalf("still serving after %d TLS connections with %d descriptors", len(open), nofile)
		}
		c, ok := try()
		if !ok {
			break
		}
		open = append(open, c)
	}
	t.Logf("%d TLS connections served with %d descriptors, want %d", len(open), nofile, want)
	if len(open) < want {
		t.Fatalf("only %d TLS connections served before the limit of %d descriptors, want %d", len(open), nofile, want)
	}
	for _, c := range open {
		mustSend(t, c, listUsed)
		expect(t, c, usingDflt)
	}
	fds := procFDs(t, pid)
	for _, c := range open[len(open)-4:] {
		c.nc.Close()
	}
	open = open[:len(open)-4]
	waitFor(t, defaultTimeout, "the server to close 4 TLS connections", func() bool { return procFDs(t, pid) <= fds-4 })
	if _, ok := try(); !ok {
		t.Fatal("a new TLS client is refused after connections closed")
	}
	p = ts.dial(t)
	mustSend(t, p, listUsed)
	expect(t, p, usingDflt)
}

// fdsBelow counts pid's open descriptors numbered below limit.
func fdsBelow(t *testing.T, pid, limit int) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	n := 0
	for _, fd := range fds {
		if i, err := strconv.Atoi(fd.Name()); err == nil && i < limit {
			n++
		}
	}
	return n
}

// SIGHUP reads --tls-client-ca again: from then on only the new CA's
// clients get in, even those resuming a session the old CA let in, and a
// client of the old CA already connected goes on.
func TestTLSSIGHUPReplacesTheClientCA(t *testing.T) {
	t.Parallel()
	oldCA, newCA := newTestCA(t, "old client CA"), newTestCA(t, "new client CA")
	caFile := filepath.Join(t.TempDir(), "clients.pem")
	writeFile(t, caFile, oldCA.pem)
	ts := startTLSServer(t, "--tls-client-ca", caFile)
	_, _, oldCert := oldCA.issue(t, "old worker", clientCert)
	_, _, newCert := newCA.issue(t, "new worker", clientCert)
	// The old CA's client keeps its sessions, to resume them.
	oldSessions := tls.NewLRUClientSessionCache(8)
	dial := func(cert tls.Certificate, sessions tls.ClientSessionCache) (*tls.Conn, error) {
		d := &net.Dialer{Timeout: defaultTimeout}
		tc, err := tls.DialWithDialer(d, "tcp", ts.tlsAddr,
			&tls.Config{RootCAs: ts.ca.pool(), Certificates: []tls.Certificate{cert}, ClientSessionCache: sessions})
		if err == nil {
			t.Cleanup(func() { tc.Close() })
		}
		return tc, err
	}
	tc, err := dial(oldCert, oldSessions)
	if err != nil {
		t.Fatal(err)
	}
	old := &conn{nc: tc}
	mustSend(t, old, "put 0 0 60 1\r\na\r\n")
	expect(t, old, "INSERTED 1\r\n") // the session ticket came before it
	if tc, err := dial(oldCert, oldSessions); err != nil || !tc.ConnectionState().DidResume {
		t.Fatalf("no session to resume (%v): the test cannot check that a resumption is refused", err)
	}

	writeFile(t, caFile, newCA.pem)
	ts.signal(t, syscall.SIGHUP)
	waitFor(t, defaultTimeout, "the reload", func() bool {
		return strings.Contains(ts.out.String(), "the TLS certificate, key and client CA were reloaded")
	})
	// admitted reports whether a client with cert gets a reply.
	admitted := func(cert tls.Certificate, sessions tls.ClientSessionCache) bool {
		tc, err := dial(cert, sessions)
		if err != nil {
			return false
		}
		_ = tc.SetDeadline(time.Now().Add(defaultTimeout))
		if _, err := io.WriteString(tc, listUsed); err != nil {
			return false
		}
		got := make([]byte, usingLen)
		_, err = io.ReadFull(tc, got)
		return err == nil && string(got) == usingDflt
	}
	if !admitted(newCert, nil) {
		t.Error("a client of the new CA is refused")
	}
	if admitted(oldCert, oldSessions) {
		t.Error("a client of the replaced CA is still admitted, resuming its session")
	}
	if admitted(oldCert, nil) {
		t.Error("a client of the replaced CA is still admitted")
	}
	mustSend(t, old, "put 0 0 60 1\r\nb\r\n")
	expect(t, old, "INSERTED 2\r\n")
}

// A graceful stop (SIGTERM) closes TLS clients cleanly, with close_notify,
// and the server still exits 0.
func TestTLSGracefulStopClosesWithCloseNotify(t *testing.T) {
	t.Parallel()
	ts := startTLSServer(t)
	nc, err := net.DialTimeout("tcp", ts.tlsAddr, defaultTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// TLS 1.2, whose record headers say which records are alerts.
	rec := &recordingConn{Conn: nc}
	tc := tls.Client(rec, &tls.Config{RootCAs: ts.ca.pool(), ServerName: "127.0.0.1", MaxVersion: tls.VersionTLS12})
	c := &conn{nc: tc}
	mustSend(t, c, "put 0 0 60 2\r\nhi\r\n")
	expect(t, c, "INSERTED 1\r\n")
	ts.signal(t, syscall.SIGTERM)
	_ = tc.SetReadDeadline(time.Now().Add(defaultTimeout))
	if got, err := io.ReadAll(tc); err != nil || len(got) != 0 {
		t.Fatalf("read %q, %v; want a clean TLS close", got, err)
	}
	if types := recordTypes(rec.got); len(types) == 0 || types[len(types)-1] != 21 {
		t.Fatalf("the server's records are of types %v: the last is not an alert (close_notify)", types)
	}
	select {
	case <-ts.exited:
	case <-time.After(2 * defaultTimeout):
		t.Fatal("the server did not exit after SIGTERM")
	}
	if code := ts.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
}

// recordingConn keeps every byte read through it.
type recordingConn struct {
	net.Conn
	got []byte
}

func (r *recordingConn) Read(b []byte) (int, error) {
	n, err := r.Conn.Read(b)
	r.got = append(r.got, b[:n]...)
	return n, err
}

// recordTypes is the content type of each TLS record in b.
func recordTypes(b []byte) []byte {
	var types []byte
	for len(b) >= 5 {
		n := 5 + int(b[3])<<8 + int(b[4])
		if n > len(b) {
			break
		}
		types, b = append(types, b[0]), b[n:]
	}
	return types
}

// The protocol's limits hold on TLS connections as on plaintext ones:
// replies a TLS client does not read are charged against the memory
// ceiling and hold it back, a put past the ceiling is answered
// OUT_OF_MEMORY over TLS, and a client that then reads gets every reply,
// decrypted, in order; an over-long line is BAD_FORMAT and the connection
// goes on. beanpole_tls_connections counts the TLS clients as they come
// and go.
func TestTLSLimitsHoldAsOnPlaintext(t *testing.T) {
	t.Parallel()
	const (
		limit   = 8 << 20
		size    = 60000
		readers = 40
		peeks   = 100
	)
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	web := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ts := startTLSServer(t, "--http", web, "--http-plain", "--max-job-memory", strconv.Itoa(limit))
	base := "http://" + web
	ctl := ts.dial(t)
	clients, reply, held := unreadPeeks(t, ts.server, base, ctl, func() *conn { return ts.mustDialTLS(t) }, limit, size, readers, peeks)
	tlsOpen := func() float64 {
		n, _ := value(t, scrape(t, base), "beanpole_tls_connections", "")
		return n
	}
	// A TLS connection is counted once its loop takes it over from the
	// handshake, which may come after the ceiling is reached.
	waitFor(t, defaultTimeout, "beanpole_tls_connections to count the TLS clients, not the plaintext one", func() bool { return tlsOpen() == readers })
	if bound := int64(limit + 2*(4<<20) + readers*(len(reply)+len(reply)/100)); held > bound {
		t.Fatalf("%d TLS clients that do not read hold %d bytes of replies; want at most %d", readers, held, bound)
	}
	c := ts.mustDialTLS(t)
	mustSend(t, c, "put 0 0 60 3\r\nabc\r\n")
	expect(t, c, "OUT_OF_MEMORY\r\n")
	mustSend(t, c, strings.Repeat("x", 300)+"\r\nlist-tube-used\r\n")
	expect(t, c, "BAD_FORMAT\r\nUSING default\r\n")

	want := strings.Repeat(reply, peeks)
	for _, r := range clients[:4] {
		if got := readN(t, r, len(want), 4*defaultTimeout); got != want {
			t.Fatalf("a TLS client that reads got different replies%s", diffMsg(want, got))
		}
	}
	for _, r := range clients[4:] {
		r.nc.Close()
	}
	waitFor(t, 4*defaultTimeout, "the replies' charge to go back", func() bool {
		return memBytes(t, base, "replies") == 0
	})
	waitFor(t, defaultTimeout, "beanpole_tls_connections to count the 5 TLS clients left", func() bool { return tlsOpen() == 5 })
	mustSend(t, c, "put 0 0 60 3\r\nabc\r\n")
	expect(t, c, "INSERTED 3\r\n") // the refused put took id 2, as upstream's does
}

// A TLS client parked in reserve that keeps sending commands is held back
// by TCP, as a plaintext one is: the server leaves its records unread
// instead of decrypting and buffering them, its memory stays flat, and
// the reserve is still answered.
func TestTLSParkedClientIsHeldBackByTCP(t *testing.T) {
	t.Parallel()
	ts := startTLSServer(t)
	c, other := ts.mustDialTLS(t), ts.dial(t)
	floodOneParked(t, ts.pid(), c, other)
	// The flood's last record is cut (the client's write timed out in
	// it), so only the reserve's answer can be read back.
	put(t, other, 0, 0, 60, "job", 1)
	expect(t, c, "RESERVED 1 3\r\njob\r\n")
}
