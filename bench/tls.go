package main

// The tls scenarios: beanpole serving TLS itself (--tls-listen) against C
// beanstalkd behind stunnel, and against beanpole's own plaintext with the
// same client. The epoll load generator speaks no TLS, so these scenarios
// drive their connections from goroutines, one per connection, with Go's
// crypto/tls; the plaintext contender is driven by the same code over bare
// TCP, so a ratio to it is what TLS costs.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// stunnelPath is the stunnel binary that puts TLS in front of beanstalkd.
var stunnelPath = "/usr/bin/stunnel4"

// tlsFiles is the self-signed certificate (for 127.0.0.1) both contenders
// serve, made once per run in a temp dir.
var tlsFiles struct {
	once           sync.Once
	dir, cert, key string
	pool           *x509.CertPool
	err            error
}

func tlsMaterial() (cert, key string, pool *x509.CertPool, err error) {
	f := &tlsFiles
	f.once.Do(func() {
		f.err = func() error {
			dir, err := os.MkdirTemp("", "beanpole-bench-tls-")
			if err != nil {
				return err
			}
			registerTemp(dir)
			f.dir = dir
			pk, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			if err != nil {
				return err
			}
			tmpl := &x509.Certificate{
				SerialNumber:          big.NewInt(1),
				Subject:               pkix.Name{CommonName: "127.0.0.1"},
				IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
				NotBefore:             time.Now().Add(-time.Hour),
				NotAfter:              time.Now().Add(24 * time.Hour),
				KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
				ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
				BasicConstraintsValid: true,
				IsCA:                  true,
			}
			der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &pk.PublicKey, pk)
			if err != nil {
				return err
			}
			kder, err := x509.MarshalPKCS8PrivateKey(pk)
			if err != nil {
				return err
			}
			f.cert, f.key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
			if err := os.WriteFile(f.cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
				return err
			}
			if err := os.WriteFile(f.key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
				return err
			}
			c, err := x509.ParseCertificate(der)
			if err != nil {
				return err
			}
			f.pool = x509.NewCertPool()
			f.pool.AddCert(c)
			return nil
		}()
	})
	return f.cert, f.key, f.pool, f.err
}

// StartTLS starts ct serving TLS on a port of its own (Server.TLSPort)
// beside its plaintext port: beanpole with --tls-listen, beanstalkd with
// stunnel in front of it (in the Server's group, so its CPU and memory
// count as the server's and it stops with it).
func StartTLS(ct Contender, extra []string, pinCPU int, nofile uint64) (*Server, error) {
	cert, key, _, err := tlsMaterial()
	if err != nil {
		return nil, fmt.Errorf("TLS certificate: %w", err)
	}
	tport, err := freePort()
	if err != nil {
		return nil, err
	}
	taddr := "127.0.0.1:" + strconv.Itoa(tport)
	if !ct.Stunnel {
		s, err := StartServer(ct, append(extra, "--tls-listen", taddr, "--tls-cert", cert, "--tls-key", key), pinCPU, nofile)
		if err != nil {
			return nil, err
		}
		if err := s.waitListen(tport); err != nil {
			return nil, err
		}
		s.TLSPort = tport
		return s, nil
	}
	if _, err := os.Stat(stunnelPath); err != nil {
		return nil, fmt.Errorf("%w: stunnel: %v (Debian: apt-get install stunnel4)", errNoStart, err)
	}
	s, err := StartServer(ct, extra, pinCPU, nofile)
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(tlsFiles.dir, "stunnel-"+strconv.Itoa(tport)+".conf")
	// debug = err: stunnel logs every connection at its default level.
	body := fmt.Sprintf("foreground = yes\npid =\ndebug = err\n\n[beanstalkd]\naccept = %s\nconnect = 127.0.0.1:%d\ncert = %s\nkey = %s\n",
		taddr, s.Port, cert, key)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		s.Stop()
		return nil, err
	}
	st, err := spawn("stunnel", stunnelPath, []string{conf}, pinCPU, nofile, ct.CPU)
	if err == nil {
		err = st.waitListen(tport)
	}
	if err != nil {
		s.Stop()
		return nil, err
	}
	st.threadPerConn = true
	s.group = []*Server{st}
	s.TLSPort = tport
	return s, nil
}

