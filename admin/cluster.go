package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Cluster is what the HTTP side shows of a cluster node (GET /cluster) and
// asks of it (POST /cluster/{add,remove,transfer-leader}, with the token).
type Cluster interface {
	// Status is the node's view of the group, encoded as JSON: for
	// whoever has the token.
	Status() any
	// Overview is Status without the members' addresses: what the
	// dashboard shows without the token.
	Overview() any
	// Summary is what anyone may see: whether the node leads, follows or
	// looks for a leader, and whether it knows one.
	Summary() any
	// Add adds a node to the group and says how it went.
	Add(id, raft string) (string, error)
	// Remove takes a node out of the group and says how it went.
	Remove(id string) (string, error)
	TransferLeader(id string) error
}

// SetCluster makes /cluster answer for c; without it /cluster answers 404
// (the process is not a cluster node).
// When c is also a prometheus.Collector, /metrics includes its series.
func (s *Server) SetCluster(c Cluster) {
	if s == nil {
		return
	}
	s.cluster.Store(&c)
	if col, ok := c.(prometheus.Collector); ok {
		_ = s.reg.Register(col)
	}
}

// SetGroups makes /cluster/groups answer with groups() (the node's view of
// every raft group it hosts), for whoever has the token.
func (s *Server) SetGroups(groups func() any) {
	if s == nil {
		return
	}
	s.groups.Store(&groups)
}

// clusterGroups answers GET /cluster/groups.
func (d *dashboard) clusterGroups(w http.ResponseWriter, r *http.Request) {
	p := d.s.groups.Load()
	if p == nil {
		http.Error(w, "not a cluster node (start beanpole with --cluster-dir)", http.StatusNotFound)
		return
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || d.token == nil {
		http.Error(w, "the groups are shown to whoever has the token (Authorization: Bearer, --http-token-file)", http.StatusUnauthorized)
		return
	}
	if !d.authorized(w, r, tok, "") {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode((*p)())
}

func (d *dashboard) node(w http.ResponseWriter) Cluster {
	p := d.s.cluster.Load()
	if p == nil {
		http.Error(w, "not a cluster node (start beanpole with --cluster-dir)", http.StatusNotFound)
		return nil
	}
	return *p
}

// clusterStatus answers GET /cluster: the node's view of the group with the
// token (ids, addresses, terms and indexes tell an attacker where to aim),
// a health summary without it.
func (d *dashboard) clusterStatus(w http.ResponseWriter, r *http.Request) {
	c := d.node(w)
	if c == nil {
		return
	}
	var v any
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && d.token != nil {
		if !d.authorized(w, r, tok, "") {
			return
		}
		v = c.Status()
	} else {
		v = c.Summary()
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// clusterAction changes the group's membership or leader. add and remove
// run on the leader only; the answer names the leader otherwise.
func (d *dashboard) clusterAction(w http.ResponseWriter, r *http.Request) {
	c := d.node(w)
	if c == nil || !d.permit(w, r) {
		return
	}
	var err error
	var msg string
	switch act := r.PathValue("action"); act {
	case "add":
		id, raft := r.PostForm.Get("id"), r.PostForm.Get("raft")
		if id == "" || raft == "" {
			http.Error(w, "add needs id and raft (HOST:PORT)", http.StatusBadRequest)
			return
		}
		msg, err = c.Add(id, raft)
	case "remove":
		id := r.PostForm.Get("id")
		if id == "" {
			http.Error(w, "remove needs id", http.StatusBadRequest)
			return
		}
		msg, err = c.Remove(id)
	case "transfer-leader":
		err, msg = c.TransferLeader(r.PostForm.Get("id")), "the lead was handed over"
	default:
		http.Error(w, fmt.Sprintf("unknown cluster action %q (add, remove, transfer-leader)", act), http.StatusNotFound)
		return
	}
	if err != nil {
		d.log.Warn().Err(err).Str("action", r.PathValue("action")).Msg("cluster action refused")
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	d.log.Info().Str("action", r.PathValue("action")).Str("remote", r.RemoteAddr).Msg("cluster: " + msg)
	_, _ = fmt.Fprintln(w, msg)
}
