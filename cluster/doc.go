// Package cluster is the engine's journal on a Raft group
// (github.com/hashicorp/raft, log and stable store github.com/hashicorp/raft-wal,
// snapshots in raft's file snapshot store). It implements the same typed
// journal as the single-node binlog (package persist), with the same
// records (package record): a change is acknowledged once its entry is
// committed, which raft reports after a majority of the nodes wrote it to
// their write-ahead log and fsynced it.
//
// The pieces:
//
//	Journal  the engine's journal on the leader: records of one batch (what
//	         arrives while the previous batch is handed to raft) become one
//	         raft entry; many entries are in flight at once; acks run in
//	         append order when their entry commits.
//	FSM      every node's state machine: the set of live jobs and the
//	         highest id ever named (record.Live), the paused tubes, and the
//	         client address of each node that has led, fed by committed
//	         entries, streamed to and from snapshots.
//	Node     a node: raft with its stores and transport, bootstrap, the
//	         leadership it holds.
//
// Reservations and TTR timers are not replicated: they live on the leader,
// and a new leader starts with every job of a reserved state ready, as
// beanstalkd does after a restart.
package cluster
