// Package config turns beanstalkd's command line into a Config and sets up
// what the server needs before it serves: the listen socket (including
// systemd socket activation), the open-file limit and the -u user switch.
//
// beanpole is started by init scripts and client test suites written for
// beanstalkd, so the flag syntax, messages and exit codes follow
// beanstalkd 1.12 byte for byte; see Parse.
package config

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"time"
)

// Defaults of beanstalkd 1.12 (dat.h, serv.c).
const (
	DefaultPort       = "11300"
	DefaultMaxJobSize = 1<<16 - 1 // JOB_DATA_SIZE_LIMIT_DEFAULT
	MaxJobSizeLimit   = 1 << 30   // JOB_DATA_SIZE_LIMIT_MAX: -z is clamped to this
	MaxBinlogSize     = 1 << 30   // -s is clamped to this (a bigger job gets a file of its own anyway)
	DefaultSyncEvery  = 50 * time.Millisecond
	DefaultBinlogSize = 10 << 20
	// DefaultMetricsMaxTubes is how many tubes get their own series in
	// /metrics unless --metrics-max-tubes says otherwise.
	DefaultMetricsMaxTubes = 1000
	// DefaultHTTPMaxConns is how many HTTP connections may be open at
	// once unless --http-max-conns says otherwise.
	DefaultHTTPMaxConns = 256
	// DefaultStopGrace is how long /readyz answers 503 stopping at
	// SIGTERM before the listeners close, unless --stop-grace says
	// otherwise.
	DefaultStopGrace = time.Second
)

// progName prefixes every diagnostic, as upstream prefixes argv[0]. A fixed
// name keeps the messages stable whatever path the binary was started by.
const progName = "beanpole"

// MaxGroups bounds --groups: each group a node hosts costs it a raft
// instance and a log.
const MaxGroups = 256

