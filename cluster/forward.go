package cluster

import (
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Forwarder serves a follower's client listeners: each connection is
// joined, byte for byte, to the client address of the node that leads, so a
// client configured with any node's address works unchanged. A TLS
// listener's connections go to the leader's TLS listener as they are: the
// client's TLS session is with the leader.
type Forwarder struct {
	node  *Node
	lns   []net.Listener // the plaintext listeners, then the TLS one if any
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	stop  chan struct{}
}

// leaderWait is how long a connection waits for a leader to be known
// (an election) before it is closed.
const leaderWait = 10 * time.Second

// Forward starts forwarding the connections accepted on lns (plaintext)
// and tlsLn (TLS; nil: none).
func (n *Node) Forward(lns []net.Listener, tlsLn net.Listener) *Forwarder {
	f := &Forwarder{node: n, lns: slices.Clone(lns), conns: map[net.Conn]struct{}{}, stop: make(chan struct{})}
	if tlsLn != nil {
		f.lns = append(f.lns, tlsLn)
	}
	for _, ln := range lns {
		f.wg.Add(1)
		go f.accept(ln, false)
	}
	if tlsLn != nil {
		f.wg.Add(1)
		go f.accept(tlsLn, true)
	}
	return f
}

type deadliner interface{ SetDeadline(time.Time) error }

func (f *Forwarder) accept(ln net.Listener, tls bool) {
	defer f.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case <-f.stop:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like
			continue
		}
		if !f.track(c) {
			c.Close()
			return
		}
		go f.join(c, tls)
	}
}

func (f *Forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conns == nil {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *Forwarder) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	c.Close()
}

// join connects c to the leader and copies both ways until either side
// closes; a half-close is passed on, so commands sent before it are
// answered as on the leader itself.
func (f *Forwarder) join(c net.Conn, tls bool) {
	defer f.untrack(c)
	var addr string
	for deadline := time.Now().Add(leaderWait); ; {
		if addr = f.node.LeaderClient(tls); addr != "" {
			break
		}
		if time.Now().After(deadline) {
			return
		}
		select {
		case <-f.stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	up, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return
	}
	if !f.track(up) {
		up.Close()
		return
	}
	defer f.untrack(up)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		copyConn(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			dst.Close()
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}

// copyBufs are the buffers copyConn reads into. A copy holds one only
// while bytes are on their way, so an idle forwarded client costs no
// buffer, and no descriptor beyond its two sockets: io.Copy between two
// TCP connections splices, holding a pipe (two more descriptors) in each
// direction for as long as the connection lasts.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyConn copies what src sends to dst until src's end or an error.
func copyConn(dst, src net.Conn) {
	sc, ok := src.(syscall.Conn)
	if !ok {
		_, _ = io.Copy(dst, src)
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	for {
		// rc.Read waits for src to be readable each time the callback
		// returns false, holding no buffer meanwhile.
		var b *[]byte
		var n int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			b = copyBufs.Get().(*[]byte)
			for {
				if n, rerr = unix.Read(int(fd), *b); rerr != unix.EINTR {
					break
				}
			}
			if rerr == unix.EAGAIN {
				copyBufs.Put(b)
				b = nil
				return false
			}
			return true
		})
		if b == nil { // src closed while waiting
			return
		}
		if err == nil && rerr == nil && n > 0 {
			_, err = dst.Write((*b)[:n])
		}
		copyBufs.Put(b)
		if err != nil || rerr != nil || n <= 0 {
			return
		}
	}
}

// Stop stops accepting and closes every forwarded connection, as a
// leader's death would: the listeners stay open for the server that
// takes them over.
func (f *Forwarder) Stop() {
	close(f.stop)
	for _, ln := range f.lns {
		if d, ok := ln.(deadliner); ok {
			_ = d.SetDeadline(time.Unix(1, 0))
		}
	}
	f.wg.Wait()
	for _, ln := range f.lns {
		if d, ok := ln.(deadliner); ok {
			_ = d.SetDeadline(time.Time{})
		}
	}
	f.mu.Lock()
	conns := f.conns
	f.conns = nil
	f.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}
