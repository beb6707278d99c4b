package persist

import (
	"github.com/beanpole/beanpole/record"

	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/beanpole/beanpole/persist/upstream"
	"github.com/rs/zerolog"
)

// importBatch is how many bytes of records the import queues before it
// waits for them to reach the disk, so that the log's buffer never holds
// more than that of the bodies.
const importBatch = 16 << 20

// writeStaged writes jobs as a fresh log of beanpole's in staging, through
// the log's own Put, marks ids used up to maxID (deleted jobs included),
// and returns once all of it is durable, directory entries included.
// Bodies are copied from the upstream files of dir one at a time.
func writeStaged(opts Options, log zerolog.Logger, staging string, jobs []*upstream.Job, maxID uint64) error {
	if err := os.Mkdir(staging, 0o700); err != nil {
		return importErr(err)
	}
	sl, _, err := Open(Options{Dir: staging, WantSync: true, SegmentSize: opts.SegmentSize, FS: opts.FS},
		log.With().Str("staging", staging).Logger())
	if err != nil {
		return importErr(err)
	}
	bodies := bodyReader{fsys: opts.FS, dir: opts.Dir}
	defer bodies.close()
	fail := func(err error) error {
		sl.Close()
		return importErr(err)
	}
	// Acks come in append order: the one of the last record queued means
	// every record before it is durable too.
	done := make(chan error, 1)
	ack := record.AckFunc(func(err error) { done <- err })
	pending := 0
	for i, uj := range jobs {
		body, err := bodies.read(uj)
		if err != nil {
			return fail(err)
		}
		j, err := importedJob(uj, body)
		if err != nil {
			return fail(err)
		}
		var a record.Ack
		if pending += record.FullSize(j); pending >= importBatch {
			a, pending = ack, 0
		}
		if err := sl.Put(j, a); err != nil {
			return fail(fmt.Errorf("job %d: %w", j.ID, err))
		}
		if i == 0 {
			crashPoint("writing")
		}
		if a != nil {
			if err := <-done; err != nil {
				return fail(err)
			}
		}
	}
	if err := sl.place(record.AppendHighWater(nil, maxID), record.KindHighWater, maxID, ack); err != nil {
		return fail(err)
	}
	err = <-done
	if cerr := sl.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = opts.FS.SyncDir(staging)
	}
	if err == nil {
		err = opts.FS.SyncDir(opts.Dir)
	}
	return importErr(err)
}

// importedJob is u as a job of beanpole's, with body.
func importedJob(u *upstream.Job, body []byte) (*record.Job, error) {
	j := &record.Job{ID: u.ID, Tube: u.Tube, Pri: u.Pri, Delay: u.Delay, TTR: u.TTR, CreatedAt: u.CreatedAt,
		Deadline: u.Deadline, BuriedSeq: u.BuriedSeq, Body: body,
		Counters: record.Counters(u.Counters)}
	switch u.State {
	case upstream.Ready:
		j.State = record.StateReady
	case upstream.Delayed:
		j.State = record.StateDelayed
	case upstream.Buried:
		j.State = record.StateBuried
	default:
		return nil, fmt.Errorf("job %d: state %v left by the replay", u.ID, u.State)
	}
	return j, nil
}

// bodyReader reads bodies out of the upstream files, keeping the file of
// the last one open: jobs come ordered by where their bodies are.
type bodyReader struct {
	fsys FS
	dir  string
	seq  uint64
	f    File
	buf  []byte
}

// read returns u's body; it is valid until the next call.
func (b *bodyReader) read(u *upstream.Job) ([]byte, error) {
	at := u.Body
	if b.f == nil || b.seq != at.File {
		b.close()
		f, err := b.fsys.OpenFile(join(b.dir, segName(at.File)), os.O_RDONLY, 0)
		if err != nil {
			return nil, err
		}
		b.f, b.seq = f, at.File
	}
	if int64(cap(b.buf)) < at.Size {
		b.buf = make([]byte, at.Size)
	}
	body := b.buf[:at.Size]
	if n, err := b.f.ReadAt(body, at.Offset); err != nil && !(errors.Is(err, io.EOF) && n == len(body)) {
		return nil, fmt.Errorf("job %d: %s at offset %d: %w", u.ID, segName(at.File), at.Offset, err)
	}
	if !bytes.HasSuffix(body, []byte("\r\n")) {
		return nil, fmt.Errorf("job %d: %s at offset %d: the body changed since it was read", u.ID, segName(at.File), at.Offset)
	}
	return body, nil
}

func (b *bodyReader) close() {
	if b.f != nil {
		b.f.Close()
		b.f = nil
	}
}
