package persist

import (
	"errors"

	"github.com/beanpole/beanpole/record"
)

var (
	// ErrLocked: another process (or another Open in this one) holds
	// DIR/lock. Upstream exits with status 10 ("failed to lock wal dir").
	ErrLocked = errors.New("failed to lock wal dir")

	// ErrNoSpace: no room could be reserved for the record (disk full,
	// quota, unwritable directory, out of file descriptors...). The record
	// was not queued; a put should answer OUT_OF_MEMORY, as upstream does.
	// Deletes never get it: their room was reserved by the put.
	ErrNoSpace = record.ErrNoSpace

	// ErrFailed: a write or fsync failed, so nothing written after it can be
	// promised durable. Every later append returns it (wrapped with the
	// cause), and every record queued but not yet written is acknowledged
	// with it.
	ErrFailed = errors.New("binlog: write failed")

	// ErrClosed: an append after Close.
	ErrClosed = errors.New("binlog: closed")

	// ErrBadRecord: a record the log refuses to read or write: not one
	// package record encodes, or a full record for job id 0.
	ErrBadRecord = record.ErrBad

	// ErrUnusable: Open took the directory's lock but could not import,
	// read or prepare the binlog (an I/O error, say): the error wraps it
	// and keeps its cause. Upstream exits with status 1 when it cannot
	// replay its binlog.
	ErrUnusable = errors.New("binlog: cannot be used")

	// ErrFormat: the directory holds a segment this version cannot read
	// (upstream beanstalkd's format, or a newer beanpole). Open refuses to
	// start rather than silently ignore jobs.
	ErrFormat = errors.New("binlog: unsupported segment format")
)

// unusable marks a failure of Open's after the lock: errors.Is(err,
// ErrUnusable) holds, and so it does for its cause; the text is the
// cause's.
func unusable(err error) error {
	if err == nil || errors.Is(err, ErrFormat) {
		return err
	}
	return unusableError{err}
}

type unusableError struct{ err error }

func (e unusableError) Error() string   { return e.err.Error() }
func (e unusableError) Unwrap() []error { return []error{ErrUnusable, e.err} }
