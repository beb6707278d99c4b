package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/beanpole/beanpole/admin"
	"github.com/beanpole/beanpole/cluster"
	"github.com/beanpole/beanpole/config"
	"github.com/beanpole/beanpole/engine"
	"github.com/beanpole/beanpole/loop"
	"github.com/beanpole/beanpole/persist"
)

// exitDeposed is the exit status of a leader that lost the lead: its
// engine holds reservations and jobs that the new leader may already have
// handed out, so it stops, closing every client connection (as a
// beanstalkd death does), and a restart (systemd's Restart=on-failure)
// brings it back as a follower.
const exitDeposed = 75

// startCluster opens this node of the group (--cluster-dir), forwards its
// clients to the leader until it leads itself, then loads the engine from
// the replicated state and makes the engine log through raft. It returns a
// non-zero exit code on failure or when stopped while following. With
// TLS files, SIGHUP reloads them (reloadOnSIGHUP) while following instead
// of being ignored, and the links between nodes use mutual TLS with the
// files loaded last. handleSignals hands SIGUSR1, SIGTERM and SIGINT to
// the server's own handling; it is called as soon as the node leads, so
// a signal sent once the node says it leads is never lost.
func startCluster(cfg *config.Config, eng *engine.Engine, lns []net.Listener, tlsLn net.Listener, adm *admin.Server, files *loop.TLSFiles, handleSignals func(), log zerolog.Logger, stderr io.Writer) (*cluster.Node, int) {
	var members []cluster.Member
	if cfg.Bootstrap != "" {
		var err error
		if members, err = cluster.ParseMembers(cfg.Bootstrap); err != nil {
			fmt.Fprintf(stderr, "beanpole: --bootstrap: %v\n", err)
			return nil, config.ExitUsage
		}
	}
	var nodeTLS func() *tls.Config
	if files != nil && cfg.TLSClientCA != "" {
		nodeTLS = func() *tls.Config {
			c := files.Loaded()
			return cluster.NodeTLS(c.Certificates[0], c.ClientCAs)
		}
	}
	node, err := cluster.Open(cluster.Config{ID: cfg.NodeID, Dir: cfg.ClusterDir, Raft: cfg.RaftAddr,
		Bootstrap: members, TLS: nodeTLS, Log: log})
	if err != nil {
		fmt.Fprintf(stderr, "beanpole: %v\n", err)
		return nil, 1
	}
	adm.SetCluster(node)
	if cfg.Join != "" && node.Fresh {
		if code := join(cfg, nodeTLS, stderr); code != 0 {
			node.Close()
			return nil, code
		}
	}
	fw := node.Forward(lns, tlsLn, reserveFDs(cfg))
	log.Info().Str("node", cfg.NodeID).Str("raft", cfg.RaftAddr).Msg("cluster: following; clients are forwarded to the leader")

	// While following, a stop ends the wait; drain mode means nothing yet
	// and must not kill the process (its default), so it is ignored until
	// the server's own handling takes it over. SIGHUP reloads the TLS
	// files of HTTPS on --http if there are any, and is ignored otherwise.
	signal.Ignore(syscall.SIGUSR1)
	if files == nil {
		signal.Ignore(syscall.SIGHUP)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	jl, err := node.AwaitLeadership(ctx)
	fw.Stop()
	if err != nil {
		node.Close()
		if ctx.Err() != nil {
			return nil, 0 // stopped while following
		}
		fmt.Fprintf(stderr, "beanpole: %v\n", err)
		return nil, 1
	}
	handleSignals()
	if cfg.ClusterImport != "" {
		if code := seed(node, cfg.ClusterImport, log, stderr); code != 0 {
			node.Close()
			return nil, code
		}
	}
	var self, selfTLS string
	if len(lns) > 0 {
		self = clientAddr(lns[0], cfg.RaftAddr)
	}
	if tlsLn != nil {
		selfTLS = clientAddr(tlsLn, cfg.RaftAddr)
	}
	if err := node.Announce(self, selfTLS); err != nil {
		node.Close()
		fmt.Fprintf(stderr, "beanpole: cluster: announcing the leader: %v\n", err)
		return nil, exitDeposed
	}
	jobs, maxID := node.FSM.State()
	eng.Restore(jobs, maxID)
	eng.SetJournal(jl)
	log.Info().Str("node", cfg.NodeID).Int("jobs", len(jobs)).Uint64("max-id", maxID).Msg("cluster: leading")
	return node, 0
}

// seed replicates the jobs of the binlog in dir into the group, once: a
// group that already holds jobs or ids is left as it is.
func seed(node *cluster.Node, dir string, log zerolog.Logger, stderr io.Writer) int {
	if _, top := node.FSM.State(); top != 0 {
		log.Info().Str("dir", dir).Msg("cluster: the group holds jobs already; --cluster-import is not applied again")
		return 0
	}
	start := time.Now()
	blog, rec, err := persist.Open(persist.Options{Dir: dir}, log.With().Str("component", "binlog").Logger())
	if err != nil {
		fmt.Fprintf(stderr, "beanpole: --cluster-import %s: %v\n", dir, err)
		return 1
	}
	jobs, maxID := rec.Jobs, rec.MaxID
	if err := blog.Close(); err != nil {
		fmt.Fprintf(stderr, "beanpole: --cluster-import %s: %v\n", dir, err)
		return 1
	}
	if err := node.Seed(jobs, maxID); err != nil {
		fmt.Fprintf(stderr, "beanpole: --cluster-import %s: %v\n", dir, err)
		return 1
	}
	log.Info().Str("dir", dir).Int("jobs", len(jobs)).Uint64("max-id", maxID).Dur("took", time.Since(start)).
		Msg("cluster: seeded the group from the binlog")
	return 0
}

// join asks a member (--join, its --http address) to add this node. Over
// HTTPS it trusts the group's CA and presents this node's certificate
// (nodeTLS, the links' configuration), or with no nodeTLS the system's
// CAs.
func join(cfg *config.Config, nodeTLS func() *tls.Config, stderr io.Writer) int {
	var token string
	if cfg.HTTPTokenFile != "" {
		b, err := readToken(cfg.HTTPTokenFile)
		if err != nil {
			fmt.Fprintf(stderr, "beanpole: --http-token-file: %v\n", err)
			return 1
		}
		token = string(b)
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if nodeTLS != nil {
		conf = nodeTLS()
	}
	client := clusterClient(conf)
	form := url.Values{"id": {cfg.NodeID}, "raft": {cfg.RaftAddr}}
	if code := clusterRequest(client, http.MethodPost, cfg.JoinURL(), "/cluster/add", token, form, io.Discard, stderr); code != 0 {
		fmt.Fprintf(stderr, "beanpole: --join %s: this node was not added\n", cfg.Join)
		return code
	}
	return 0
}

// clientAddr is the address other nodes forward this node's clients to:
// ln's (the first plaintext listener, or the TLS one), with an unspecified
// host replaced by --raft's.
func clientAddr(ln net.Listener, raftAddr string) string {
	addr := ln.Addr().String()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		if rh, _, err := net.SplitHostPort(raftAddr); err == nil {
			host = rh
		}
	}
	return net.JoinHostPort(host, port)
}

// leaveCluster hands the lead to another node if this one leads (so the
// group does not wait for an election timeout), then stops raft.
func leaveCluster(node *cluster.Node, log zerolog.Logger) {
	if node == nil {
		return
	}
	done := make(chan error, 1)
	go func() { done <- node.TransferLeader("") }()
	select {
	case err := <-done:
		if err != nil {
			log.Debug().Err(err).Msg("cluster: no leadership transfer")
		}
	case <-time.After(5 * time.Second):
	}
	if err := node.Close(); err != nil {
		log.Error().Err(err).Msg("cluster: closing")
		os.Exit(1)
	}
}