// tlsDialer dials the connections of a tls scenario: TLS to Server.TLSPort
// when the server has one, else plaintext to its port.
type tlsDialer struct {
	addr string
	cfg  *tls.Config
}

func newTLSDialer(s *Server) (*tlsDialer, error) {
	if s.TLSPort == 0 {
		return &tlsDialer{addr: "127.0.0.1:" + strconv.Itoa(s.Port)}, nil
	}
	_, _, pool, err := tlsMaterial()
	if err != nil {
		return nil, err
	}
	// No session cache: every connection makes a full handshake. X25519
	// only: Go would offer X25519MLKEM768 first, which beanpole accepts
	// and stunnel's OpenSSL may not, and the two should do the same work.
	return &tlsDialer{addr: "127.0.0.1:" + strconv.Itoa(s.TLSPort), cfg: &tls.Config{
		RootCAs: pool, ServerName: "127.0.0.1", CurvePreferences: []tls.CurveID{tls.X25519},
	}}, nil
}

// dial connects and, over TLS, completes the handshake.
func (d *tlsDialer) dial() (*Ctrl, error) {
	nd := net.Dialer{Timeout: 10 * time.Second}
	if d.cfg == nil {
		c, err := nd.Dial("tcp", d.addr)
		if err != nil {
			return nil, err
		}
		return newCtrl(c), nil
	}
	c, err := tls.DialWithDialer(&nd, "tcp", d.addr, d.cfg)
	if err != nil {
		return nil, err
	}
	return newCtrl(c), nil
}

// ping runs "list-tube-used" and checks its reply.
func ping(x *Ctrl) error {
	r, err := x.Do([]byte("list-tube-used\r\n"))
	if err != nil {
		return fmt.Errorf("list-tube-used: %w", err)
	}
	if r.Kind != KUsing || string(r.Name) != "default" {
		return unexpected("list-tube-used", &r)
	}
	return nil
}

// gwindow is the measured window of a goroutine-driven run: wall time, this
// process's CPU and the server's, like meter for the epoll loop.
type gwindow struct {
	base   time.Time
	on     atomic.Bool
	m      meter
	stopAt chan struct{} // closed when the window ends
}

// runWindow opens the window after warmup and closes it dur later, in a
// goroutine of its own; stop ends it early.
func runWindow(srv *Server, warmup, dur time.Duration, stop <-chan struct{}) *gwindow {
	w := &gwindow{base: time.Now(), stopAt: make(chan struct{})}
	go func() {
		defer close(w.stopAt)
		select {
		case <-time.After(warmup):
		case <-stop:
			return
		}
		w.m.t0, w.m.c0, w.m.s0 = int64(time.Since(w.base)), selfCPU(), srv.CPU()
		w.on.Store(true)
		select {
		case <-time.After(dur):
		case <-stop:
		}
		w.on.Store(false)
		w.m.t1, w.m.c1, w.m.s1 = int64(time.Since(w.base)), selfCPU(), srv.CPU()
		w.m.on, w.m.done = true, true
	}()
	return w
}

// ended reports whether the window has closed (or never opened and was
// stopped).
func (w *gwindow) ended() bool {
	select {
	case <-w.stopAt:
		return true
	default:
		return false
	}
}

