package cluster

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	"golang.org/x/sys/unix"
)

// The raft port's bounds against peers that are not nodes:
const (
	// linkGreeting is how long an accepted link may take to finish its TLS
	// handshake and send its first byte; a silent one is closed.
	linkGreeting = 10 * time.Second
	// maxGreeting is how many accepted links may be in their greeting at
	// once; more are closed as they come, so that a flood of silent
	// connections holds at most this many goroutines and descriptors and
	// the nodes' own links still get through once it ebbs.
	maxGreeting = 64
	// maxLinks is how many greeted links may be open at once for each
	// group the port carries (linkgroups.go). A node keeps a handful per
	// peer and group (raft's pool of three, the heartbeat, the pipeline):
	// 256 is room for any group hashicorp/raft can run.
	maxLinks = 256
)

// linkLayer is a node's raft port: TCP, or mutual TLS when tls is set.
// Accepted connections are greeted before raft sees them (linkGreeting,
// maxGreeting, maxLinks); with TLS, both ends of every link must present a
// node's certificate (verifyNode). Its links carry every raft group the
// node hosts; each group's raft sees them through its own stream layer
// (linkgroups.go).
type linkLayer struct {
	ln  net.Listener
	tls func() *tls.Config // nil: plaintext
	// members are the hosts of the group's raft addresses; empty while a
	// node that was never bootstrapped waits to be added (then any node
	// certificate of the CA is let in).
	members func() []string

	closed    chan struct{}
	closeOnce sync.Once
	greeting  atomic.Int64
	greetFor  time.Duration // linkGreeting; shorter in tests

	mu     sync.Mutex
	links  map[*link]struct{}     // open links, both directions
	groups map[uint16]*groupLayer // the groups the port carries
	// refused counts connections closed before raft saw them.
	refused atomic.Uint64
}

func newLinkLayer(ln net.Listener, cfg func() *tls.Config, members func() []string, greetFor time.Duration) *linkLayer {
	l := &linkLayer{ln: ln, tls: cfg, members: members, closed: make(chan struct{}),
		links: map[*link]struct{}{}, groups: map[uint16]*groupLayer{}, greetFor: greetFor}
	go l.acceptLoop()
	return l
}

// link is a connection of the layer; Close takes it off the layer's set.
type link struct {
	net.Conn
	l      *linkLayer
	r      *bufio.Reader // the greeting's peeked byte, then the socket
	dialed bool
	once   sync.Once
}

func (c *link) Read(p []byte) (int, error) {
	if c.r != nil {
		return c.r.Read(p)
	}
	return c.Conn.Read(p)
}

func (c *link) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.links, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

func (l *linkLayer) acceptLoop() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			var ne net.Error
			select {
			case <-l.closed:
				return
			default:
			}
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				l.Close()
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like
			continue
		}
		l.mu.Lock()
		open, room := len(l.links), maxLinks*max(len(l.groups), 1)
		l.mu.Unlock()
		if l.greeting.Load() >= maxGreeting || open >= room {
			l.refused.Add(1)
			c.Close()
			continue
		}
		l.greeting.Add(1)
		tuneLink(c)
		go l.greet(c)
	}
}

