package config

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// usageText is the exact -h text, spelled out so that any change to it is a
// deliberate, reviewed one.
const usageText = `Use: beanpole [OPTIONS]
     beanpole import -b DIR [--from SRC] [--dry-run] [--accept-damage]

beanpole is a drop-in replacement for beanstalkd and accepts the same options.

Options:
 -b DIR   write-ahead log directory
 -f MS    fsync at most once every MS milliseconds (default is 50ms);
          use -f0 for "always fsync"
 -F       never fsync
 -l ADDR  listen on address (default is 0.0.0.0);
          use unix:PATH for a UNIX socket (-p is then ignored)
 -p PORT  listen on port (default is 11300)
 -u USER  become user and group
 -z BYTES set the maximum job size in bytes (default is 65535);
          max allowed is 1073741824 bytes
 -s BYTES set the size of each write-ahead log file (default is 10485760)
 -v       show version information
 -V       increase verbosity
 -h       show this help
 -c, -n   removed; accepted and ignored for compatibility

Long options:
 --help     same as -h
 --version  same as -v
 --max-job-memory BYTES
            ceiling on the memory clients can make the server hold: jobs,
            tubes, put bodies under way, unsent replies (suffix K, M, G, T
            allowed; 0 for none); past it puts and use or watch of a new
            tube get OUT_OF_MEMORY (default is derived from the cgroup,
            address-space or physical memory limit)
 --http HOST:PORT
            serve the dashboard, /metrics, /healthz and /readyz over HTTP
            (":PORT" is 127.0.0.1:PORT), over HTTPS when --tls-cert and
            --tls-key are given; off by default
 --http-plain
            serve plain HTTP on --http even with --tls-cert and --tls-key
 --http-token-file FILE
            allow the dashboard's actions (kick, delete, pause, flush, move)
            to whoever presents the token in FILE; read-only without it
 --http-host NAME
            also serve requests whose Host header is NAME (repeatable); any
            other name but localhost and the listener's address gets 421
            (/healthz and /readyz answer any name)
 --http-public-bodies
            show job bodies on the dashboard without the token
 --http-max-conns N
            HTTP connections open at once; at the cap idle ones make room,
            no address keeps over a quarter from others, and 8 more
            are kept for /healthz and /readyz
            (default is 256)
 --http-pprof
            also serve /debug/pprof/ there
 --metrics-max-tubes N
            tubes beyond the first N are summed into tube="_other" in
            /metrics (default is 1000)
 --metrics-total-names
            name the counters of stats and stats-tube with a _total suffix
            in /metrics (beanstalkd_cmd_put_total), as Prometheus wants,
            instead of as the beanstalkd exporters do (beanstalkd_cmd_put)
 --stop-grace DURATION
            at SIGTERM or SIGINT, with --http, answer 503 stopping on
            /readyz for DURATION while still serving clients, then close
            the listeners (default is 1s; 0 closes them at once)
 --log-json
            log one JSON object a line instead of the console format

Cluster mode, instead of a binlog (see docs/cluster.md):
 --cluster-dir DIR
            keep the raft log, snapshots and node state in DIR
 --node-id ID
            this node's id in the group
 --raft HOST:PORT
            the address raft listens on and other nodes reach it at
 --bootstrap ID=HOST:PORT,...
            the initial members, given alike to each on its first start
            (ignored once DIR holds state)
 --groups N
            spread the tubes over N raft groups, each led by a node of
            its own; give every node the same N on its first start (0,
            the default: one group holds every tube)
 --replicas R
            with --groups, run each group on R of the nodes (0, the
            default: on every node); given alike on the first start
 --join HOST:PORT
            on its first start, ask the member whose --http is HOST:PORT
            to add this node (with the --http-token-file token), over
            HTTPS with the TLS files unless --http-plain; http://HOST:PORT
            or https://HOST:PORT says which; give the cluster's --groups
            (not with --replicas)
 --cluster-import DIR
            seed an empty group with the jobs of the binlog in DIR
            (beanpole's, or beanstalkd's, which is imported first)
 --cluster-cert FILE, --cluster-key FILE, --cluster-ca FILE
            secure the links between nodes with mutual TLS: this node's
            certificate (serverAuth and clientAuth, naming its --raft
            host) and key, and the CA that signed every node's and no
            client's (PEM; SIGHUP reads them again)
 --raft-insecure-plaintext
            run the links in plaintext on a --raft address that is not
            loopback (refused otherwise: whoever reaches the port could
            rewrite the queue)

TLS, beside or instead of the plaintext listener (see docs/tls.md):
 --tls-listen HOST:PORT
            also serve the protocol over TLS on HOST:PORT (in cluster
            mode, with --tls-client-ca: the nodes' links take it too)
 --tls-only
            serve TLS only: no plaintext listener (-l and -p are unused)
 --tls-cert FILE
            the server's certificate chain (PEM)
 --tls-key FILE
            the server's private key (PEM)
 --tls-client-ca FILE
            accept only clients whose certificate a CA in FILE (PEM)
            signed (on --http, check those that present one); SIGHUP
            reads the three files again

beanpole import carries the jobs of beanstalkd's binlog over into beanpole's log
and exits (beanstalkd's binlog in DIR, or read from SRC into DIR without
changing SRC); beanpole import -h says more.
beanpole cluster asks a cluster node about the group or changes it; beanpole cluster -h
says more.
`