// Config is the parsed command line.
type Config struct {
	ListenAddr string        // -l ("" = default: 0.0.0.0, IPv4 only like upstream's getaddrinfo(NULL))
	Port       string        // -p, default "11300" (service names allowed)
	User       string        // -u
	MaxJobSize uint32        // -z, default 65535; above 1073741824 clamp with a warning
	BinlogDir  string        // -b
	WantSync   bool          // true unless -F was last
	SyncEvery  time.Duration // -f MS, default 50ms; 0 = fsync before every ack
	BinlogSize int64         // -s, default 10485760
	Verbosity  int           // count of -V
	// MaxJobMemory is --max-job-memory: the ceiling on the memory held by
	// jobs in bytes; 0 is no ceiling, -1 (the default) derives it from the
	// memory budget (DefaultJobMemory).
	MaxJobMemory int64
	// HTTPAddr is --http: where metrics, health and readiness are served
	// ("" = not at all); HTTPPprof (--http-pprof) adds /debug/pprof/.
	HTTPAddr  string
	HTTPPprof bool
	// HTTPTokenFile is --http-token-file: the file holding the token that
	// allows the dashboard's actions ("" = the dashboard is read-only).
	HTTPTokenFile string
	// HTTPHosts are --http-host's names (repeatable): the Host headers
	// served besides the listener's address and localhost.
	HTTPHosts []string
	// HTTPPublicBodies is --http-public-bodies: the dashboard shows job
	// bodies without the token.
	HTTPPublicBodies bool
	// HTTPMaxConns is --http-max-conns: how many HTTP connections may be
	// open at once (admin/conns.go says who gets a place at the cap).
	HTTPMaxConns int
	// HTTPPlain is --http-plain: --http serves plain HTTP even with
	// --tls-cert and --tls-key (see HTTPS).
	HTTPPlain bool
	// MetricsMaxTubes is --metrics-max-tubes: tubes beyond this many are
	// summed into one series in /metrics.
	MetricsMaxTubes int
	// MetricsTotalNames is --metrics-total-names: the counters of stats
	// and stats-tube are named with a _total suffix in /metrics.
	MetricsTotalNames bool
	// StopGrace is --stop-grace: at SIGTERM or SIGINT, /readyz answers
	// 503 stopping for this long while clients are still served, so that
	// a load balancer polling it stops sending new ones before the
	// listeners close. Only with --http: without it nobody can see.
	StopGrace time.Duration
	// LogJSON is --log-json: log JSON lines instead of the console format.
	LogJSON bool
	// Cluster mode: --cluster-dir (raft's log, snapshots and node state;
	// replaces -b), --node-id, --raft (the raft transport's HOST:PORT) and
	// --bootstrap (the initial members, ID=HOST:PORT,...).
	ClusterDir, NodeID, RaftAddr, Bootstrap string
	// Groups is --groups: the data groups the cluster's tubes are spread
	// over (0: the tubes live in the one group every cluster has).
	Groups int
	// Replicas is --replicas: how many of the nodes each data group runs
	// on (0: every node).
	Replicas int
	// Join is --join: a member's --http address that adds this node to a
	// running group on its first start, as HOST:PORT or with the scheme
	// to speak, http://HOST:PORT or https://HOST:PORT (see JoinURL).
	Join string
	// ClusterImport is --cluster-import: a binlog directory (beanpole's, or
	// upstream beanstalkd's, imported first) whose jobs seed an empty group
	// when this node first leads it.
	ClusterImport string
	// The links between nodes: --cluster-cert, --cluster-key and
	// --cluster-ca (PEM) secure them with a certificate and a CA of their
	// own, apart from the clients'; RaftInsecure (--raft-insecure-plaintext)
	// lets them run in plaintext on a --raft address that is not loopback.
	ClusterCert, ClusterKey, ClusterCA string
	RaftInsecure                       bool
	// TLS: --tls-listen (HOST:PORT of a TLS listener beside the plaintext
	// one), --tls-only (no plaintext listener), --tls-cert and --tls-key
	// (PEM), --tls-client-ca (clients must present a certificate it
	// signed).
	TLSListen, TLSCert, TLSKey, TLSClientCA string
	TLSOnly                                 bool

	// Whether -l / -p appeared at all. Upstream warns that they are
	// ignored when systemd hands over a socket, even when the value given
	// equals the default, so "given" cannot be inferred from the value.
	addrGiven, portGiven bool
}

// Defaults returns the configuration of a command line with no flags.
func Defaults() Config {
	return Config{
		Port:       DefaultPort,
		MaxJobSize: DefaultMaxJobSize,
		WantSync:   true,
		SyncEvery:  DefaultSyncEvery,
		BinlogSize: DefaultBinlogSize,

		MaxJobMemory:    -1,
		MetricsMaxTubes: DefaultMetricsMaxTubes,
		HTTPMaxConns:    DefaultHTTPMaxConns,
		StopGrace:       DefaultStopGrace,
	}
}

