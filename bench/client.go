package main

import (
	"fmt"
	"net"
	"strconv"
	"time"
)

// Ctrl is a blocking connection. Over plaintext it does set-up and checks
// (stats, readiness) and never carries measured traffic; the TLS scenarios'
// clients (tls.go) are Ctrls over crypto/tls, on plaintext for their
// comparison with it.
type Ctrl struct {
	c    net.Conn
	buf  []byte
	next int // bytes of buf that the last reply took
}

func newCtrl(c net.Conn) *Ctrl { return &Ctrl{c: c, buf: make([]byte, 0, 8192)} }

// DialCtrl connects to 127.0.0.1:port.
func DialCtrl(port int) (*Ctrl, error) {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 5*time.Second)
	if err != nil {
		return nil, err
	}
	return newCtrl(c), nil
}

// Close closes the connection.
func (x *Ctrl) Close() {
	if x != nil && x.c != nil {
		x.c.Close()
	}
}

// Cmd sends one command line (CRLF appended) and returns its reply. Line,
// Body and Name are copies.
func (x *Ctrl) Cmd(line string) (Reply, error) {
	r, err := x.Do([]byte(line + "\r\n"))
	if err != nil {
		return Reply{}, fmt.Errorf("%s: %w", line, err)
	}
	r.Line = append([]byte(nil), r.Line...)
	r.Body = append([]byte(nil), r.Body...)
	r.Name = append([]byte(nil), r.Name...)
	return r, nil
}

// Do sends req (whole commands, CRLFs included) and returns the first
// reply. Its Line, Body and Name point into x's buffer: they hold until the
// next call.
func (x *Ctrl) Do(req []byte) (Reply, error) {
	x.buf = x.buf[:copy(x.buf, x.buf[x.next:])]
	x.next = 0
	_ = x.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := x.c.Write(req); err != nil {
		return Reply{}, err
	}
	for {
		var r Reply
		n, need, err := ParseReply(x.buf, &r)
		if err != nil {
			return Reply{}, err
		}
		if n > 0 {
			x.next = n
			return r, nil
		}
		if need > cap(x.buf) {
			nb := make([]byte, len(x.buf), need)
			copy(nb, x.buf)
			x.buf = nb
		} else if len(x.buf) == cap(x.buf) {
			nb := make([]byte, len(x.buf), 2*cap(x.buf))
			copy(nb, x.buf)
			x.buf = nb
		}
		m, err := x.c.Read(x.buf[len(x.buf):cap(x.buf)])
		if err != nil {
			return Reply{}, err
		}
		x.buf = x.buf[:len(x.buf)+m]
	}
}

// Stats runs "stats" and returns the parsed dictionary.
func (x *Ctrl) Stats() (map[string]string, error) {
	r, err := x.Cmd("stats")
	if err != nil {
		return nil, err
	}
	if r.Kind != KOK {
		return nil, fmt.Errorf("stats: got %q", r.Line)
	}
	return ParseStats(r.Body)
}

// statInt reads an integer statistic.
func statInt(m map[string]string, key string) (int64, error) {
	v, ok := m[key]
	if !ok {
		return 0, fmt.Errorf("stats has no %q", key)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stats %s: %q is not an integer", key, v)
	}
	return n, nil
}

// checkStats verifies integer statistics against expected values.
func checkStats(port int, want map[string]int64) error {
	x, err := DialCtrl(port)
	if err != nil {
		return fmt.Errorf("stats check: %w", err)
	}
	defer x.Close()
	m, err := x.Stats()
	if err != nil {
		return fmt.Errorf("stats check: %w", err)
	}
	for k, w := range want {
		v, err := statInt(m, k)
		if err != nil {
			return fmt.Errorf("stats check: %w", err)
		}
		if v != w {
			return fmt.Errorf("stats check: %s is %d, want %d", k, v, w)
		}
	}
	return nil
}

// waitStat polls stats until key reaches at least want.
func waitStat(port int, key string, want int64, timeout time.Duration) error {
	x, err := DialCtrl(port)
	if err != nil {
		return err
	}
	defer x.Close()
	end := time.Now().Add(timeout)
	var last int64 = -1
	for {
		m, err := x.Stats()
		if err != nil {
			return err
		}
		v, err := statInt(m, key)
		if err != nil {
			return err
		}
		last = v
		if v >= want {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("stats %s stuck at %d, want %d (after %v)", key, last, want, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
