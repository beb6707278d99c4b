package share

import (
	"net"
	"net/netip"
	"strconv"
	"testing"
)

func addr(s string) netip.Prefix { return ClientOf(netip.MustParseAddr(s)) }

// One host may use every place while nobody else wants one; at the limit
// its idle places go first, then, for a host within its share, its oldest
// busy ones down to its share, and a host at its share is refused.
func TestTakeSharesTheLimitAmongClients(t *testing.T) {
	var tb Table
	const limit = 8
	abuser, honest := addr("127.0.0.2"), addr("127.0.0.3")
	evicted := map[int]bool{}
	var places []*Place
	for i := range limit {
		p, out := tb.Take(abuser, limit, func() { evicted[i] = true })
		if out != Granted {
			t.Fatalf("place %d under the limit: %v", i, out)
		}
		places = append(places, p)
	}
	if _, out := tb.Take(abuser, limit, nil); out != Refused {
		t.Fatalf("the holder of every place got another: %v", out)
	}
	// An idle place goes first, even one that is not the oldest.
	tb.SetIdle(places[5], true)
	if _, out := tb.Take(honest, limit, nil); out != TookIdle || !evicted[5] || len(evicted) != 1 {
		t.Fatalf("at the limit with an idle place: %v, evicted %v", out, evicted)
	}
	if tb.Release(places[5]) {
		t.Fatal("a place taken back was given back again")
	}
	// Then the oldest of the host past its share, until the newcomer
	// holds its share (2 of 8).
	if _, out := tb.Take(honest, limit, nil); out != TookOver || !evicted[0] {
		t.Fatalf("a host within its share at the limit: %v, evicted %v", out, evicted)
	}
	if _, out := tb.Take(honest, limit, nil); out != Refused {
		t.Fatalf("a host at its share took another place: %v", out)
	}
	if tb.Len() != limit {
		t.Fatalf("%d places held, want %d", tb.Len(), limit)
	}
	for _, p := range places {
		tb.Release(p)
	}
	if tb.Len() != 2 || len(tb.clients) != 1 {
		t.Fatalf("%d places, %d clients after the abuser left; want 2 and 1", tb.Len(), len(tb.clients))
	}
}

// No host is over its share while all are within it: at the limit, with
// every client at or under its share and nothing idle, a newcomer waits.
func TestTakeRefusesWhenEveryoneIsWithinTheirShare(t *testing.T) {
	var tb Table
	for i := range 4 {
		for range 2 {
			if _, out := tb.Take(addr("10.0.0."+strconv.Itoa(i+1)), 8, nil); out != Granted {
				t.Fatalf("under the limit: %v", out)
			}
		}
	}
	if _, out := tb.Take(addr("10.0.0.9"), 8, nil); out != Refused {
		t.Fatalf("a newcomer took a place from a host within its share: %v", out)
	}
}

// A connection's address counts as its client: IPv4 by address, IPv6 by
// /64 (admin's TestClientOf has the cases of ClientOf itself); anything
// but TCP as no address.
func TestClientOfAddr(t *testing.T) {
	for ip, want := range map[string]string{"192.0.2.1": "192.0.2.1/32", "2001:db8::1:2:3:4": "2001:db8::/64"} {
		if got := ClientOfAddr(&net.TCPAddr{IP: net.ParseIP(ip), Port: 9}).String(); got != want {
			t.Errorf("ClientOfAddr(%s) = %s, want %s", ip, got, want)
		}
	}
	if ClientOfAddr(&net.UnixAddr{Name: "x"}).IsValid() || ClientOfAddr(nil).IsValid() {
		t.Error("a Unix address, or none, counts as an IP client")
	}
}
