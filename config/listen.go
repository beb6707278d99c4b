package config

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/rs/zerolog"
)

// maxUnixPath is sizeof(sockaddr_un.sun_path) - 1 on Linux: the longest
// path that still leaves room for the terminating NUL upstream reserves.
const maxUnixPath = 107

// Listen opens the server's listening sockets the way beanstalkd's
// make_server_socket does, in this order:
//
//  1. the sockets handed over by systemd (LISTEN_PID/LISTEN_FDS), in which
//     case -l and -p are ignored with a warning (upstream serves only the
//     first; beanpole serves them all);
//  2. -l unix:PATH, a UNIX socket (-p ignored);
//  3. TCP on -l (default 0.0.0.0) and -p.
//
// An empty -l or -p is refused (checkEmpty).
//
// desc names the sockets for the log: "127.0.0.1:11300", "[::1]:11300",
// "unix:/run/beanpole.sock", or for inherited sockets the same prefixed
// with "systemd fd 3 ", joined by ", fd 4 ...". The caller exits with
// ExitListen on error.
func Listen(cfg *Config, log zerolog.Logger) (lns []net.Listener, desc string, err error) {
	lns, desc, err = inheritedListeners(cfg, log)
	if lns != nil || err != nil {
		return lns, desc, err
	}
	if err := checkEmpty(cfg); err != nil {
		return nil, "", err
	}
	var ln net.Listener
	if path, ok := strings.CutPrefix(cfg.ListenAddr, "unix:"); ok {
		ln, desc, err = listenUnix(path, log)
	} else {
		ln, desc, err = listenTCP(cfg.ListenAddr, cfg.Port)
	}
	if err != nil {
		return nil, "", err
	}
	return []net.Listener{ln}, desc, nil
}

// checkEmpty refuses an empty -l or -p, as a unit passes them when the
// variable it expands is unset. Upstream exits 111 on an empty -l
// (getaddrinfo finds no such host) but listens on a random port on an
// empty -p; neither is what anyone meant, so both are refused with the
// same exit code.
func checkEmpty(cfg *Config) error {
	if cfg.addrGiven && cfg.ListenAddr == "" {
		return errors.New("-l '': the listen address is empty; give one (0.0.0.0 for every IPv4 interface) or leave -l out")
	}
	if cfg.portGiven && cfg.Port == "" && !strings.HasPrefix(cfg.ListenAddr, "unix:") {
		return fmt.Errorf("-p '': the port is empty; give one (%s is the default) or leave -p out", DefaultPort)
	}
	return nil
}

// listenUnix replaces a stale socket file but refuses to delete anything
// else: a socket file left behind by a previous run must not block a
// restart, yet a typo in -l must not delete someone's data. Like upstream
// it uses stat, so a symlink to a socket counts as a socket (and the link
// itself is what gets removed).
func listenUnix(path string, log zerolog.Logger) (net.Listener, string, error) {
	desc := "unix:" + path
	if path == "" {
		return nil, desc, errors.New("empty UNIX socket path in -l unix:")
	}
	if len(path) > maxUnixPath {
		return nil, desc, fmt.Errorf("socket path %s is too long (%d characters), where maximum allowed is %d",
			path, len(path), maxUnixPath)
	}
	if st, err := os.Stat(path); err == nil {
		if st.Mode().Type() != fs.ModeSocket {
			return nil, desc, fmt.Errorf("%s: another file already exists in the given path", path)
		}
		log.Warn().Str("path", path).Msg("removing existing local socket to replace it")
		if err := os.Remove(path); err != nil {
			return nil, desc, fmt.Errorf("unlink: %w", err)
		}
	}

	// Go treats a leading '@' as a Linux abstract socket; upstream makes a
	// file of that name. "./" keeps upstream's meaning.
	name := path
	if strings.HasPrefix(name, "@") {
		name = "./" + name
	}
	ln, err := net.Listen("unix", name)
	if err != nil {
		return nil, desc, err
	}
	return ln, desc, nil
}

// upstreamKeepAlive is what upstream sets on its listen socket: plain
// SO_KEEPALIVE with the kernel's default timers (Linux passes it on to
// accepted sockets). Negative fields tell Go to leave those timers alone
// rather than impose its own 15-second defaults. Go already sets
// TCP_NODELAY on every accepted TCP connection, the other option upstream
// needs, and SO_REUSEADDR on the listener; SO_LINGER{0,0} is the kernel
// default, so nothing else is needed.
var upstreamKeepAlive = net.KeepAliveConfig{Enable: true, Idle: -1, Interval: -1, Count: -1}

// listenTCP follows upstream's getaddrinfo(host, port, AI_PASSIVE) loop:
// try each address of host in resolver order and keep the first that binds
// and listens. A missing host means 0.0.0.0 only, which is what
// getaddrinfo(NULL) yields first on Linux: upstream's default is IPv4-only.
func listenTCP(host, port string) (net.Listener, string, error) {
	portNum, err := net.LookupPort("tcp", port)
	if err != nil {
		return nil, "", fmt.Errorf("getaddrinfo(): port %q: %w", port, err)
	}

	addrs, err := resolveListenHost(host)
	if err != nil {
		return nil, "", fmt.Errorf("getaddrinfo(): %w", err)
	}

	lc := net.ListenConfig{KeepAliveConfig: upstreamKeepAlive}
	var errs []error
	for _, a := range addrs {
		a = a.Unmap()
		ap := netip.AddrPortFrom(a, uint16(portNum))
		ln, err := lc.Listen(context.Background(), tcpNetwork(a), ap.String())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return ln, ln.Addr().String(), nil
	}
	return nil, "", errors.Join(errs...)
}

// resolveListenHost turns -l into candidate addresses. IP literals are
// used as given (an IPv6 zone included); as an extension, "[::1]" is
// accepted as well as upstream's "::1". Anything else is a host name.
func resolveListenHost(host string) ([]netip.Addr, error) {
	if host == "" {
		return []netip.Addr{netip.IPv4Unspecified()}, nil
	}
	if len(host) > 2 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", host)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	return addrs, nil
}

// tcpNetwork picks the Go network for one address (already unmapped, so an
// IPv4-mapped literal is plain IPv4). IPv4 addresses get an AF_INET socket. The IPv6 wildcard "::" gets Go's "tcp",
// which leaves IPV6_V6ONLY off so it also accepts IPv4 as upstream's "-l ::"
// does on a default Linux; any other IPv6 address gets "tcp6".
func tcpNetwork(a netip.Addr) string {
	switch {
	case a.Is4():
		return "tcp4"
	case a.IsUnspecified():
		return "tcp"
	}
	return "tcp6"
}
