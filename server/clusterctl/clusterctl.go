// Package clusterctl is `beanpole cluster`: a client of a cluster node's
// HTTP side (/cluster) that shows the group and changes it. A node's
// --join asks its member through the same client.
package clusterctl

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/beanpole/beanpole/config"
)

const clusterUsage = `Use: beanpole cluster COMMAND --http HOST:PORT [--tls-ca FILE] [--token-file FILE] [ARGS]

Asks a cluster node, through its --http address, about the group or to
change it. Changes need the node's --http-token-file token and run on the
leader (a follower answers with the leader's id).

--http https://HOST:PORT, or --tls-ca FILE, speaks HTTPS to a node that
serves it (a node with --tls-cert and --tls-key does, unless --http-plain):
--tls-ca FILE holds the CAs (PEM) that signed the node's certificate,
usually the nodes' --tls-client-ca; without it the system's CAs are used.

  status                         the node's view: state, leader, term,
                                 commit and applied index, members (JSON;
                                 without the token, only its state and
                                 whether it knows a leader)
  groups                         the node's view of every raft group it
                                 hosts (group 0, and with --groups the
                                 data groups): leader, its own state, term,
                                 members (voters, non-voters), jobs, tubes
                                 (JSON; needs the token)
  add --id ID --raft HOST:PORT   add a node to the group as a non-voter,
                                 promoted to voter once it has caught up
                                 (fails, naming the error, when the node
                                 does not answer there); with --groups,
                                 every data group then adds it
  remove --id ID                 take a node out of the group (the leader
                                 hands the lead over first), and with
                                 --groups out of every data group; the
                                 removed node exits with status 78
  transfer-leader [--id ID]      hand the lead to voter ID (default: the
                                 most up-to-date one)
`

// Main is `beanpole cluster`, given the arguments after "cluster". Exit status: 0 done, 1 refused or
// failed, 5 a usage error.
func Main(args []string, stdout, stderr io.Writer) int {
	usage := func(msg string) int {
		fmt.Fprintf(stderr, "beanpole cluster: %s\n%s", msg, clusterUsage)
		return 5
	}
	if len(args) == 0 {
		return usage("a command is required")
	}
	cmd, opts := args[0], map[string]string{}
	if cmd == "-h" || cmd == "--help" {
		fmt.Fprint(stdout, clusterUsage)
		return 0
	}
	for i := 1; i < len(args); i++ {
		name, v, ok := strings.Cut(args[i], "=")
		if !ok {
			if i+1 == len(args) {
				return usage(name + " needs a value")
			}
			i++
			v = args[i]
		}
		switch name {
		case "--http", "--tls-ca", "--token-file", "--id", "--raft":
			opts[name] = v
		default:
			return usage(fmt.Sprintf("unexpected %q", args[i]))
		}
	}
	if opts["--http"] == "" {
		return usage("--http HOST:PORT is required")
	}
	base := opts["--http"]
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		base = "http://" + base
		if opts["--tls-ca"] != "" {
			base = "https://" + opts["--http"]
		}
	}
	conf, err := trustConfig(opts["--tls-ca"])
	if err != nil {
		fmt.Fprintf(stderr, "beanpole cluster: --tls-ca: %v\n", err)
		return 1
	}
	var token []byte
	if f := opts["--token-file"]; f != "" {
		var err error
		if token, err = config.ReadToken(f); err != nil {
			fmt.Fprintf(stderr, "beanpole cluster: --token-file: %v\n", err)
			return 1
		}
	}
	client := Client(conf)
	form := url.Values{}
	switch cmd {
	case "status":
		return Request(client, http.MethodGet, base, "/cluster", string(token), nil, stdout, stderr)
	case "groups":
		return Request(client, http.MethodGet, base, "/cluster/groups", string(token), nil, stdout, stderr)
	case "add":
		if opts["--id"] == "" || opts["--raft"] == "" {
			return usage("add needs --id and --raft")
		}
		form.Set("id", opts["--id"])
		form.Set("raft", opts["--raft"])
	case "remove":
		if opts["--id"] == "" {
			return usage("remove needs --id")
		}
		form.Set("id", opts["--id"])
	case "transfer-leader":
		if id := opts["--id"]; id != "" {
			form.Set("id", id)
		}
	default:
		return usage(fmt.Sprintf("unknown command %q", cmd))
	}
	return Request(client, http.MethodPost, base, "/cluster/"+cmd, string(token), form, stdout, stderr)
}

// trustConfig is the TLS configuration of a client that trusts the CAs in
// caFile ("": the system's).
func trustConfig(caFile string) (*tls.Config, error) {
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, errors.New(caFile + " holds no PEM certificate")
		}
	}
	return conf, nil
}

// Client is the HTTP client of `beanpole cluster` and --join, with
// conf for HTTPS.
func Client(conf *tls.Config) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: conf}}
}

// Request sends one request to a node's HTTP side (base is
// http://HOST:PORT or https://HOST:PORT) and prints the answer: on stdout
// when it succeeded, on stderr (exit 1) otherwise.
func Request(client *http.Client, method, base, path, token string, form url.Values, stdout, stderr io.Writer) int {
	req, err := http.NewRequest(method, base+path, strings.NewReader(form.Encode()))
	if err != nil {
		fmt.Fprintf(stderr, "beanpole cluster: %v\n", err)
		return 5
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	hostPort := req.URL.Host
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "beanpole cluster: %v\n", err)
		if errors.Is(err, http.ErrSchemeMismatch) {
			fmt.Fprintf(stderr, "beanpole cluster: %s serves plain HTTP: ask http://%s\n", hostPort, hostPort)
		}
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		fmt.Fprintf(stderr, "beanpole cluster: %s: %s", resp.Status, body)
		// net/http's answer to plain HTTP on an HTTPS port.
		if resp.StatusCode == http.StatusBadRequest && req.URL.Scheme == "http" && bytes.Contains(body, []byte("HTTPS server")) {
			fmt.Fprintf(stderr, "beanpole cluster: %s serves HTTPS: ask https://%s (beanpole cluster --tls-ca FILE trusts the CA in FILE)\n", hostPort, hostPort)
		}
		return 1
	}
	_, _ = stdout.Write(body)
	return 0
}