// Parse parses argv without the program name exactly like beanstalkd 1.12's
// optparse. It writes -v/-h/notice/error text to stdout/stderr. done=true
// means exit now with code.
//
// The grammar is upstream's hand-rolled one, not getopt's:
//   - an argument starting with '-' holds one or more flag letters
//     (-VVV, -VFVukr);
//   - a flag that takes a value uses the rest of its argument if any
//     (-p11300), otherwise the next argument whatever it looks like
//     (-p 11300, even -p -V);
//   - parsing stops at the first argument that is not a flag group, and
//     that argument is an error (a bare "-" included): upstream has no
//     positional arguments;
//   - -h and -v act the moment they are seen, so later errors go
//     unreported, and earlier -c/-n notices have already been printed.
//
// Beyond upstream, the whole arguments --help and --version are accepted,
// and beanpole's long options (longOpts), each as "--name value" or
// "--name=value"; upstream rejects them as unknown flags, so no working
// command line changes meaning.
func Parse(args []string, stdout, stderr io.Writer) (cfg Config, code int, done bool) {
	cfg = Defaults()
	warnx := func(format string, a ...any) {
		fmt.Fprintf(stderr, "%s: "+format+"\n", append([]any{progName}, a...)...)
	}
	fail := func(format string, a ...any) (Config, int, bool) {
		warnx(format, a...)
		writeUsage(stderr)
		return cfg, ExitUsage, true
	}

	for i := 0; i < len(args); {
		arg := args[i]
		i++
		switch arg {
		case "--help":
			writeUsage(stderr)
			return cfg, 0, true
		case "--version":
			fmt.Fprintf(stdout, "%s %s\n", progName, Version)
			return cfg, 0, true
		}
		if lo, v, hasV, ok := longOption(arg); ok {
			if lo.set == nil { // a switch
				if hasV {
					return fail("flag takes no argument: %s", lo.name)
				}
				lo.flag(&cfg)
				continue
			}
			if !hasV {
				if i == len(args) {
					return fail("flag requires an argument: %s", lo.name)
				}
				v = args[i]
				i++
			}
			if err := lo.set(&cfg, v); err != nil {
				return fail("invalid value for %s: %s (%v)", lo.name, v, err)
			}
			continue
		}
		if len(arg) < 2 || arg[0] != '-' {
			return fail("unknown argument: %s", arg)
		}

		for j := 1; j < len(arg); j++ {
			c := arg[j]
			switch c {
			case 'p', 'l', 'u', 'b', 'z', 's', 'f':
				// Upstream's EARGF: the rest of this argument, else
				// the whole next one, else an error.
				var v string
				switch {
				case j+1 < len(arg):
					v, j = arg[j+1:], len(arg)
				case i < len(args):
					v = args[i]
					i++
				default:
					return fail("flag requires an argument: -%c", c)
				}
				switch c {
				case 'p':
					cfg.Port, cfg.portGiven = v, true
				case 'l':
					cfg.ListenAddr, cfg.addrGiven = v, true
				case 'u':
					cfg.User = v
				case 'b':
					cfg.BinlogDir = v
				case 'z':
					n, ok := parseSize(v)
					if !ok {
						return fail("invalid size: %s", v)
					}
					if n > MaxJobSizeLimit {
						warnx("maximum job size was set to %d", MaxJobSizeLimit)
						n = MaxJobSizeLimit
					}
					cfg.MaxJobSize = uint32(n)
				case 's':
					n, ok := parseSize(v)
					if !ok || strings.HasPrefix(strings.TrimLeft(v, " \t\n\v\f\r"), "-") {
						// Upstream reads this into a C int: a negative or
						// huge value turns into nonsense (every put refused,
						// or gigabyte files preallocated). Refuse the one,
						// clamp the other.
						return fail("invalid size: %s", v)
					}
					if n > MaxBinlogSize {
						warnx("binlog size was set to %d", MaxBinlogSize)
						n = MaxBinlogSize
					}
					cfg.BinlogSize = int64(n)
				case 'f':
					n, ok := parseSize(v)
					if !ok {
						return fail("invalid size: %s", v)
					}
					cfg.SyncEvery = syncInterval(n)
					cfg.WantSync = true
				}
			case 'F':
				cfg.WantSync = false
			case 'c', 'n':
				warnx("-%c flag was removed. binlog is always compacted.", c)
			case 'V':
				cfg.Verbosity++
			case 'h':
				writeUsage(stderr)
				return cfg, 0, true
			case 'v':
				fmt.Fprintf(stdout, "%s %s\n", progName, Version)
				return cfg, 0, true
			default:
				// Upstream prints from the character before the
				// bad one to the end of the argument: "-x" for -x,
				// but "Vx" for -Vx. Reproduced as is.
				return fail("unknown flag: %s", arg[j-1:])
			}
		}
	}
	if cfg.ClusterDir != "" {
		switch {
		case cfg.BinlogDir != "":
			return fail("--cluster-dir replaces -b: give one of them")
		case cfg.NodeID == "" || cfg.RaftAddr == "":
			return fail("--cluster-dir needs --node-id and --raft")
		case cfg.Groups > 0 && cfg.ClusterImport != "":
			return fail("--groups does not go with --cluster-import: a cluster of many groups starts empty")
		case cfg.Replicas > 0 && cfg.Join != "":
			return fail("--replicas does not go with --join: a cluster whose data groups run on --replicas of the nodes keeps the members it was bootstrapped with (re-placing the groups' replicas is not built)")
		case cfg.Replicas > 0 && cfg.Groups == 0:
			return fail("--replicas goes with --groups: it is how many nodes each data group runs on")
		}
	} else if cfg.NodeID != "" || cfg.RaftAddr != "" || cfg.Bootstrap != "" || cfg.Join != "" || cfg.ClusterImport != "" || cfg.Groups != 0 || cfg.Replicas != 0 ||
		cfg.ClusterCert != "" || cfg.ClusterKey != "" || cfg.ClusterCA != "" || cfg.RaftInsecure {
		return fail("--node-id, --raft, --bootstrap, --groups, --replicas, --join, --cluster-import, --cluster-cert, --cluster-key, --cluster-ca and --raft-insecure-plaintext go with --cluster-dir")
	}
	if msg := cfg.linkSecurity(); msg != "" {
		return fail("%s", msg)
	}
	tlsFiles := cfg.TLSCert != "" || cfg.TLSKey != "" || cfg.TLSClientCA != ""
	switch {
	case cfg.HTTPPlain && cfg.HTTPAddr == "":
		return fail("--http-plain goes with --http")
	case cfg.ClusterDir != "" && cfg.ClusterCA == "" && tlsFiles &&
		(cfg.TLSCert == "" || cfg.TLSKey == "" || cfg.TLSClientCA == ""):
		return fail("the links between cluster nodes take --tls-cert, --tls-key and --tls-client-ca together")
	case cfg.TLSOnly && cfg.TLSListen == "":
		return fail("--tls-only goes with --tls-listen")
	case tlsFiles && cfg.TLSListen == "" && (cfg.ClusterDir == "" || cfg.ClusterCA != "") && (cfg.HTTPAddr == "" || cfg.HTTPPlain):
		return fail("--tls-cert, --tls-key and --tls-client-ca go with --tls-listen, with --http (for HTTPS) or, for the links between nodes, with --cluster-dir")
	case cfg.TLSListen != "" && (cfg.TLSCert == "" || cfg.TLSKey == ""):
		return fail("--tls-listen needs --tls-cert and --tls-key")
	case tlsFiles && (cfg.TLSCert == "" || cfg.TLSKey == ""):
		return fail("HTTPS on --http needs --tls-cert and --tls-key")
	}
	return cfg, 0, false
}

