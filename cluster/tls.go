package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// tlsLayer is raft's stream layer with mutual TLS: every connection a node
// accepts must present a certificate its CA signed, and every connection
// it opens checks the peer's the same way, so a node without a valid
// certificate can neither join the group nor be reached by it.
type tlsLayer struct {
	net.Listener
	cfg func() *tls.Config // the configuration of the next link
}

// Accept wraps the next connection in TLS; the handshake runs on the first
// read, on the goroutine raft gives the connection.
func (l *tlsLayer) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(c, l.cfg()), nil
}

// Dial opens a connection to a peer and completes the handshake, checking
// the peer's certificate for the host it dialled.
func (l *tlsLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	host, _, err := net.SplitHostPort(string(addr))
	if err != nil {
		return nil, err
	}
	cfg := l.cfg().Clone()
	cfg.ServerName = host
	return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", string(addr), cfg)
}

// NodeTLS is the configuration of mutual TLS between nodes: cert is this
// node's certificate (its host names or addresses as they appear in
// --raft), ca the pool that signed every node's.
func NodeTLS(cert tls.Certificate, ca *x509.CertPool) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      ca,
		ClientCAs:    ca,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}
}
