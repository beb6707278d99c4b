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
// take the configuration loaded last; open connections keep theirs.
type TLSFiles struct {
	Cert, Key string
	ClientCA  string // "": clients need no certificate
	cur       atomic.Pointer[tls.Config]
}

// LoadTLS reads the files once; the error says which one is wrong.
func LoadTLS(cert, key, clientCA string) (*TLSFiles, error) {
	f := &TLSFiles{Cert: cert, Key: key, ClientCA: clientCA}
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
		return fmt.Errorf("--tls-cert %s, --tls-key %s: %w", f.Cert, f.Key, err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if f.ClientCA != "" {
		pem, err := os.ReadFile(f.ClientCA)
		if err != nil {
			return fmt.Errorf("--tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--tls-client-ca %s: %w", f.ClientCA, errors.New("no PEM certificate in it"))
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	f.cur.Store(c)
	return nil
}

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