// with returns the defaults changed by f, for compact table entries.
func with(f func(*Config)) Config {
	c := Defaults()
	f(&c)
	return c
}

// exported strips the unexported bookkeeping so tests compare what callers see.
func exported(c Config) Config {
	c.addrGiven, c.portGiven = false, false
	return c
}

func TestParse(t *testing.T) {
	const (
		clampWarn = "beanpole: maximum job size was set to 1073741824\n"
		cNotice   = "beanpole: -c flag was removed. binlog is always compacted.\n"
		nNotice   = "beanpole: -n flag was removed. binlog is always compacted.\n"
	)
	usageErr := func(msg string) string { return "beanpole: " + msg + "\n" + usageText }

	tests := []struct {
		name   string
		args   []string
		want   Config // checked only when the parse did not stop
		stdout string
		stderr string
		code   int
		done   bool
	}{
		// The cases of upstream's testutil.c, one for one.
		{name: "opt_none", args: nil, want: Defaults()},
		{name: "optminus", args: []string{"-"}, stderr: usageErr("unknown argument: -"), code: 5, done: true},
		{name: "optp", args: []string{"-p1234"}, want: with(func(c *Config) { c.Port = "1234" })},
		{name: "optl", args: []string{"-llocalhost"}, want: with(func(c *Config) { c.ListenAddr = "localhost" })},
		{name: "optlseparate", args: []string{"-l", "localhost"}, want: with(func(c *Config) { c.ListenAddr = "localhost" })},
		{name: "optz", args: []string{"-z1234"}, want: with(func(c *Config) { c.MaxJobSize = 1234 })},
		{name: "optz_more_than_max", args: []string{"-z1073741825"}, stderr: clampWarn,
			want: with(func(c *Config) { c.MaxJobSize = 1073741824 })},
		{name: "opts", args: []string{"-s1234"}, want: with(func(c *Config) { c.BinlogSize = 1234 })},
		{name: "optf", args: []string{"-f1234"}, want: with(func(c *Config) { c.SyncEvery = 1234 * time.Millisecond })},
		{name: "optF", args: []string{"-f1234", "-F"},
			want: with(func(c *Config) { c.SyncEvery = 1234 * time.Millisecond; c.WantSync = false })},
		{name: "optu", args: []string{"-ukr"}, want: with(func(c *Config) { c.User = "kr" })},
		{name: "optb", args: []string{"-bfoo"}, want: with(func(c *Config) { c.BinlogDir = "foo" })},
		{name: "optV", args: []string{"-V"}, want: with(func(c *Config) { c.Verbosity = 1 })},
		{name: "optV_V", args: []string{"-V", "-V"}, want: with(func(c *Config) { c.Verbosity = 2 })},
		{name: "optVVV", args: []string{"-VVV"}, want: with(func(c *Config) { c.Verbosity = 3 })},
		{name: "optVFVu", args: []string{"-VFVukr"},
			want: with(func(c *Config) { c.Verbosity = 2; c.WantSync = false; c.User = "kr" })},

		// Value syntax.
		{name: "VFVu separate", args: []string{"-VFVu", "kr"},
			want: with(func(c *Config) { c.Verbosity = 2; c.WantSync = false; c.User = "kr" })},
		{name: "p separate", args: []string{"-p", "11301"}, want: with(func(c *Config) { c.Port = "11301" })},
		{name: "p service name", args: []string{"-p", "http"}, want: with(func(c *Config) { c.Port = "http" })},
		{name: "value swallows rest of group", args: []string{"-p1234V"}, want: with(func(c *Config) { c.Port = "1234V" })},
		{name: "separate value may look like a flag", args: []string{"-p", "-V"}, want: with(func(c *Config) { c.Port = "-V" })},
		{name: "last value wins", args: []string{"-p1", "-p", "2"}, want: with(func(c *Config) { c.Port = "2" })},
		{name: "l unix", args: []string{"-l", "unix:/tmp/b.sock"}, want: with(func(c *Config) { c.ListenAddr = "unix:/tmp/b.sock" })},
		{name: "b separate", args: []string{"-b", "/var/lib/beanstalkd"},
			want: with(func(c *Config) { c.BinlogDir = "/var/lib/beanstalkd" })},
		{name: "everything", args: []string{"-l", "127.0.0.1", "-p11301", "-z", "100", "-s", "5000", "-f", "7", "-u", "nobody", "-b", "d", "-VV"},
			want: with(func(c *Config) {
				c.ListenAddr, c.Port, c.MaxJobSize, c.BinlogSize = "127.0.0.1", "11301", 100, 5000
				c.SyncEvery, c.User, c.BinlogDir, c.Verbosity = 7*time.Millisecond, "nobody", "d", 2
			})},

		// -f / -F: the last one wins.
		{name: "f0 always sync", args: []string{"-f0"}, want: with(func(c *Config) { c.SyncEvery = 0 })},
		{name: "F then f", args: []string{"-F", "-f5"}, want: with(func(c *Config) { c.SyncEvery = 5 * time.Millisecond })},
		{name: "f F f", args: []string{"-f0", "-F", "-f", "10"}, want: with(func(c *Config) { c.SyncEvery = 10 * time.Millisecond })},
		{name: "F alone keeps interval", args: []string{"-F"}, want: with(func(c *Config) { c.WantSync = false })},
		{name: "FF in a group", args: []string{"-FVF"}, want: with(func(c *Config) { c.WantSync = false; c.Verbosity = 1 })},

		// Sizes as sscanf("%zu%c") reads them.
		{name: "z leading space", args: []string{"-z", " 12"}, want: with(func(c *Config) { c.MaxJobSize = 12 })},
		{name: "z plus sign", args: []string{"-z", "+5"}, want: with(func(c *Config) { c.MaxJobSize = 5 })},
		{name: "z zero", args: []string{"-z0"}, want: with(func(c *Config) { c.MaxJobSize = 0 })},
		{name: "z exactly max", args: []string{"-z1073741824"}, want: with(func(c *Config) { c.MaxJobSize = 1073741824 })},
		{name: "z minus one wraps and clamps", args: []string{"-z", "-1"}, stderr: clampWarn,
			want: with(func(c *Config) { c.MaxJobSize = 1073741824 })},
		{name: "z overflow clamps", args: []string{"-z", "99999999999999999999999"}, stderr: clampWarn,
			want: with(func(c *Config) { c.MaxJobSize = 1073741824 })},
		{name: "z above u32 clamps", args: []string{"-z4294967297"}, stderr: clampWarn,
			want: with(func(c *Config) { c.MaxJobSize = 1073741824 })},
		{name: "s exactly max", args: []string{"-s1073741824"}, want: with(func(c *Config) { c.BinlogSize = 1 << 30 })},
		{name: "s large clamps", args: []string{"-s5000000000"}, stderr: "beanpole: binlog size was set to 1073741824\n",
			want: with(func(c *Config) { c.BinlogSize = 1 << 30 })},
		{name: "s negative is refused", args: []string{"-s-5"}, stderr: usageErr("invalid size: -5"), code: 5, done: true},
		{name: "f minus one is always-sync", args: []string{"-f", "-1"}, want: with(func(c *Config) { c.SyncEvery = 0 })},
		{name: "f huge saturates", args: []string{"-f9223372036854775807"},
			want: with(func(c *Config) { c.SyncEvery = time.Duration(math.MaxInt64) })},

		// Removed flags: notice, then carry on.
		{name: "c", args: []string{"-c"}, stderr: cNotice, want: Defaults()},
		{name: "n", args: []string{"-n"}, stderr: nNotice, want: Defaults()},
		{name: "cn then more", args: []string{"-cn", "-p1"}, stderr: cNotice + nNotice,
			want: with(func(c *Config) { c.Port = "1" })},
		{name: "c in a group", args: []string{"-VcV"}, stderr: cNotice, want: with(func(c *Config) { c.Verbosity = 2 })},

		// Help and version act at once.
		{name: "h", args: []string{"-h"}, stderr: usageText, done: true},
		{name: "h stops before errors", args: []string{"-h", "-x"}, stderr: usageText, done: true},
		{name: "h in a group", args: []string{"-Vh"}, stderr: usageText, done: true},
		{name: "v", args: []string{"-v"}, stdout: "beanpole 0.1.0\n", done: true},
		{name: "v before h", args: []string{"-v", "-h"}, stdout: "beanpole 0.1.0\n", done: true},
		{name: "notices before v", args: []string{"-c", "-n", "-v"}, stdout: "beanpole 0.1.0\n",
			stderr: cNotice + nNotice, done: true},
		{name: "notice before h", args: []string{"-c", "-h"}, stderr: cNotice + usageText, done: true},
		{name: "long help", args: []string{"--help"}, stderr: usageText, done: true},
		{name: "long version", args: []string{"--version"}, stdout: "beanpole 0.1.0\n", done: true},

		// --max-job-memory, beanpole's own long option.
		{name: "max job memory", args: []string{"--max-job-memory", "8000000", "-V"},
			want: with(func(c *Config) { c.MaxJobMemory = 8000000; c.Verbosity = 1 })},
		{name: "max job memory =", args: []string{"-V", "--max-job-memory=2G"},
			want: with(func(c *Config) { c.MaxJobMemory = 2 << 30; c.Verbosity = 1 })},
		{name: "max job memory off", args: []string{"--max-job-memory", "0"},
			want: with(func(c *Config) { c.MaxJobMemory = 0 })},
		{name: "max job memory missing", args: []string{"--max-job-memory"},
			stderr: usageErr("flag requires an argument: --max-job-memory"), code: 5, done: true},
		{name: "max job memory signed", args: []string{"--max-job-memory=-1"},
			stderr: usageErr("invalid value for --max-job-memory: -1 (want a byte count, with K, M, G or T allowed)"), code: 5, done: true},
		{name: "max job memory junk", args: []string{"--max-job-memory", "12x"},
			stderr: usageErr("invalid value for --max-job-memory: 12x (want a byte count, with K, M, G or T allowed)"), code: 5, done: true},
		{name: "max job memory overflow", args: []string{"--max-job-memory", "9000000000000T"},
			stderr: usageErr("invalid value for --max-job-memory: 9000000000000T (want a byte count, with K, M, G or T allowed)"), code: 5, done: true},
		// --http and its companions.
		{name: "http", args: []string{"--http", "0.0.0.0:8080"},
			want: with(func(c *Config) { c.HTTPAddr = "0.0.0.0:8080" })},
		{name: "http port only is loopback", args: []string{"--http=:9090", "--http-pprof"},
			want: with(func(c *Config) { c.HTTPAddr = "127.0.0.1:9090"; c.HTTPPprof = true })},
		{name: "http bad", args: []string{"--http", "8080"},
			stderr: usageErr("invalid value for --http: 8080 (address 8080: missing port in address)"), code: 5, done: true},
		{name: "http bad port", args: []string{"--http", ":http"},
			stderr: usageErr(`invalid value for --http: :http (bad port "http")`), code: 5, done: true},
		{name: "http hosts add up", args: []string{"--http-host", "beans.example", "--http-host=[::1]", "--http-host", "10.0.0.7", "--http-public-bodies"},
			want: with(func(c *Config) {
				c.HTTPHosts = []string{"beans.example", "[::1]", "10.0.0.7"}
				c.HTTPPublicBodies = true
			})},
		{name: "http host with a port", args: []string{"--http-host", "beans.example:8080"},
			stderr: usageErr("invalid value for --http-host: beans.example:8080 (want a host name or an IP address, without a port)"), code: 5, done: true},
		{name: "http host empty", args: []string{"--http-host="},
			stderr: usageErr("invalid value for --http-host:  (want a host name or an IP address, without a port)"), code: 5, done: true},
		{name: "tls beside plaintext", args: []string{"--tls-listen", "127.0.0.1:11301", "--tls-cert=c.pem", "--tls-key", "k.pem", "--tls-client-ca", "ca.pem"},
			want: with(func(c *Config) {
				c.TLSListen, c.TLSCert, c.TLSKey, c.TLSClientCA = "127.0.0.1:11301", "c.pem", "k.pem", "ca.pem"
			})},
		{name: "tls only", args: []string{"--tls-only", "--tls-listen=:11301", "--tls-cert", "c.pem", "--tls-key", "k.pem"},
			want: with(func(c *Config) {
				c.TLSListen, c.TLSCert, c.TLSKey, c.TLSOnly = ":11301", "c.pem", "k.pem", true
			})},
		{name: "tls listen needs a port", args: []string{"--tls-listen", "127.0.0.1"},
			stderr: usageErr("invalid value for --tls-listen: 127.0.0.1 (address 127.0.0.1: missing port in address)"), code: 5, done: true},
		{name: "tls listen needs a certificate", args: []string{"--tls-listen", ":11301", "--tls-cert", "c.pem"},
			stderr: usageErr("--tls-listen needs --tls-cert and --tls-key"), code: 5, done: true},
		{name: "tls only needs a tls listener", args: []string{"--tls-only", "--tls-cert=c", "--tls-key=k", "--http=:8080"},
			stderr: usageErr("--tls-only goes with --tls-listen"), code: 5, done: true},
		{name: "tls files need a listener", args: []string{"--tls-cert=c", "--tls-key=k"},
			stderr: usageErr("--tls-cert, --tls-key and --tls-client-ca go with --tls-listen, with --http (for HTTPS) or, for the links between nodes, with --cluster-dir"), code: 5, done: true},
		{name: "https on --http alone", args: []string{"--tls-cert=c", "--tls-key=k", "--tls-client-ca=ca", "--http=:8443"},
			want: with(func(c *Config) { c.TLSCert, c.TLSKey, c.TLSClientCA, c.HTTPAddr = "c", "k", "ca", "127.0.0.1:8443" })},
		{name: "https needs the key", args: []string{"--tls-cert=c", "--http=:8443"},
			stderr: usageErr("HTTPS on --http needs --tls-cert and --tls-key"), code: 5, done: true},
		{name: "plain http leaves the tls files unused", args: []string{"--tls-cert=c", "--tls-key=k", "--http=:8080", "--http-plain"},
			stderr: usageErr("--tls-cert, --tls-key and --tls-client-ca go with --tls-listen, with --http (for HTTPS) or, for the links between nodes, with --cluster-dir"), code: 5, done: true},
		{name: "plain http beside tls", args: []string{"--tls-listen=:11301", "--tls-cert=c", "--tls-key=k", "--http=:8080", "--http-plain"},
			want: with(func(c *Config) {
				c.TLSListen, c.TLSCert, c.TLSKey, c.HTTPAddr, c.HTTPPlain = ":11301", "c", "k", "127.0.0.1:8080", true
			})},
		{name: "plain http needs http", args: []string{"--http-plain"},
			stderr: usageErr("--http-plain goes with --http"), code: 5, done: true},
		{name: "join with a scheme", args: []string{"--cluster-dir=d", "--node-id=a", "--raft=127.0.0.1:7000", "--join=https://10.0.0.1:8443"},
			want: with(func(c *Config) {
				c.ClusterDir, c.NodeID, c.RaftAddr, c.Join = "d", "a", "127.0.0.1:7000", "https://10.0.0.1:8443"
			})},
		{name: "join with a scheme needs a port", args: []string{"--cluster-dir=d", "--node-id=a", "--raft=127.0.0.1:7000", "--join=https://10.0.0.1"},
			stderr: usageErr("invalid value for --join: https://10.0.0.1 (address 10.0.0.1: missing port in address)"), code: 5, done: true},
		{name: "cluster links take the three tls files", args: []string{"--tls-cert=c", "--tls-key=k",
			"--cluster-dir=d", "--node-id=a", "--raft=127.0.0.1:7000"},
			stderr: usageErr("the links between cluster nodes take --tls-cert, --tls-key and --tls-client-ca together"), code: 5, done: true},
		{name: "cluster links over tls", args: []string{"--tls-cert=c", "--tls-key=k", "--tls-client-ca=ca",
			"--cluster-dir=d", "--node-id=a", "--raft=127.0.0.1:7000"},
			want: with(func(c *Config) {
				c.TLSCert, c.TLSKey, c.TLSClientCA, c.ClusterDir, c.NodeID, c.RaftAddr = "c", "k", "ca", "d", "a", "127.0.0.1:7000"
			})},
		{name: "tls clients of a cluster need the links' three files", args: []string{"--tls-listen=:11301", "--tls-cert=c", "--tls-key=k",
			"--cluster-dir=d", "--node-id=a", "--raft=127.0.0.1:7000"},
			stderr: usageErr("the links between cluster nodes take --tls-cert, --tls-key and --tls-client-ca together"), code: 5, done: true},
		{name: "tls clients of a cluster", args: []string{"--tls-listen=:11301", "--tls-cert=c", "--tls-key=k", "--tls-client-ca=ca",
			"--cluster-dir=d", "--node-id=a", "--raft=127.0.0.1:7000"},
			want: with(func(c *Config) {
				c.TLSListen, c.TLSCert, c.TLSKey, c.TLSClientCA, c.ClusterDir, c.NodeID, c.RaftAddr = ":11301", "c", "k", "ca", "d", "a", "127.0.0.1:7000"
			})},
		{name: "plaintext links refused off loopback", args: []string{"--cluster-dir=d", "--node-id=a", "--raft=0.0.0.0:7000"},
			stderr: usageErr("--raft 0.0.0.0:7000 is not a loopback address and the links between nodes have no TLS: anyone who reaches it could rewrite the queue. " +
				"Give --cluster-cert, --cluster-key and --cluster-ca (see docs/cluster.md), or --raft-insecure-plaintext to run the links in plaintext anyway"), code: 5, done: true},
		{name: "plaintext links off loopback when asked for", args: []string{"--cluster-dir=d", "--node-id=a", "--raft=10.0.0.1:7000", "--raft-insecure-plaintext"},
			want: with(func(c *Config) {
				c.ClusterDir, c.NodeID, c.RaftAddr, c.RaftInsecure = "d", "a", "10.0.0.1:7000", true
			})},
		{name: "links with their own ca", args: []string{"--cluster-dir=d", "--node-id=a", "--raft=10.0.0.1:7000",
			"--cluster-cert=nc", "--cluster-key=nk", "--cluster-ca=nca", "--tls-listen=:11301", "--tls-cert=c", "--tls-key=k"},
			want: with(func(c *Config) {
				c.ClusterDir, c.NodeID, c.RaftAddr, c.ClusterCert, c.ClusterKey, c.ClusterCA = "d", "a", "10.0.0.1:7000", "nc", "nk", "nca"
				c.TLSListen, c.TLSCert, c.TLSKey = ":11301", "c", "k"
			})},
		{name: "groups", args: []string{"--cluster-dir=d", "--node-id=a", "--raft=127.0.0.1:7000", "--groups", "3"},
			want: with(func(c *Config) { c.ClusterDir, c.NodeID, c.RaftAddr, c.Groups = "d", "a", "127.0.0.1:7000", 3 })},
		{name: "groups not a number", args: []string{"--cluster-dir=d", "--node-id=a", "--raft=127.0.0.1:7000", "--groups", "x"},
			stderr: usageErr("invalid value for --groups: x (want a number of data groups from 0 to 256)"), code: 5, done: true},
		{name: "groups past the bound", args: []string{"--cluster-dir=d", "--node-id=a", "--raft=127.0.0.1:7000", "--groups=257"},
			stderr: usageErr("invalid value for --groups: 257 (want a number of data groups from 0 to 256)"), code: 5, done: true},
		{name: "groups with join", args: []string{"--cluster-dir=d", "--node-id=a", "--raft=127.0.0.1:7000", "--groups=3", "--join=127.0.0.1:8080"},
			want: with(func(c *Config) {
				c.ClusterDir, c.NodeID, c.RaftAddr, c.Groups, c.Join = "d", "a", "127.0.0.1:7000", 3, "127.0.0.1:8080"
			})},
		{name: "groups with cluster-import", args: []string{"--cluster-dir=d", "--node-id=a", "--raft=127.0.0.1:7000", "--groups=3", "--cluster-import=b"},
			stderr: usageErr("--groups does not go with --cluster-import: a cluster of many groups starts empty"), code: 5, done: true},
		{name: "replicas with join", args: []string{"--cluster-dir=d", "--node-id=a", "--raft=127.0.0.1:7000", "--groups=6", "--replicas=3", "--join=127.0.0.1:8080"},
			stderr: usageErr("--replicas does not go with --join: a cluster whose data groups run on --replicas of the nodes keeps the members it was bootstrapped with (re-placing the groups' replicas is not built)"), code: 5, done: true},
		{name: "replicas", args: []string{"--cluster-dir=d", "--node-id=a", "--raft=127.0.0.1:7000", "--groups=6", "--replicas", "3"},
			want: with(func(c *Config) {
				c.ClusterDir, c.NodeID, c.RaftAddr, c.Groups, c.Replicas = "d", "a", "127.0.0.1:7000", 6, 3
			})},
		{name: "replicas not a number", args: []string{"--cluster-dir=d", "--node-id=a", "--raft=127.0.0.1:7000", "--groups=6", "--replicas=0"},
			stderr: usageErr("invalid value for --replicas: 0 (want how many nodes each data group runs on, 1 or more)"), code: 5, done: true},
		{name: "replicas without groups", args: []string{"--cluster-dir=d", "--node-id=a", "--raft=127.0.0.1:7000", "--replicas=3"},
			stderr: usageErr("--replicas goes with --groups: it is how many nodes each data group runs on"), code: 5, done: true},
		{name: "the links' files go together", args: []string{"--cluster-dir=d", "--node-id=a", "--raft=127.0.0.1:7000", "--cluster-ca=nca"},
			stderr: usageErr("--cluster-cert, --cluster-key and --cluster-ca go together"), code: 5, done: true},
		{name: "the links' files go with a cluster", args: []string{"--cluster-ca=nca"},
			stderr: usageErr("--node-id, --raft, --bootstrap, --groups, --replicas, --join, --cluster-import, --cluster-cert, --cluster-key, --cluster-ca and --raft-insecure-plaintext go with --cluster-dir"), code: 5, done: true},
		{name: "pprof takes no value", args: []string{"--http-pprof=1"},
			stderr: usageErr("flag takes no argument: --http-pprof"), code: 5, done: true},
		{name: "http max conns", args: []string{"--http-max-conns=5"},
			want: with(func(c *Config) { c.HTTPMaxConns = 5 })},
		{name: "http max conns zero", args: []string{"--http-max-conns", "0"},
			stderr: usageErr("invalid value for --http-max-conns: 0 (want a whole number above 0)"), code: 5, done: true},
		{name: "log json", args: []string{"--log-json", "-V"},
			want: with(func(c *Config) { c.LogJSON = true; c.Verbosity = 1 })},
		{name: "metrics max tubes", args: []string{"--metrics-max-tubes", "5"},
			want: with(func(c *Config) { c.MetricsMaxTubes = 5 })},
		{name: "metrics max tubes junk", args: []string{"--metrics-max-tubes=-5"},
			stderr: usageErr("invalid value for --metrics-max-tubes: -5 (want a whole number)"), code: 5, done: true},
		{name: "metrics total names", args: []string{"--metrics-total-names"},
			want: with(func(c *Config) { c.MetricsTotalNames = true })},
		{name: "stop grace", args: []string{"--stop-grace=250ms"},
			want: with(func(c *Config) { c.StopGrace = 250 * time.Millisecond })},
		{name: "stop grace negative", args: []string{"--stop-grace", "-1s"},
			stderr: usageErr("invalid value for --stop-grace: -1s (want a duration such as 1s, 500ms or 0)"), code: 5, done: true},
		{name: "max job memory prefix only", args: []string{"--max-job-memoryX"},
			stderr: usageErr("unknown flag: --max-job-memoryX"), code: 5, done: true},

		// Unknown flags: upstream prints from the character before the bad one.
		{name: "unknown", args: []string{"-x"}, stderr: usageErr("unknown flag: -x"), code: 5, done: true},
		{name: "unknown after V", args: []string{"-Vx"}, stderr: usageErr("unknown flag: Vx"), code: 5, done: true},
		{name: "unknown deep", args: []string{"-VVxyz"}, stderr: usageErr("unknown flag: Vxyz"), code: 5, done: true},
		{name: "unknown before h", args: []string{"-x", "-h"}, stderr: usageErr("unknown flag: -x"), code: 5, done: true},
		{name: "unknown long", args: []string{"--port=1"}, stderr: usageErr("unknown flag: --port=1"), code: 5, done: true},
		{name: "double dash", args: []string{"--"}, stderr: usageErr("unknown flag: --"), code: 5, done: true},
		{name: "notice then unknown", args: []string{"-c", "-q"}, stderr: cNotice + usageErr("unknown flag: -q"), code: 5, done: true},

		// Positional arguments.
		{name: "positional", args: []string{"foo"}, stderr: usageErr("unknown argument: foo"), code: 5, done: true},
		{name: "positional after flags", args: []string{"-V", "foo", "-h"}, stderr: usageErr("unknown argument: foo"), code: 5, done: true},
		{name: "empty argument", args: []string{""}, stderr: usageErr("unknown argument: "), code: 5, done: true},
		{name: "value then stray", args: []string{"-p", "-l", "127.0.0.1"}, stderr: usageErr("unknown argument: 127.0.0.1"), code: 5, done: true},

		// Missing values.
		{name: "p missing", args: []string{"-p"}, stderr: usageErr("flag requires an argument: -p"), code: 5, done: true},
		{name: "l missing in group", args: []string{"-Vl"}, stderr: usageErr("flag requires an argument: -l"), code: 5, done: true},
		{name: "u missing", args: []string{"-u"}, stderr: usageErr("flag requires an argument: -u"), code: 5, done: true},
		{name: "b missing", args: []string{"-V", "-b"}, stderr: usageErr("flag requires an argument: -b"), code: 5, done: true},
		{name: "z missing", args: []string{"-z"}, stderr: usageErr("flag requires an argument: -z"), code: 5, done: true},
		{name: "s missing", args: []string{"-s"}, stderr: usageErr("flag requires an argument: -s"), code: 5, done: true},
		{name: "f missing", args: []string{"-f"}, stderr: usageErr("flag requires an argument: -f"), code: 5, done: true},

		// Invalid sizes.
		{name: "z letters", args: []string{"-zabc"}, stderr: usageErr("invalid size: abc"), code: 5, done: true},
		{name: "z trailing junk", args: []string{"-z", "12abc"}, stderr: usageErr("invalid size: 12abc"), code: 5, done: true},
		{name: "z trailing space", args: []string{"-z", "12 "}, stderr: usageErr("invalid size: 12 "), code: 5, done: true},
		{name: "z empty", args: []string{"-z", ""}, stderr: usageErr("invalid size: "), code: 5, done: true},
		{name: "z blanks", args: []string{"-z", "   "}, stderr: usageErr("invalid size:    "), code: 5, done: true},
		{name: "z hex", args: []string{"-z", "0x10"}, stderr: usageErr("invalid size: 0x10"), code: 5, done: true},
		{name: "z bare sign", args: []string{"-z", "-"}, stderr: usageErr("invalid size: -"), code: 5, done: true},
		{name: "z takes next flag", args: []string{"-z", "-l"}, stderr: usageErr("invalid size: -l"), code: 5, done: true},
		{name: "s letters", args: []string{"-s", "abc"}, stderr: usageErr("invalid size: abc"), code: 5, done: true},
		{name: "f letters", args: []string{"-f", "abc"}, stderr: usageErr("invalid size: abc"), code: 5, done: true},
		{name: "f signed junk", args: []string{"-f", "-1x"}, stderr: usageErr("invalid size: -1x"), code: 5, done: true},
		{name: "f decimal", args: []string{"-f", "1.5"}, stderr: usageErr("invalid size: 1.5"), code: 5, done: true},
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cfg, code, done := Parse(tt.args, &stdout, &stderr)
			if code != tt.code || done != tt.done {
				t.Errorf("code, done = %d, %v; want %d, %v", code, done, tt.code, tt.done)
			}
			if got := stdout.String(); got != tt.stdout {
				t.Errorf("stdout = %q; want %q", got, tt.stdout)
			}
			if got := stderr.String(); got != tt.stderr {
				t.Errorf("stderr = %q; want %q", got, tt.stderr)
			}
			if !tt.done {
				if got := exported(cfg); !reflect.DeepEqual(got, tt.want) {
					t.Errorf("config = %+v\nwant     %+v", got, tt.want)
				}
			}
		})
	}
}

