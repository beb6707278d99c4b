package cluster

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/hashicorp/raft"
)

// Status is a node's view of the group (GET /cluster).
type Status struct {
	ID           string         `json:"id"`
	State        string         `json:"state"`  // leader, follower, candidate, shutdown
	Leader       string         `json:"leader"` // the leader's id, "" while there is none
	Term         uint64         `json:"term"`
	CommitIndex  uint64         `json:"commit_index"`
	AppliedIndex uint64         `json:"applied_index"`
	LastContact  string         `json:"last_contact"` // a follower's time since it last heard the leader
	Members      []MemberStatus `json:"members"`

	// ForwardRefused counts the clients closed as soon as accepted while
	// following, to keep descriptors for raft (Forwarder).
	ForwardRefused uint64 `json:"forward_refused"`
}

// MemberStatus is one member of the group's configuration.
type MemberStatus struct {
	ID     string `json:"id"`
	Raft   string `json:"raft"`
	Client string `json:"client"` // known once the member has led ("" before)
	Voter  bool   `json:"voter"`
	// On the leader, for every other member, what its last probe found
	// (membership.go): whether it answered, the last index in its log,
	// and why it did not answer.
	Reachable *bool  `json:"reachable,omitempty"`
	LastIndex uint64 `json:"last_index,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Status reads the node's view of the group.
func (n *Node) Status() any {
	st := n.Raft.Stats()
	_, leader := n.Raft.LeaderWithID()
	s := Status{ID: n.cfg.ID, State: stateName(n.Raft.State()), Leader: string(leader),
		CommitIndex: atou(st["commit_index"]), AppliedIndex: n.Raft.AppliedIndex(), Term: atou(st["term"]),
		LastContact: st["last_contact"], Members: []MemberStatus{}, ForwardRefused: n.m.forwardRefused.Load()}
	if f := n.Raft.GetConfiguration(); f.Error() == nil {
		clients := n.FSM.Clients()
		for _, srv := range f.Configuration().Servers {
			m := MemberStatus{ID: string(srv.ID), Raft: string(srv.Address),
				Client: clients[string(srv.ID)], Voter: srv.Suffrage == raft.Voter}
			n.memberHealth(&m)
			s.Members = append(s.Members, m)
		}
	}
	return s
}

// Overview is the node's view of the group as the dashboard shows it to
// anyone who reaches --http: Status without the members' raft and client
// addresses, which GET /cluster keeps for the token.
func (n *Node) Overview() any {
	st := n.Status().(Status)
	for i := range st.Members {
		st.Members[i].Raft, st.Members[i].Client = "", ""
	}
	return st
}

// Summary is the node's health for whoever asks without the token: its
// state and whether it knows a leader, nothing an attacker could aim with.
type Summary struct {
	State       string `json:"state"`
	LeaderKnown bool   `json:"leader_known"`
	Detail      string `json:"detail"`
}

// Summary reads the node's health (GET /cluster without the token).
func (n *Node) Summary() any {
	_, leader := n.Raft.LeaderWithID()
	return Summary{State: stateName(n.Raft.State()), LeaderKnown: leader != "",
		Detail: "ids, addresses, terms and indexes need the --http-token-file token (Authorization: Bearer TOKEN)"}
}

func stateName(s raft.RaftState) string {
	switch s {
	case raft.Leader:
		return "leader"
	case raft.Follower:
		return "follower"
	case raft.Candidate:
		return "candidate"
	}
	return "shutdown"
}

func atou(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

// errFollower names the leader for an operation only the leader does.
func (n *Node) errFollower() error {
	_, id := n.Raft.LeaderWithID()
	if id == "" {
		return errors.New("this node does not lead and no leader is known: try again after the election")
	}
	return fmt.Errorf("this node does not lead: ask %s", id)
}

// TransferLeader hands the lead to the voter id, or to the most
// up-to-date one when id is "". Leader only. From the moment it starts the
// node answers no client (Leads is false): the new leader takes over
// without waiting for this one's lease to run out, so this one must stop
// first. Should the transfer fail, the node answers again.
func (n *Node) TransferLeader(id string) error {
	if n.Raft.State() != raft.Leader {
		return n.errFollower()
	}
	var target *raft.Server
	if id != "" {
		f := n.Raft.GetConfiguration()
		if err := f.Error(); err != nil {
			return err
		}
		for _, srv := range f.Configuration().Servers {
			if string(srv.ID) == id {
				target = &srv
			}
		}
		if target == nil {
			return fmt.Errorf("no member has id %q", id)
		}
		if target.Suffrage != raft.Voter {
			return fmt.Errorf("%s is not a voter: a node added to the group becomes one once it has caught up", id)
		}
	}
	n.fenceAfter.Store(boottime())
	n.handingOver.Store(true)
	var err error
	if target == nil {
		err = n.Raft.LeadershipTransfer().Error()
	} else {
		err = n.Raft.LeadershipTransferToServer(target.ID, target.Address).Error()
	}
	if err != nil {
		// The transfer may have got as far as telling the target to
		// campaign: only a round that starts from now confirms the lead.
		n.fenceAfter.Store(boottime())
		n.handingOver.Store(false)
	}
	return err
}