// longOpt is one of beanpole's long options: set parses its value, or,
// for a switch (set nil), flag applies it.
type longOpt struct {
	name string
	set  func(cfg *Config, v string) error
	flag func(cfg *Config)
}

var longOpts = []longOpt{
	{name: "--max-job-memory", set: func(cfg *Config, v string) error {
		n, ok := parseMemSize(v)
		if !ok {
			return errors.New("want a byte count, with K, M, G or T allowed")
		}
		cfg.MaxJobMemory = n
		return nil
	}},
	{name: "--http", set: func(cfg *Config, v string) error {
		addr, err := httpAddr(v)
		cfg.HTTPAddr = addr
		return err
	}},
	{name: "--http-host", set: func(cfg *Config, v string) error {
		if !hostName(v) {
			return errors.New("want a host name or an IP address, without a port")
		}
		cfg.HTTPHosts = append(cfg.HTTPHosts, v)
		return nil
	}},
	{name: "--http-max-conns", set: func(cfg *Config, v string) error {
		n, err := strconv.ParseUint(v, 10, 31)
		if err != nil || n == 0 {
			return errors.New("want a whole number above 0")
		}
		cfg.HTTPMaxConns = int(n)
		return nil
	}},
	{name: "--http-plain", flag: func(cfg *Config) { cfg.HTTPPlain = true }},
	{name: "--http-pprof", flag: func(cfg *Config) { cfg.HTTPPprof = true }},
	{name: "--http-public-bodies", flag: func(cfg *Config) { cfg.HTTPPublicBodies = true }},
	{name: "--http-token-file", set: func(cfg *Config, v string) error {
		if v == "" {
			return errors.New("want a file name")
		}
		cfg.HTTPTokenFile = v
		return nil
	}},
	{name: "--metrics-total-names", flag: func(cfg *Config) { cfg.MetricsTotalNames = true }},
	{name: "--stop-grace", set: func(cfg *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return errors.New("want a duration such as 1s, 500ms or 0")
		}
		cfg.StopGrace = d
		return nil
	}},
	{name: "--log-json", flag: func(cfg *Config) { cfg.LogJSON = true }},
	{name: "--cluster-dir", set: nonEmpty(func(cfg *Config, v string) { cfg.ClusterDir = v })},
	{name: "--node-id", set: nonEmpty(func(cfg *Config, v string) { cfg.NodeID = v })},
	{name: "--raft", set: func(cfg *Config, v string) error {
		if _, _, err := net.SplitHostPort(v); err != nil {
			return err
		}
		cfg.RaftAddr = v
		return nil
	}},
	{name: "--bootstrap", set: nonEmpty(func(cfg *Config, v string) { cfg.Bootstrap = v })},
	{name: "--groups", set: func(cfg *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > MaxGroups {
			return fmt.Errorf("want a number of data groups from 0 to %d", MaxGroups)
		}
		cfg.Groups = n
		return nil
	}},
	{name: "--replicas", set: func(cfg *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("want how many nodes each data group runs on, 1 or more")
		}
		cfg.Replicas = n
		return nil
	}},
	{name: "--cluster-import", set: nonEmpty(func(cfg *Config, v string) { cfg.ClusterImport = v })},
	{name: "--cluster-cert", set: nonEmpty(func(cfg *Config, v string) { cfg.ClusterCert = v })},
	{name: "--cluster-key", set: nonEmpty(func(cfg *Config, v string) { cfg.ClusterKey = v })},
	{name: "--cluster-ca", set: nonEmpty(func(cfg *Config, v string) { cfg.ClusterCA = v })},
	{name: "--raft-insecure-plaintext", flag: func(cfg *Config) { cfg.RaftInsecure = true }},
	{name: "--join", set: func(cfg *Config, v string) error {
		_, hostPort := splitScheme(v)
		if _, _, err := net.SplitHostPort(hostPort); err != nil {
			return err
		}
		cfg.Join = v
		return nil
	}},
	{name: "--tls-listen", set: func(cfg *Config, v string) error {
		if _, _, err := net.SplitHostPort(v); err != nil {
			return err
		}
		cfg.TLSListen = v
		return nil
	}},
	{name: "--tls-only", flag: func(cfg *Config) { cfg.TLSOnly = true }},
	{name: "--tls-cert", set: nonEmpty(func(cfg *Config, v string) { cfg.TLSCert = v })},
	{name: "--tls-key", set: nonEmpty(func(cfg *Config, v string) { cfg.TLSKey = v })},
	{name: "--tls-client-ca", set: nonEmpty(func(cfg *Config, v string) { cfg.TLSClientCA = v })},
	{name: "--metrics-max-tubes", set: func(cfg *Config, v string) error {
		n, err := strconv.ParseUint(v, 10, 31)
		if err != nil {
			return errors.New("want a whole number")
		}
		cfg.MetricsMaxTubes = int(n)
		return nil
	}},
}