// greet finishes an accepted connection's handshake and waits for its
// first byte (and a data group's preamble), within linkGreeting, then
// hands it to its group's raft.
func (l *linkLayer) greet(c net.Conn) {
	defer l.greeting.Add(-1)
	_ = c.SetDeadline(time.Now().Add(l.greetFor))
	conn := c
	if l.tls != nil {
		tc := tls.Server(c, l.serverConfig())
		if err := tc.Handshake(); err != nil {
			l.refused.Add(1)
			c.Close()
			return
		}
		conn = tc
	}
	r := bufio.NewReaderSize(conn, 16)
	g, err := l.groupOf(r)
	if err != nil {
		l.refused.Add(1)
		conn.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	lk := l.track(&link{Conn: conn, l: l, r: r})
	select {
	case g.accepted <- lk:
	case <-g.closed:
		lk.Close()
	case <-l.closed:
		lk.Close()
	}
}

func (l *linkLayer) track(c *link) *link {
	l.mu.Lock()
	l.links[c] = struct{}{}
	l.mu.Unlock()
	return c
}

// Close stops accepting for every group; open links are raft's to close.
func (l *linkLayer) Close() error {
	var err error
	l.closeOnce.Do(func() {
		close(l.closed)
		err = l.ln.Close()
	})
	return err
}

// Addr is the port's address as the other nodes reach it.
func (l *linkLayer) Addr() net.Addr { return l.ln.Addr() }

// dial opens a link to a peer; with TLS the handshake checks that the peer
// is a node (verifyNode) with the certificate for the host it dialled.
func (l *linkLayer) dial(addr raft.ServerAddress, timeout time.Duration) (*link, error) {
	d := &net.Dialer{Timeout: timeout, KeepAliveConfig: linkKeepAlive, Control: func(_, _ string, rc syscall.RawConn) error {
		return userTimeout(rc)
	}}
	if l.tls == nil {
		c, err := d.Dial("tcp", string(addr))
		if err != nil {
			return nil, err
		}
		return l.track(&link{Conn: c, l: l, dialed: true}), nil
	}
	host, _, err := net.SplitHostPort(string(addr))
	if err != nil {
		return nil, err
	}
	cfg := l.tls().Clone()
	cfg.ServerName = host
	cfg.VerifyConnection = func(cs tls.ConnectionState) error { return verifyNode(cs.PeerCertificates, nil) }
	c, err := tls.DialWithDialer(d, "tcp", string(addr), cfg)
	if err != nil {
		return nil, err
	}
	return l.track(&link{Conn: c, l: l, dialed: true}), nil
}

func (l *linkLayer) serverConfig() *tls.Config {
	cfg := l.tls().Clone()
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	cfg.VerifyConnection = func(cs tls.ConnectionState) error { return verifyNode(cs.PeerCertificates, l.members()) }
	return cfg
}

// Reverify closes every open TLS link whose peer's certificate no longer
// verifies against the configuration loaded last (after SIGHUP): a node
// whose certificate was revoked by taking it off the CA is cut off at
// once, not at its next connection. It returns how many were closed.
func (l *linkLayer) Reverify() int {
	if l.tls == nil {
		return 0
	}
	cfg := l.tls()
	l.mu.Lock()
	links := make([]*link, 0, len(l.links))
	for c := range l.links {
		links = append(links, c)
	}
	l.mu.Unlock()
	n := 0
	for _, c := range links {
		tc, ok := c.Conn.(*tls.Conn)
		if !ok {
			continue
		}
		certs := tc.ConnectionState().PeerCertificates
		if len(certs) == 0 {
			continue // still in its handshake, which checks the new files
		}
		opts := x509.VerifyOptions{Roots: cfg.ClientCAs, Intermediates: x509.NewCertPool(),
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		var members []string
		if c.dialed {
			opts.Roots, opts.KeyUsages = cfg.RootCAs, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			opts.DNSName, _, _ = net.SplitHostPort(c.RemoteAddr().String())
		} else {
			members = l.members()
		}
		for _, ic := range certs[1:] {
			opts.Intermediates.AddCert(ic)
		}
		_, err := certs[0].Verify(opts)
		if err == nil {
			err = verifyNode(certs, members)
		}
		if err != nil {
			c.Close()
			n++
		}
	}
	return n
}

// verifyNode checks, beyond the CA's signature that crypto/tls checked, that
// a link's peer is a node: its certificate serves both ends of a link
// (serverAuth and clientAuth, as a node both dials and accepts, where a
// client's certificate has clientAuth alone), and, when members is not
// empty, names (DNS or IP) the host of one of the group's members.
func verifyNode(certs []*x509.Certificate, members []string) error {
	if len(certs) == 0 {
		return errors.New("cluster: the peer presented no certificate")
	}
	leaf := certs[0]
	server := slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	client := slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	if slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageAny) || len(leaf.ExtKeyUsage) == 0 {
		server, client = true, true
	}
	if !server || !client {
		return fmt.Errorf("cluster: %q is not a node's certificate: a link needs both serverAuth and clientAuth", leaf.Subject.CommonName)
	}
	if len(members) == 0 {
		return nil
	}
	for _, h := range members {
		if leaf.VerifyHostname(h) == nil {
			return nil
		}
	}
	return fmt.Errorf("cluster: %q names no member of the group", leaf.Subject.CommonName)
}

// A link to a peer whose host vanished (no FIN, no RST: a partition, a
// power cut) fails within linkDead instead of blocking raft on it for the
// kernel's minutes: unacknowledged data past TCP_USER_TIMEOUT, and an idle
// link past keepalive's probes. A deposed leader's replication, and a
// stop's wait for raft, are bounded by it.
const linkDead = 5 * time.Second

var linkKeepAlive = net.KeepAliveConfig{Enable: true, Idle: time.Second, Interval: time.Second, Count: 4}

// tuneLink sets an accepted link's keepalive and TCP_USER_TIMEOUT.
func tuneLink(c net.Conn) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	_ = tc.SetKeepAliveConfig(linkKeepAlive)
	if rc, err := tc.SyscallConn(); err == nil {
		_ = userTimeout(rc)
	}
}

func userTimeout(rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(linkDead/time.Millisecond))
	})
	if err != nil {
		return err
	}
	return serr
}

// NodeTLS is the configuration of mutual TLS between nodes: cert is this
// node's certificate (serverAuth and clientAuth, its host names or
// addresses as they appear in --raft), ca the pool that signed every
// node's.
func NodeTLS(cert tls.Certificate, ca *x509.CertPool) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      ca,
		ClientCAs:    ca,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}
}

// NodeOnlyTLS is NodeTLS checking, beyond the CA's signature, that the
// peer is a node (verifyNode): for what only nodes may reach besides the
// raft port, the data groups' internal listeners, and the connections
// routers open to them. A client's certificate from the same CA is
// refused there as on the raft port.
func NodeOnlyTLS(cert tls.Certificate, ca *x509.CertPool) *tls.Config {
	c := NodeTLS(cert, ca)
	c.VerifyConnection = func(cs tls.ConnectionState) error { return verifyNode(cs.PeerCertificates, nil) }
	return c
}
