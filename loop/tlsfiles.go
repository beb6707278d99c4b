package loop

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// TLSFiles are the certificate, key and client CA files of --tls-cert,
// --tls-key and --tls-client-ca, read again by Reload (SIGHUP). Handshakes
// take the configuration loaded last; open connections keep theirs. The
// protocol's listener (Config) and the HTTP side (HTTPConfig) serve the
// same certificate from the same load.
type TLSFiles struct {
	Cert, Key string
	ClientCA  string // "": clients need no certificate
	// Flags name the three files in errors: --tls-cert, --tls-key and
	// --tls-client-ca, or the links' --cluster-* (LoadLinkTLS); What names
	// them together in the log.
	Flags [3]string
	What  string
	cur   atomic.Pointer[tls.Config]
	http  atomic.Pointer[tls.Config]
}

// LoadTLS reads the files once; the error says which one is wrong.
func LoadTLS(cert, key, clientCA string) (*TLSFiles, error) {
	return loadTLS(&TLSFiles{Cert: cert, Key: key, ClientCA: clientCA, Flags: [3]string{"--tls-cert", "--tls-key", "--tls-client-ca"},
		What: "the TLS certificate, key and client CA"})
}

// LoadLinkTLS reads the files of a cluster node's links (--cluster-cert,
// --cluster-key, --cluster-ca) once.
func LoadLinkTLS(cert, key, ca string) (*TLSFiles, error) {
	return loadTLS(&TLSFiles{Cert: cert, Key: key, ClientCA: ca, Flags: [3]string{"--cluster-cert", "--cluster-key", "--cluster-ca"},
		What: "the links' certificate, key and CA (--cluster-*)"})
}

func loadTLS(f *TLSFiles) (*TLSFiles, error) {
	if err := f.Reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// Reload reads the files again. On error the configuration loaded before
// stays in use.
func (f *TLSFiles) Reload() error {
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return fmt.Errorf("%s %s, %s %s: %w", f.Flags[0], f.Cert, f.Flags[1], f.Key, err)
	}
	// Full-sized records from the first byte: a queue's clients are
	// rarely on links where a browser's small first records pay off, and
	// each record costs the loop a seal.
	c := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12, DynamicRecordSizingDisabled: true}
	if f.ClientCA != "" {
		pem, err := os.ReadFile(f.ClientCA)
		if err != nil {
			return fmt.Errorf("%s: %w", f.Flags[2], err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s %s: %w", f.Flags[2], f.ClientCA, errors.New("no PEM certificate in it"))
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	// The HTTP side checks a client certificate when one is presented
	// but needs none: a scraper that trusts the server's CA and has no
	// certificate of its own is served. It speaks HTTP/1.1 only, so that
	// the limit on connections is a limit on requests in progress.
	h := c.Clone()
	h.NextProtos = []string{"http/1.1"}
	if f.ClientCA != "" {
		h.ClientAuth = tls.VerifyClientCertIfGiven
	}
	f.cur.Store(c)
	f.http.Store(h)
	return nil
}

// Loaded is the configuration Reload stored last: the certificate, and
// the client CA's pool in ClientCAs (nil without --tls-client-ca).
func (f *TLSFiles) Loaded() *tls.Config { return f.cur.Load() }

// Config is the tls.Config to serve with: each handshake takes the
// configuration Reload stored last.
func (f *TLSFiles) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return f.cur.Load(), nil
		},
	}
}

// HTTPConfig is the tls.Config of the HTTP side (--http): the same
// certificate as Config's, reloaded alike, with client certificates
// checked if given rather than required.
func (f *TLSFiles) HTTPConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return f.http.Load(), nil
		},
	}
}