// LinkTLS reports whether the links between cluster nodes use TLS: with
// --cluster-cert, --cluster-key and --cluster-ca, or else with --tls-cert,
// --tls-key and --tls-client-ca.
func (c *Config) LinkTLS() bool {
	return c.ClusterDir != "" && (c.ClusterCA != "" || c.TLSClientCA != "")
}

// linkSecurity is what is wrong with the links' settings, or "": the three
// --cluster-* files go together, and plaintext links are refused on a
// --raft address other than loopback unless --raft-insecure-plaintext
// says the operator means it (whoever reaches a plaintext raft port can
// rewrite the queue).
func (c *Config) linkSecurity() string {
	if c.ClusterDir == "" {
		return ""
	}
	n := 0
	for _, f := range []string{c.ClusterCert, c.ClusterKey, c.ClusterCA} {
		if f != "" {
			n++
		}
	}
	if n != 0 && n != 3 {
		return "--cluster-cert, --cluster-key and --cluster-ca go together"
	}
	if c.LinkTLS() || c.RaftInsecure {
		return ""
	}
	host, _, _ := net.SplitHostPort(c.RaftAddr)
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		return ""
	}
	return "--raft " + c.RaftAddr + " is not a loopback address and the links between nodes have no TLS: anyone who reaches it could rewrite the queue. " +
		"Give --cluster-cert, --cluster-key and --cluster-ca (see docs/cluster.md), or --raft-insecure-plaintext to run the links in plaintext anyway"
}

