package e2e

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// HTTPS on --http: with --tls-cert and --tls-key the HTTP side serves the
// certificate the protocol's TLS listener serves, from the same load.

// httpsClient trusts ca and presents certs if asked for one. It offers
// HTTP/2 as well, as browsers and Prometheus do.
func httpsClient(t *testing.T, ca *testCA, certs ...tls.Certificate) *http.Client {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool(), Certificates: certs}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: defaultTimeout, Transport: tr}
}

func fetchGet(t *testing.T, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fetch(t, c, req)
}

// httpAddrFree is a free 127.0.0.1 port for --http.
func httpAddrFree(t *testing.T) string {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// startHTTPSOnly starts a server whose --http serves HTTPS with a
// certificate of a CA of its own, without --tls-listen.
func startHTTPSOnly(t *testing.T, extra ...string) (*tlsServer, string) {
	t.Helper()
	skipUnlessBeanpole(t, "HTTPS is beanpole's")
	ts := newServerCert(t)
	addr := httpAddrFree(t)
	ts.server = startServer(t, append([]string{"--http", addr, "--tls-cert", ts.certFile, "--tls-key", ts.keyFile}, extra...)...)
	return ts, addr
}

// The server binds --http after the protocol's listener, once it has
// read the certificate, so a server is started only when --http listens
// too: a test that dials it sooner is refused. A key that is a FIFO no
// one writes holds the server between the two listeners for good: the
// start must fail, naming the port, rather than return the server.
func TestStartWaitsForTheHTTPListener(t *testing.T) {
	skipUnlessBeanpole(t, "HTTPS is beanpole's")
	t.Parallel()
	ts := newServerCert(t)
	key := filepath.Join(t.TempDir(), "key.pem")
	if err := syscall.Mkfifo(key, 0o600); err != nil {
		t.Fatal(err)
	}
	addr := httpAddrFree(t)
	s, err := startProc(target.bin, "tcp", "", []string{"--http", addr, "--tls-cert", ts.certFile, "--tls-key", key})
	if err == nil {
		s.stop()
		t.Fatalf("the server was started while its key was still being read, before --http %s listened", addr)
	}
	if _, port, _ := net.SplitHostPort(addr); !strings.Contains(err.Error(), "did not listen") || !strings.Contains(err.Error(), port) {
		t.Fatalf("the start failed for another reason than --http %s not listening: %v", addr, err)
	}
}

// /metrics and /healthz over HTTPS, with the protocol listener's
// certificate, over HTTP/1.1 even to a client that offers HTTP/2; the
// dashboard's token rules are those of plain HTTP.
func TestHTTPSServesMetricsAndHealthzWithTheTLSCertificate(t *testing.T) {
	t.Parallel()
	addr := httpAddrFree(t)
	token := filepath.Join(t.TempDir(), "token")
	writeFile(t, token, []byte(dashToken+"\n"))
	ts := startTLSServer(t, "--http", addr, "--http-token-file", token)
	base := "https://" + addr
	c := httpsClient(t, ts.ca)

	resp, body := fetchGet(t, c, base+"/healthz")
	if resp.StatusCode != 200 || body != "ok\n" {
		t.Fatalf("/healthz over HTTPS: %d %q", resp.StatusCode, body)
	}
	if resp.TLS == nil || resp.TLS.PeerCertificates[0].Subject.CommonName != "beanpole" || resp.Proto != "HTTP/1.1" {
		t.Fatalf("/healthz answered over %s, TLS %+v: want HTTP/1.1 with the certificate of --tls-cert", resp.Proto, resp.TLS)
	}
	resp, body = fetchGet(t, c, base+"/metrics")
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics over HTTPS: %d %q", resp.StatusCode, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics over HTTPS is not the Prometheus text format: %v", err)
	}
	if v, ok := value(t, fams, "beanpole_tls_handshake_failures_total", ""); !ok || v != 0 {
		t.Fatalf("beanpole_tls_handshake_failures_total = %v (present %v), want 0", v, ok)
	}

	// The token rules: none, a wrong one, the right one.
	for _, tc := range []struct {
		auth string
		code int
	}{{"", http.StatusUnauthorized}, {"Bearer nope", http.StatusForbidden}, {"Bearer " + dashToken, http.StatusSeeOther}} {
		req, err := http.NewRequest("POST", base+"/tube/pause?name=default", strings.NewReader("seconds=0"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		nc := *c
		nc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		if resp, body := fetch(t, &nc, req); resp.StatusCode != tc.code {
			t.Errorf("pause with %q: %d %q, want %d", tc.auth, resp.StatusCode, body, tc.code)
		}
	}
}

// Plain HTTP sent to the HTTPS port gets a 400 saying so and the
// connection closed; the server serves on.
func TestHTTPSAnswersPlainHTTPWith400AndCloses(t *testing.T) {
	t.Parallel()
	ts, addr := startHTTPSOnly(t)
	nc, err := net.DialTimeout("tcp", addr, defaultTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := io.WriteString(nc, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(defaultTimeout))
	got, err := io.ReadAll(nc)
	if err != nil {
		t.Fatalf("reading the answer: %v (got %q)", err, got)
	}
	if want := "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"; string(got) != want {
		t.Fatalf("plain HTTP to the HTTPS port: %s", diffMsg(want, string(got)))
	}
	if resp, body := fetchGet(t, httpsClient(t, ts.ca), "https://"+addr+"/healthz"); resp.StatusCode != 200 || body != "ok\n" {
		t.Fatalf("/healthz over HTTPS afterwards: %d %q", resp.StatusCode, body)
	}
}

// --http-plain keeps --http plain beside --tls-listen: plain requests are
// served, a TLS handshake is not.
func TestHTTPPlainServesPlainHTTPBesideTLS(t *testing.T) {
	t.Parallel()
	addr := httpAddrFree(t)
	startTLSServer(t, "--http", addr, "--http-plain")
	code, body := httpGet(t, "http://"+addr+"/healthz")
	if code != 200 || body != "ok\n" {
		t.Fatalf("/healthz over plain HTTP with --http-plain: %d %q", code, body)
	}
	tc, err := tls.DialWithDialer(&net.Dialer{Timeout: defaultTimeout}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err == nil {
		tc.Close()
		t.Fatal("a TLS handshake with --http-plain's listener succeeded")
	}
	// `beanpole cluster` asked for HTTPS there says what to ask instead.
	out, err := exec.Command(target.bin, "cluster", "status", "--http", "https://"+addr).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.HasSuffix(string(out), "beanpole cluster: "+addr+" serves plain HTTP: ask http://"+addr+"\n") {
		t.Errorf("cluster status --http https://%s: %v\n%s", addr, err, out)
	}
}

// With --tls-client-ca the HTTP side asks for a client certificate but
// needs none: a client without one is served, one with a certificate the
// CA signed is served, one with another CA's certificate is refused.
func TestHTTPSChecksAClientCertificateOnlyIfOneIsGiven(t *testing.T) {
	t.Parallel()
	clientCA := newTestCA(t, "client CA")
	caFile := filepath.Join(t.TempDir(), "clients.pem")
	writeFile(t, caFile, clientCA.pem)
	ts, addr := startHTTPSOnly(t, "--tls-client-ca", caFile)
	url := "https://" + addr + "/healthz"
	_, _, good := clientCA.issue(t, "scraper", clientCert)
	_, _, bad := newTestCA(t, "other CA").issue(t, "stranger", clientCert)
	for _, tc := range []struct {
		what  string
		certs []tls.Certificate
	}{{"no certificate", nil}, {"the client CA's certificate", []tls.Certificate{good}}} {
		if resp, body := fetchGet(t, httpsClient(t, ts.ca, tc.certs...), url); resp.StatusCode != 200 || body != "ok\n" {
			t.Errorf("%s: %d %q", tc.what, resp.StatusCode, body)
		}
	}
	// The client sends its certificate even though another CA signed it;
	// over TLS 1.3 it learns of the refusal at its first read.
	badClient := httpsClient(t, ts.ca)
	badClient.Transport.(*http.Transport).TLSClientConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &bad, nil
	}
	if resp, err := badClient.Get(url); err == nil {
		resp.Body.Close()
		t.Fatalf("a certificate of another CA was served: %s", resp.Status)
	}
}

// SIGHUP rotates HTTPS's certificate too, without --tls-listen: new
// handshakes get the new one, a keep-alive connection made before goes
// on.
func TestHTTPSSIGHUPRotatesTheCertificate(t *testing.T) {
	t.Parallel()
	ts, addr := startHTTPSOnly(t)
	old, err := tls.DialWithDialer(&net.Dialer{Timeout: defaultTimeout}, "tcp", addr, &tls.Config{RootCAs: ts.ca.pool()})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	oldR := bufio.NewReader(old)
	healthz := func() {
		t.Helper()
		_ = old.SetDeadline(time.Now().Add(defaultTimeout))
		if _, err := io.WriteString(old, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(oldR, nil)
		if err != nil {
			t.Fatalf("/healthz over the connection made before: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok\n" {
			t.Fatalf("/healthz over the connection made before: %d %q", resp.StatusCode, b)
		}
	}
	healthz()

	newCA := newTestCA(t, "new server CA")
	certPEM, keyPEM, _ := newCA.issue(t, "beanpole renewed", serverCert)
	writeFile(t, ts.keyFile, keyPEM)
	writeFile(t, ts.certFile, certPEM)
	ts.signal(t, syscall.SIGHUP)
	subject := func() string {
		tc, err := tls.DialWithDialer(&net.Dialer{Timeout: defaultTimeout}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		defer tc.Close()
		return tc.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	waitFor(t, defaultTimeout, "the new certificate on HTTPS", func() bool { return subject() == "beanpole renewed" })
	if resp, body := fetchGet(t, httpsClient(t, newCA), "https://"+addr+"/healthz"); resp.StatusCode != 200 || body != "ok\n" {
		t.Fatalf("/healthz with the new CA: %d %q", resp.StatusCode, body)
	}
	healthz()
	select {
	case <-ts.exited:
		t.Fatal("the server exited on SIGHUP")
	default:
	}
}

// A cluster node with the TLS files serves HTTPS on --http: `beanpole
// cluster status` reaches it with --tls-ca (and says what is wrong
// without), and a node joins through it with --join, trusting the group's
// CA.
func TestClusterStatusAndJoinOverHTTPS(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "cluster CA")
	certs := t.TempDir()
	caFile := filepath.Join(certs, "ca.pem")
	tc := newTestCluster(t, 1)
	n1 := tc.nodes[0]
	tc.start(n1, nodeTLSArgs(t, ca, certs, n1.id)...)
	if tc.leader() != n1 {
		t.Fatal("the single node does not lead")
	}
	status := func(args ...string) (string, error) {
		out, err := exec.Command(target.bin, append([]string{"cluster", "status"}, args...)...).CombinedOutput()
		return string(out), err
	}
	var st clusterStatus
	waitFor(t, 30*time.Second, "n1's status over HTTPS", func() bool {
		out, err := status("--http", n1.http, "--tls-ca", caFile)
		return err == nil && json.Unmarshal([]byte(out), &st) == nil && st.State == "leader"
	})
	if out, err := status("--http", "https://"+n1.http, "--tls-ca", caFile); err != nil || !strings.Contains(out, `"state": "leader"`) {
		t.Fatalf("status --http https://%s --tls-ca: %v\n%s", n1.http, err, out)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--http", n1.http}, "beanpole cluster: 400 Bad Request: Client sent an HTTP request to an HTTPS server.\n" +
			"beanpole cluster: " + n1.http + " serves HTTPS: ask https://" + n1.http + " (beanpole cluster --tls-ca FILE trusts the CA in FILE)\n"},
		{[]string{"--http", "https://" + n1.http}, "certificate signed by unknown authority"},
	} {
		out, err := status(bad.args...)
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(out, bad.want) {
			t.Errorf("status %q: %v\n%s\nwant exit status 1 and %q", bad.args, err, out, bad.want)
		}
	}

	c := n1.srv.dial(t)
	put(t, c, 0, 0, 60, "before the join", 1)
	n2 := tc.newNode("n2")
	tc.nodes = append(tc.nodes, n2)
	tc.start(n2, append(nodeTLSArgs(t, ca, certs, n2.id), "--join", n1.http)...)
	waitFor(t, 30*time.Second, "n2 in the configuration", func() bool {
		out, err := status("--http", n1.http, "--tls-ca", caFile, "--token-file", tc.token)
		return err == nil && json.Unmarshal([]byte(out), &st) == nil && len(st.Members) == 2
	})
	waitFor(t, 30*time.Second, "n2 to forward to the leader", func() bool {
		return strings.Contains(try(n2.srv.addr, "peek 1\r\n", 5*time.Second), "FOUND 1 15\r\nbefore the join\r\n")
	})

	// A follower reloads its HTTPS certificate at SIGHUP.
	n2.srv.signal(t, syscall.SIGHUP)
	waitFor(t, 30*time.Second, "n2's reload", func() bool {
		return strings.Contains(n2.srv.out.String(), "SIGHUP: the TLS certificate, key and client CA were reloaded")
	})
	if exited(n2.srv) {
		t.Fatal("n2, a follower, exited on SIGHUP")
	}
}

// Over HTTPS too, idle keep-alive connections of one address holding
// every --http-max-conns place are closed for another address's probes,
// which are all answered.
func TestHTTPSIdleConnectionsMakeRoomForAnotherAddress(t *testing.T) {
	t.Parallel()
	const maxConns = 8
	ts, addr := startHTTPSOnly(t, "--http-max-conns", strconv.Itoa(maxConns))
	conf := &tls.Config{RootCAs: ts.ca.pool()}
	for i := range maxConns {
		d := &net.Dialer{Timeout: defaultTimeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
		tc, err := tls.DialWithDialer(d, "tcp", addr, conf)
		if err != nil {
			t.Fatalf("the abuser's connection %d: %v", i, err)
		}
		t.Cleanup(func() { tc.Close() })
		if _, err := io.WriteString(tc, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		if got, err := readHealthz(tc); err != nil {
			t.Fatalf("the abuser's connection %d: %q, %v", i, got, err)
		}
	}
	tr := &http.Transport{TLSClientConfig: conf, DisableKeepAlives: true,
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}).DialContext}
	c := &http.Client{Timeout: defaultTimeout, Transport: tr}
	for i := range 10 {
		resp, body := fetchGet(t, c, "https://"+addr+"/healthz")
		if resp.StatusCode != http.StatusOK || body != "ok\n" {
			t.Fatalf("the honest address's probe %d: %d %q", i+1, resp.StatusCode, body)
		}
	}
}
