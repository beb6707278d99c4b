// Package record is the vocabulary every journal behind the engine shares:
// a job as a full record carries it (Job, State, Counters), the encoding of
// each kind of change as a payload (AppendFull, AppendDelete, AppendBury,
// AppendKick, AppendRelease, AppendPause; Decode), how a payload folds into the set of
// live jobs (Apply), and the Ack a journal calls when a change is as durable
// as it promises. It imports nothing of beanpole's: the engine, the binlog
// (persist) and the cluster journal (cluster) all import it, and none of
// them imports another for these types.
package record

import "errors"

var (
	// ErrBad: bytes that are not a record made by the Append functions.
	ErrBad = errors.New("malformed record")
	// ErrNoSpace: the journal has no room for the record (a full disk);
	// nothing was queued. A put answers OUT_OF_MEMORY, as upstream.
	ErrNoSpace = errors.New("no space for record")
)

// Ack is told, exactly once, how a change a journal queued ended: err is
// nil once the record is as durable as the journal promises, or the error
// that means it never will be. Durable runs on the journal's own goroutine:
// it must be quick and must not block.
type Ack interface{ Durable(err error) }

// AckFunc adapts a function to Ack.
type AckFunc func(error)

// Durable calls f.
func (f AckFunc) Durable(err error) { f(err) }
