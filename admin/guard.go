package admin

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/beanpole/beanpole/internal/share"
	"github.com/rs/zerolog"
)

// What keeps the HTTP side safe to put on a network: a check of the Host
// header against DNS rebinding, and a limit on wrong tokens.

// hostGuard refuses a request whose Host header does not name this
// server. A web page of another site can make a browser talk to the
// listener under the site's own name (DNS rebinding) and read what it
// answers; the Host header then carries that foreign name. Accepted are
// the IP address the connection reached (whatever the port), every
// loopback address, "localhost", and the names given with --http-host.
//
// /healthz and /readyz answer whatever the Host: they tell nothing but
// "ok" or the serving state, and load balancers probe them under names
// of their own.
type hostGuard struct {
	names map[string]bool
	next  http.Handler
}

func newHostGuard(names []string, next http.Handler) *hostGuard {
	g := &hostGuard{names: map[string]bool{"localhost": true}, next: next}
	for _, n := range names {
		g.names[normHost(n)] = true
	}
	return g
}

// normHost is a host name as compared: lower case, without a trailing dot
// or the brackets of an IPv6 literal.
func normHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")), ".")
}

func (g *hostGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" || g.allowed(r) {
		g.next.ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusMisdirectedRequest)
	fmt.Fprintf(w, "misdirected request: the Host %q is not a name of this server; start beanpole with --http-host NAME to serve it under another name\n", r.Host)
}

func (g *hostGuard) allowed(r *http.Request) bool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = normHost(host)
	if g.names[host] {
		return true
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	ip = ip.Unmap().WithZone("")
	if ip.IsLoopback() {
		return true
	}
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if local == nil {
		return false
	}
	ap, err := netip.ParseAddrPort(local.String())
	return err == nil && ap.Addr().Unmap().WithZone("") == ip
}

// Wrong tokens: each client address may get failBurst wrong in a row,
// then one every failEvery; past that, every request of its that carries
// a token is answered 429 with Retry-After, the right token included, so
// that guessing gets no faster by sending more. An IPv6 client counts by
// its /64, which one host usually has to itself.
const (
	failBurst = 10
	failEvery = 6 * time.Second
	// failClients bounds the addresses remembered; past it, new ones
	// share one allowance.
	failClients = 4096
)

// failures is the per-address allowance of wrong tokens, kept as the
// time each address's allowance is whole again (a GCRA: an address is
// refused while that time is more than (failBurst-1)*failEvery away), and
// the log of failures, at most a line a second.
type failures struct {
	mu    sync.Mutex
	until map[netip.Prefix]time.Time
	log   zerolog.Logger
	// logged is when the last line was written; quiet counts the
	// failures not logged since.
	logged time.Time
	quiet  int
}

func newFailures(log zerolog.Logger) *failures {
	return &failures{until: map[netip.Prefix]time.Time{}, log: log}
}

// clientOf is the key of a remote address: its IPv4 address, or its IPv6
// /64; the zero Prefix when the address does not parse.
func clientOf(remote string) netip.Prefix {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Prefix{}
	}
	return share.ClientOf(ap.Addr())
}

// take spends one of the client's tries before its token is compared;
// wait > 0 means none is left, for that long. A try whose token is right
// is given back (refund), so only wrong ones count; spending first keeps
// concurrent guesses within the allowance.
func (f *failures) take(c netip.Prefix, now time.Time) (wait time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	u, ok := f.until[c]
	if !ok && len(f.until) >= failClients {
		for k, v := range f.until {
			if !v.After(now) {
				delete(f.until, k)
			}
		}
		if len(f.until) >= failClients {
			c = netip.Prefix{}
			u = f.until[c]
		}
	}
	if u.Before(now) {
		u = now
	}
	if over := u.Sub(now) - (failBurst-1)*failEvery; over > 0 {
		return over
	}
	f.until[c] = u.Add(failEvery)
	return 0
}

// refund gives back the try take spent on a right token.
func (f *failures) refund(c netip.Prefix) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u, ok := f.until[c]; ok {
		f.until[c] = u.Add(-failEvery)
	}
}

// note logs a refused try, unless a line was written less than a second
// ago: then it is counted, and the next line says how many were not
// logged.
func (f *failures) note(now time.Time, r *http.Request, msg string) {
	f.mu.Lock()
	if now.Sub(f.logged) < time.Second {
		f.quiet++
		f.mu.Unlock()
		return
	}
	quiet := f.quiet
	f.logged, f.quiet = now, 0
	f.mu.Unlock()
	f.log.Warn().Str("remote", r.RemoteAddr).Str("path", r.URL.Path).Int("suppressed", quiet).Msg(msg)
}

// retryAfter is a wait in whole seconds, rounded up.
func retryAfter(d time.Duration) int {
	return int(math.Ceil(d.Seconds()))
}