// HTTPS reports whether --http serves HTTPS: with --tls-cert and --tls-key
// (for --tls-listen, for the links between cluster nodes or for --http
// alone), unless --http-plain.
func (c *Config) HTTPS() bool { return c.HTTPAddr != "" && c.TLSCert != "" && !c.HTTPPlain }

// JoinURL is the base URL --join speaks to: with the scheme --join gave,
// otherwise https when this node has the TLS files and no --http-plain (a
// group's members serve their --http alike), http when it has not.
func (c *Config) JoinURL() string {
	scheme, hostPort := splitScheme(c.Join)
	if scheme == "" {
		scheme = "http"
		if c.TLSCert != "" && !c.HTTPPlain {
			scheme = "https"
		}
	}
	return scheme + "://" + hostPort
}

// splitScheme splits "http://HOST:PORT" or "https://HOST:PORT" into the
// scheme and HOST:PORT; a bare HOST:PORT has no scheme.
func splitScheme(v string) (scheme, hostPort string) {
	for _, s := range []string{"http", "https"} {
		if rest, ok := strings.CutPrefix(v, s+"://"); ok {
			return s, rest
		}
	}
	return "", v
}

// nonEmpty is a long option whose value may be anything but empty.
func nonEmpty(set func(cfg *Config, v string)) func(cfg *Config, v string) error {
	return func(cfg *Config, v string) error {
		if v == "" {
			return errors.New("want a value")
		}
		set(cfg, v)
		return nil
	}
}

// longOption finds arg's long option, and its value if given as
// "--name=value".
func longOption(arg string) (lo *longOpt, v string, hasV, ok bool) {
	for i := range longOpts {
		rest, found := strings.CutPrefix(arg, longOpts[i].name)
		if !found {
			continue
		}
		switch {
		case rest == "":
			return &longOpts[i], "", false, true
		case rest[0] == '=':
			return &longOpts[i], rest[1:], true, true
		}
	}
	return nil, "", false, false
}

// httpAddr checks --http's HOST:PORT; a bare ":PORT" means loopback, so
// the endpoints are not exposed unless an address says so.
func httpAddr(v string) (string, error) {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return "", err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", fmt.Errorf("bad port %q", port)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// hostName reports whether v is what --http-host takes: a DNS name
// (letters, digits, '-', '_' and dots) or an IP address, an IPv6 one
// with or without brackets.
func hostName(v string) bool {
	if v == "" {
		return false
	}
	if net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(v, "["), "]")) != nil {
		return true
	}
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// syncInterval converts -f's millisecond count, already reduced modulo 2^64
// like C's size_t, into an fsync interval. Upstream casts it to int64 and
// multiplies by 10^6 without overflow checks: a negative result (from
// "-f -1") makes every write sync, exactly like -f0, so it becomes 0; a
// product beyond int64 wraps upstream, and here means "as rarely as
// possible" instead.
func syncInterval(ms uint64) time.Duration {
	s := int64(ms)
	switch {
	case s < 0:
		return 0
	case s > math.MaxInt64/int64(time.Millisecond):
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(s) * time.Millisecond
}
