// Package share divides a bounded number of places (HTTP connections, TLS
// handshakes in progress) among client addresses, so that no one host can
// take them all while others wait.
//
// Below the limit every request for a place is granted, whoever asks: one
// host may use them all while nobody else wants one. At the limit, a place
// is made for the newcomer by taking one back:
//
//  1. an idle place first (an HTTP connection between requests), the
//     oldest of the client holding the most places;
//  2. else, when the newcomer holds less than its share (a quarter of the
//     limit, at least one), the oldest place of the client holding the
//     most, if that client holds more than its share;
//  3. else the newcomer is refused.
//
// So a host past its share always loses a place to one within it, and a
// place left idle is never kept from a client who would use it. A client
// is an IPv4 address or an IPv6 /64, which one host usually has to itself.
//
// A Table's lock is a leaf; the work under it is bounded by the limit (the
// clients and one client's places are scanned), and a place taken back is
// closed after the lock is let go.
package share

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Fraction is the share of the limit a client keeps when others wait: a
// quarter.
const Fraction = 4

// Share is a client's share of limit places.
func Share(limit int) int { return max(1, limit/Fraction) }

// ClientOf is the client an address counts as: its IPv4 address, or its
// IPv6 /64; the zero Prefix when there is no IP address (a Unix socket).
func ClientOf(a netip.Addr) netip.Prefix {
	if !a.IsValid() {
		return netip.Prefix{}
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, _ := a.Prefix(64)
	return p
}

// ClientOfAddr is ClientOf for a net.Addr (a *net.TCPAddr), the zero
// Prefix for any other.
func ClientOfAddr(addr net.Addr) netip.Prefix {
	if ta, ok := addr.(*net.TCPAddr); ok {
		a, _ := netip.AddrFromSlice(ta.IP)
		return ClientOf(a)
	}
	return netip.Prefix{}
}

// Table is the places held, by client.
type Table struct {
	mu      sync.Mutex
	n       int
	clients map[netip.Prefix]*client
}

// client is one client's places, oldest first.
type client struct {
	key         netip.Prefix
	n, idle     int
	first, last *Place
}

// Place is one place held. Its methods are safe on a nil *Place.
type Place struct {
	c          *client // nil once given back or taken back
	prev, next *Place
	idle       bool
	evict      func()
}

// Outcome says how Take got its place, or why not.
type Outcome int

const (
	Granted  Outcome = iota // a free place
	TookIdle                // an idle place was taken back for it
	TookOver                // a place of a client past its share was taken back for it
	Refused                 // none: the limit is reached and nothing may be taken back
)

// Take asks for a place for client under limit (limit <= 0: none). evict
// closes what holds the place, should it be taken back for another; it is
// called once at most, under no lock, and the place is then free already.
func (t *Table) Take(key netip.Prefix, limit int, evict func()) (*Place, Outcome) {
	if limit <= 0 {
		return nil, Refused
	}
	t.mu.Lock()
	out := Granted
	var victim *Place
	if t.n >= limit {
		if victim = t.victimLocked(key, limit); victim == nil {
			t.mu.Unlock()
			return nil, Refused
		}
		out = TookOver
		if victim.idle {
			out = TookIdle
		}
		t.dropLocked(victim)
	}
	if t.clients == nil {
		t.clients = make(map[netip.Prefix]*client)
	}
	c := t.clients[key]
	if c == nil {
		c = &client{key: key}
		t.clients[key] = c
	}
	p := &Place{c: c, evict: evict}
	p.prev = c.last
	if c.last != nil {
		c.last.next = p
	} else {
		c.first = p
	}
	c.last = p
	c.n++
	t.n++
	t.mu.Unlock()
	if victim != nil && victim.evict != nil {
		victim.evict()
	}
	return p, out
}

// victimLocked picks the place to take back for a newcomer from key at
// the limit, or nil (rules 1 to 3 of the package comment).
func (t *Table) victimLocked(key netip.Prefix, limit int) *Place {
	var most, mostIdle *client
	for _, c := range t.clients {
		if most == nil || c.n > most.n {
			most = c
		}
		if c.idle > 0 && (mostIdle == nil || c.n > mostIdle.n) {
			mostIdle = c
		}
	}
	if mostIdle != nil {
		for p := mostIdle.first; p != nil; p = p.next {
			if p.idle {
				return p
			}
		}
	}
	share := Share(limit)
	if mine := t.clients[key]; mine != nil && mine.n >= share {
		return nil
	}
	if most == nil || most.n <= share {
		return nil
	}
	return most.first
}

// dropLocked frees p's place.
func (t *Table) dropLocked(p *Place) {
	c := p.c
	if p.prev != nil {
		p.prev.next = p.next
	} else {
		c.first = p.next
	}
	if p.next != nil {
		p.next.prev = p.prev
	} else {
		c.last = p.prev
	}
	p.prev, p.next, p.c = nil, nil, nil
	if p.idle {
		c.idle--
	}
	c.n--
	t.n--
	if c.n == 0 {
		delete(t.clients, c.key)
	}
}

// Release gives p's place back. It reports false when p was taken back
// for another (or given back before).
func (t *Table) Release(p *Place) bool {
	if p == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if p.c == nil {
		return false
	}
	t.dropLocked(p)
	return true
}

// SetIdle marks p idle (it may be taken back first) or busy.
func (t *Table) SetIdle(p *Place, idle bool) {
	if p == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if p.c == nil || p.idle == idle {
		return
	}
	p.idle = idle
	if idle {
		p.c.idle++
	} else {
		p.c.idle--
	}
}

// Len is how many places are held.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

// TLS handshakes in progress are places shared this way: each holds a
// descriptor and a goroutine until it ends, so clients that connect and
// stall could otherwise take every descriptor. A handshake must finish
// within HandshakeTimeout, and at most Handshakes() may be in progress.

// HandshakeTimeout is how long a TLS handshake may take.
const HandshakeTimeout = 10 * time.Second

// maxHandshakes bounds the TLS handshakes in progress however high the
// open-file limit: a thousand handshakes a second from a legitimate crowd
// finish long before a thousand more arrive.
const maxHandshakes = 1024

// Handshakes is how many TLS handshakes may be in progress at once: a
// quarter of the open-file limit, read at each call (so a limit changed
// while serving applies at once), at most maxHandshakes.
func Handshakes() int {
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) != nil {
		return maxHandshakes
	}
	return int(max(1, min(maxHandshakes, lim.Cur/4)))
}
