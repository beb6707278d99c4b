package admin

import (
	"bytes"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// A client gets failBurst wrong tokens at once, then one every failEvery;
// right ones cost nothing.
func TestFailuresAllowABurstThenOneEverySixSeconds(t *testing.T) {
	f := newFailures(zerolog.Nop())
	c := clientOf("192.0.2.7:5555")
	t0 := time.Unix(1_000_000, 0)
	for range 100 {
		if w := f.take(c, t0); w != 0 {
			t.Fatalf("a right token was refused: wait %v", w)
		}
		f.refund(c)
	}
	for i := range failBurst {
		if w := f.take(c, t0); w != 0 {
			t.Fatalf("wrong token %d refused: wait %v", i+1, w)
		}
	}
	if w := f.take(c, t0.Add(time.Second)); w != 5*time.Second {
		t.Fatalf("past the burst: wait %v, want 5s", w)
	}
	if w := f.take(c, t0.Add(failEvery)); w != 0 {
		t.Fatalf("after %v: wait %v, want a try", failEvery, w)
	}
	if w := f.take(c, t0.Add(failEvery)); w != failEvery {
		t.Fatalf("the try spent: wait %v, want %v", w, failEvery)
	}
	if w := f.take(clientOf("192.0.2.8:5555"), t0); w != 0 {
		t.Fatalf("another address was refused: wait %v", w)
	}
}

// IPv6 clients count by /64; IPv4 ones, mapped or not, by address.
func TestClientOf(t *testing.T) {
	for remote, want := range map[string]string{
		"192.0.2.7:1":              "192.0.2.7/32",
		"[::ffff:192.0.2.7]:1":     "192.0.2.7/32",
		"[2001:db8:1:2:3:4:5:6]:1": "2001:db8:1:2::/64",
		"[fe80::1%eth0]:1":         "fe80::/64",
		"not an address":           "invalid Prefix",
	} {
		if got := clientOf(remote).String(); got != want {
			t.Errorf("clientOf(%q) = %s, want %s", remote, got, want)
		}
	}
}

// Past failClients addresses, new ones share one allowance, so the map
// stays bounded and guessing from many addresses is still limited.
func TestFailuresRememberABoundedNumberOfAddresses(t *testing.T) {
	f := newFailures(zerolog.Nop())
	t0 := time.Unix(1_000_000, 0)
	for i := range failClients {
		f.take(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32), t0)
	}
	for i := range failBurst {
		if w := f.take(clientOf("192.0.2.1:1"), t0); w != 0 {
			t.Fatalf("overflow try %d refused", i+1)
		}
	}
	if w := f.take(clientOf("192.0.2.2:1"), t0); w == 0 {
		t.Fatal("a new address past the bound got an allowance of its own")
	}
	if len(f.until) > failClients+1 {
		t.Fatalf("%d addresses remembered", len(f.until))
	}
	// Once the old entries are spent, they make room.
	if w := f.take(clientOf("192.0.2.3:1"), t0.Add(time.Hour)); w != 0 || len(f.until) > 2 {
		t.Fatalf("an hour later: wait %v, %d addresses remembered", w, len(f.until))
	}
}

// Refusals are logged at most once a second; a line counts those left out
// since the one before.
func TestFailuresLogAtMostOnceASecond(t *testing.T) {
	var buf bytes.Buffer
	f := newFailures(zerolog.New(&buf))
	r := httptest.NewRequest("POST", "/jobs/1/delete", nil)
	t0 := time.Unix(1_000_000, 0)
	for _, d := range []time.Duration{0, 100, 500, 999, 1000, 1500, 2100} {
		f.note(t0.Add(d*time.Millisecond), r, "refused")
	}
	want := `{"level":"warn","remote":"192.0.2.1:1234","path":"/jobs/1/delete","suppressed":0,"message":"refused"}
{"level":"warn","remote":"192.0.2.1:1234","path":"/jobs/1/delete","suppressed":3,"message":"refused"}
{"level":"warn","remote":"192.0.2.1:1234","path":"/jobs/1/delete","suppressed":1,"message":"refused"}
`
	if got := buf.String(); got != want {
		t.Fatalf("log:\n%s\nwant:\n%s", got, want)
	}
}