// runWorkers runs n workers until the window ends or one fails, and waits for
// them at most until deadline; it returns the first error.
func runWorkers(n int, deadline time.Duration, work func(i int, stop *atomic.Bool) error) error {
	var (
		wg    sync.WaitGroup
		stop  atomic.Bool
		mu    sync.Mutex
		first error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := work(i, &stop); err != nil {
				stop.Store(true)
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(deadline):
		stop.Store(true)
		return fmt.Errorf("workers did not finish within %v", deadline)
	}
	return first
}

// runTLSRoundTrip runs put/reserve/delete round trips, one command in
// flight, on conns connections with size-byte bodies, all on the default
// tube; every reply is checked against a shared ledger.
func runTLSRoundTrip(rc *RunCtx, conns, size int) (Metrics, error) {
	o := rc.Opt
	d, err := newTLSDialer(rc.Srv)
	if err != nil {
		return nil, err
	}
	xs := make([]*Ctrl, conns)
	for i := range xs {
		if xs[i], err = d.dial(); err != nil {
			return nil, fmt.Errorf("connection %d: %w", i, err)
		}
		defer xs[i].Close()
	}
	var (
		mu     sync.Mutex
		led    = NewLedger(size)
		hist   Hist
		cycles int64
	)
	hdr := appendPut(nil, jobPri, 0, jobTTR, max(size, seqDigits))
	stopWin := make(chan struct{})
	win := runWindow(rc.Srv, o.Warmup, o.Duration, stopWin)
	err = runWorkers(conns, o.Warmup+o.Duration+o.Drain, func(i int, stop *atomic.Bool) error {
		x := xs[i]
		var buf []byte
		for !win.ended() && !stop.Load() {
			mu.Lock()
			seq := led.New(0, 0)
			mu.Unlock()
			buf = append(led.AppendHead(append(buf[:0], hdr...), seq), led.Filler(seq)...)
			buf = append(buf, "\r\n"...)
			t0 := time.Now()
			r, err := x.Do(buf)
			if err != nil {
				return fmt.Errorf("put: %w", err)
			}
			if r.Kind != KInserted {
				return unexpected("put", &r)
			}
			t1 := time.Now()
			mu.Lock()
			err = led.Inserted(seq, r.ID)
			mu.Unlock()
			if err != nil {
				return err
			}
			if r, err = x.Do([]byte("reserve\r\n")); err != nil {
				return fmt.Errorf("reserve: %w", err)
			}
			if r.Kind != KReserved {
				return unexpected("reserve", &r)
			}
			t2 := time.Now()
			mu.Lock()
			got, err := led.Reserved(r.ID, r.Body)
			mu.Unlock()
			if err != nil {
				return err
			}
			id := r.ID
			buf = appendIDCmd(buf[:0], "delete", id)
			if r, err = x.Do(buf); err != nil {
				return fmt.Errorf("delete %d: %w", id, err)
			}
			if r.Kind != KDeleted {
				return unexpected("delete "+strconv.FormatUint(id, 10), &r)
			}
			t3 := time.Now()
			rec := win.on.Load()
			mu.Lock()
			err = led.Deleted(got)
			if rec {
				cycles++
				hist.Record(int64(t1.Sub(t0)))
				hist.Record(int64(t2.Sub(t1)))
				hist.Record(int64(t3.Sub(t2)))
			}
			mu.Unlock()
			if err != nil {
				return err
			}
		}
		return nil
	})
	close(stopWin)
	if err != nil {
		return nil, err
	}
	if err := led.CheckAllDone(); err != nil {
		return nil, err
	}
	if err := checkStats(rc.Srv.Port, map[string]int64{
		"current-jobs-ready": 0, "current-jobs-reserved": 0, "total-jobs": int64(led.Count()),
	}); err != nil {
		return nil, err
	}
	mx := Metrics{"conns": float64(conns), "size": float64(size)}
	<-win.stopAt
	if err := win.m.fill(mx, "", float64(cycles), &hist); err != nil {
		return nil, err
	}
	mx["mbps"] = mx["rate"] * float64(size) / 1e6
	return mx, nil
}

// runHandshakes has conns workers each open a connection (a full TLS
// handshake), run one command and close it, over and over.
func runHandshakes(rc *RunCtx, conns int) (Metrics, error) {
	o := rc.Opt
	d, err := newTLSDialer(rc.Srv)
	if err != nil {
		return nil, err
	}
	var (
		mu   sync.Mutex
		hist Hist
		n    int64
	)
	stopWin := make(chan struct{})
	win := runWindow(rc.Srv, o.Warmup, o.Duration, stopWin)
	err = runWorkers(conns, o.Warmup+o.Duration+o.Drain, func(i int, stop *atomic.Bool) error {
		for !win.ended() && !stop.Load() {
			t0 := time.Now()
			x, err := d.dial()
			if err != nil {
				return err
			}
			err = ping(x)
			x.Close()
			if err != nil {
				return err
			}
			if win.on.Load() {
				mu.Lock()
				n++
				hist.Record(int64(time.Since(t0)))
				mu.Unlock()
			}
		}
		return nil
	})
	close(stopWin)
	if err != nil {
		return nil, err
	}
	mx := Metrics{"conns": float64(conns)}
	<-win.stopAt
	if err := win.m.fill(mx, "", float64(n), &hist); err != nil {
		return nil, err
	}
	return mx, nil
}

// runTLSIdle opens n connections that each answer one command and stay
// open, and reports the growth of the server's memory per connection: for
// stunnel in front of beanstalkd, of the two processes together, and of
// stunnel alone as tunnel_rss_per_conn.
func runTLSIdle(rc *RunCtx, n int) (Metrics, error) {
	if lim := int(rc.Srv.NoFile) - fdMargin; rc.Srv.NoFile > 0 && 3*n > lim {
		return nil, fmt.Errorf("%s allows only %d open files; %d idle TLS connections may not fit", rc.Srv.Name, rc.Srv.NoFile, n)
	}
	d, err := newTLSDialer(rc.Srv)
	if err != nil {
		return nil, err
	}
	tunnelRSS := func() (int64, error) {
		if len(rc.Srv.group) == 0 {
			return 0, nil
		}
		return rc.Srv.group[0].RSS()
	}
	rss0, err := rc.Srv.RSSAll()
	if err != nil {
		return nil, err
	}
	trss0, err := tunnelRSS()
	if err != nil {
		return nil, err
	}
	xs := make([]*Ctrl, n)
	defer func() {
		for _, x := range xs {
			x.Close()
		}
	}()
	t0 := time.Now()
	const par = 16
	err = runWorkers(par, 60*time.Second, func(w int, stop *atomic.Bool) error {
		for i := w; i < n && !stop.Load(); i += par {
			x, err := d.dial()
			if err != nil {
				return fmt.Errorf("connection %d: %w", i, err)
			}
			xs[i] = x
			if err := ping(x); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	acc := time.Since(t0)
	// +1: the stats connection itself
	if err := waitStat(rc.Srv.Port, "current-connections", int64(n+1), 30*time.Second); err != nil {
		return nil, err
	}
	time.Sleep(300 * time.Millisecond)
	rss1, err := rc.Srv.RSSAll()
	if err != nil {
		return nil, err
	}
	trss1, err := tunnelRSS()
	if err != nil {
		return nil, err
	}
	for i, x := range xs {
		if err := ping(x); err != nil {
			return nil, fmt.Errorf("idle connection %d: %w", i, err)
		}
	}
	mx := Metrics{
		"conns":        float64(n),
		"accept_ms":    float64(acc) / 1e6,
		"rss0_mib":     float64(rss0) / (1 << 20),
		"rss_mib":      float64(rss1) / (1 << 20),
		"rss_per_conn": float64(rss1-rss0) / 1024 / float64(n),
	}
	if len(rc.Srv.group) > 0 {
		mx["tunnel_rss_per_conn"] = float64(trss1-trss0) / 1024 / float64(n)
	}
	return mx, nil
}
