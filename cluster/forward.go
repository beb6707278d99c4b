package cluster

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Forwarder serves a follower's client listeners: each connection is
// joined, byte for byte, to the client address of the node that leads, so a
// client configured with any node's address works unchanged.
type Forwarder struct {
	node  *Node
	lns   []net.Listener
	self  string // this node's own client address: never a target
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	stop  chan struct{}
}

// leaderWait is how long a connection waits for a leader to be known
// (an election) before it is closed.
const leaderWait = 10 * time.Second

// Forward starts forwarding the connections accepted on lns.
func (n *Node) Forward(lns []net.Listener, self string) *Forwarder {
	f := &Forwarder{node: n, lns: lns, self: self, conns: map[net.Conn]struct{}{}, stop: make(chan struct{})}
	for _, ln := range lns {
		f.wg.Add(1)
		go f.accept(ln)
	}
	return f
}

type deadliner interface{ SetDeadline(time.Time) error }

func (f *Forwarder) accept(ln net.Listener) {
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
		go f.join(c)
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
func (f *Forwarder) join(c net.Conn) {
	defer f.untrack(c)
	var addr string
	for deadline := time.Now().Add(leaderWait); ; {
		if addr = f.node.LeaderClient(); addr != "" && addr != f.self {
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
		_, _ = io.Copy(dst, src)
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
