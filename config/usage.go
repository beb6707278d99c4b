package config

import (
	"fmt"
	"io"
)

// writeUsage prints the help text. It follows upstream's layout and wording
// so that anyone who knows beanstalkd's -h finds the same lines, names
// beanpole, and says so plainly that the options are the same.
func writeUsage(w io.Writer) {
	fmt.Fprintf(w, `Use: %s [OPTIONS]
     %s import -b DIR [--from SRC] [--dry-run] [--accept-damage]

%s is a drop-in replacement for beanstalkd and accepts the same options.

Options:
 -b DIR   write-ahead log directory
 -f MS    fsync at most once every MS milliseconds (default is %dms);
          use -f0 for "always fsync"
 -F       never fsync
 -l ADDR  listen on address (default is 0.0.0.0);
          use unix:PATH for a UNIX socket (-p is then ignored)
 -p PORT  listen on port (default is %s)
 -u USER  become user and group
 -z BYTES set the maximum job size in bytes (default is %d);
          max allowed is %d bytes
 -s BYTES set the size of each write-ahead log file (default is %d)
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
            (default is %d)
 --http-pprof
            also serve /debug/pprof/ there
 --metrics-max-tubes N
            tubes beyond the first N are summed into tube="_other" in
            /metrics (default is %d)
 --metrics-total-names
            name the counters of stats and stats-tube with a _total suffix
            in /metrics (beanstalkd_cmd_put_total), as Prometheus wants,
            instead of as the beanstalkd exporters do (beanstalkd_cmd_put)
 --stop-grace DURATION
            at SIGTERM or SIGINT, with --http, answer 503 stopping on
            /readyz for DURATION while still serving clients, then close
            the listeners (default is %s; 0 closes them at once)
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

%s import carries the jobs of beanstalkd's binlog over into beanpole's log
and exits (beanstalkd's binlog in DIR, or read from SRC into DIR without
changing SRC); %s import -h says more.
%s cluster asks a cluster node about the group or changes it; %s cluster -h
says more.
`, progName, progName, progName,
		DefaultSyncEvery.Milliseconds(), DefaultPort,
		DefaultMaxJobSize, MaxJobSizeLimit, DefaultBinlogSize, DefaultHTTPMaxConns, DefaultMetricsMaxTubes, DefaultStopGrace,
		progName, progName, progName, progName)
}