// Parse must remember whether -l/-p were given, not just their values: a
// systemd-activated server warns about "-p 11300" too.
func TestParseRemembersListenOptions(t *testing.T) {
	var out bytes.Buffer
	cfg, _, _ := Parse([]string{"-p", DefaultPort}, &out, &out)
	if !cfg.portGiven || cfg.addrGiven {
		t.Fatalf("portGiven, addrGiven = %v, %v; want true, false", cfg.portGiven, cfg.addrGiven)
	}
	cfg, _, _ = Parse([]string{"-Vl0.0.0.0"}, &out, &out)
	if cfg.portGiven || !cfg.addrGiven {
		t.Fatalf("portGiven, addrGiven = %v, %v; want false, true", cfg.portGiven, cfg.addrGiven)
	}
}

func TestUsageMentionsEveryUpstreamFlag(t *testing.T) {
	for _, f := range []string{"-b", "-f", "-F", "-l", "-p", "-u", "-z", "-s", "-v", "-V", "-h", "-c", "-n"} {
		if !strings.Contains(usageText, " "+f) {
			t.Errorf("usage lacks %s", f)
		}
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true},
		{"65535", 65535, true},
		{"\t\n 7", 7, true},
		{"+0", 0, true},
		{"-0", 0, true},
		{"-2", 1<<64 - 2, true},
		{"18446744073709551615", 1<<64 - 1, true},
		{"18446744073709551616", 1<<64 - 1, true},
		{"-18446744073709551616", 1<<64 - 1, true},
		{"", 0, false},
		{" ", 0, false},
		{"+", 0, false},
		{"+-1", 0, false},
		{"1 ", 0, false},
		{"1\n", 0, false},
		{"1e3", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseSize(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseSize(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// --http serves HTTPS whenever the TLS files are given, unless
// --http-plain; --join speaks what the group's members serve, unless its
// value says which.
func TestHTTPSAndJoinSchemeFollowTheTLSFiles(t *testing.T) {
	cluster := []string{"--cluster-dir=d", "--node-id=a", "--raft=127.0.0.1:7000", "--join=10.0.0.1:8080"}
	files := []string{"--tls-cert=c", "--tls-key=k", "--tls-client-ca=ca"}
	for _, tc := range []struct {
		args  []string
		https bool
		join  string
	}{
		{args: cluster, join: "http://10.0.0.1:8080"},
		{args: append(append([]string{"--http=:8080"}, files...), cluster...), https: true, join: "https://10.0.0.1:8080"},
		{args: append(append([]string{"--http=:8080", "--http-plain"}, files...), cluster...), join: "http://10.0.0.1:8080"},
		{args: append(append([]string{"--http=:8080"}, files...), append(cluster, "--join=http://10.0.0.1:8080")...), https: true, join: "http://10.0.0.1:8080"},
		{args: append(append([]string{}, cluster...), "--join=https://10.0.0.1:8080"), join: "https://10.0.0.1:8080"},
		{args: append([]string{"--tls-listen=:11301"}, files...)},
	} {
		var out, errOut bytes.Buffer
		cfg, _, done := Parse(tc.args, &out, &errOut)
		if done {
			t.Fatalf("%q: %s", tc.args, errOut.String())
		}
		if cfg.HTTPS() != tc.https {
			t.Errorf("%q: HTTPS() = %v, want %v", tc.args, cfg.HTTPS(), tc.https)
		}
		if tc.join != "" && cfg.JoinURL() != tc.join {
			t.Errorf("%q: JoinURL() = %q, want %q", tc.args, cfg.JoinURL(), tc.join)
		}
	}
}
