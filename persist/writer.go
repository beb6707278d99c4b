package persist

import (
	"errors"
	"syscall"
	"time"

	"github.com/beanpole/beanpole/record"
)

// Group commit.
//
// Appenders place records and copy them into the pending batch under
// Log.mu; the single writer goroutine swaps the batch out and writes it with
// one pwrite per segment it touches (normally one), then fsyncs once if the
// policy says so, then calls every Ack of the batch. While it is
// busy writing or syncing, new records pile up in the next batch, so the
// number of records per write and per fsync grows with the load by itself.

// run is a contiguous stretch of a batch destined for one segment.
type run struct {
	seg        *segment
	off        int64
	start, end int // in batch.buf
}

type batch struct {
	buf      []byte
	runs     []run
	acks     []record.Ack
	lastLSN  uint64
	records  uint64 // client records (id marks excluded)
	migrated uint64
}

// add reserves n bytes at offset off of s in the batch and returns them.
func (b *batch) add(s *segment, off int64, n int) []byte {
	start := len(b.buf)
	if cap(b.buf)-start < n {
		nb := make([]byte, start, max(2*cap(b.buf), start+n, 4096))
		copy(nb, b.buf)
		b.buf = nb
	}
	b.buf = b.buf[:start+n]
	if k := len(b.runs) - 1; k >= 0 && b.runs[k].seg == s && b.runs[k].off+int64(b.runs[k].end-b.runs[k].start) == off {
		b.runs[k].end += n
	} else {
		b.runs = append(b.runs, run{seg: s, off: off, start: start, end: start + n})
	}
	return b.buf[start : start+n]
}

// maxIdleBuf: a batch buffer that grew past this for one huge job is
// dropped afterwards instead of being kept for the life of the process.
const maxIdleBuf = 4 << 20

func (b *batch) reset() {
	if cap(b.buf) > maxIdleBuf {
		b.buf = nil
	}
	b.buf = b.buf[:0]
	b.runs = b.runs[:0]
	clear(b.acks) // let the acknowledged go
	b.acks = b.acks[:0]
	b.lastLSN, b.records, b.migrated = 0, 0, 0
}

func (l *Log) writerLoop() {
	defer close(l.writerDone)
	for {
		<-l.wakeWriter
		for {
			l.mu.Lock()
			if len(l.pending.runs) == 0 {
				closed := l.closed
				l.mu.Unlock()
				if closed {
					l.finish()
					return
				}
				break
			}
			b := l.pending
			l.pending = l.w.spare
			failed := l.failed
			l.mu.Unlock()

			l.commit(&b, failed)
			b.reset()
			l.w.spare = b
		}
	}
}

// commit writes one batch and reports it.
func (l *Log) commit(b *batch, failed error) {
	err := failed
	var sealed []*segment
	if err == nil {
		start := time.Now()
		err = l.writeRuns(b, &sealed)
		l.writeNanos.Add(uint64(time.Since(start)))
	}
	if err == nil && l.opts.WantSync && l.opts.SyncEvery == 0 {
		start := time.Now()
		err = l.w.cur.sync()
		l.fsyncNanos.Add(uint64(time.Since(start)))
		l.fsyncs.Add(1)
	}
	l.mu.Lock()
	for _, s := range sealed {
		s.sealed, s.size = true, s.used // trimmed to what it holds
	}
	if err != nil {
		l.failLocked(err)
		err = l.failed
	} else {
		l.writtenLSN = b.lastLSN
		l.wcur = l.w.cur
		if !l.opts.WantSync || l.opts.SyncEvery == 0 {
			l.syncedLSN = b.lastLSN
			l.cond.Broadcast()
		}
	}
	l.mu.Unlock()
	if err == nil {
		// Count before acknowledging: a client whose reply the ack
		// releases may ask `stats` next and must see its record counted.
		l.written.Add(b.records)
		l.migrated.Add(b.migrated)
		l.batches.Add(1)
	}
	for _, a := range b.acks {
		a.Durable(err)
	}
	if err != nil {
		return
	}
	if l.opts.WantSync && l.opts.SyncEvery > 0 {
		kick(l.wakeSync)
	} else {
		l.reclaim()
	}
	if len(sealed) > 0 {
		kick(l.wakeCompact)
	}
}

// writeRuns writes the batch, sealing each segment the writer leaves.
func (l *Log) writeRuns(b *batch, sealed *[]*segment) error {
	for _, r := range b.runs {
		if r.seg != l.w.cur {
			if c := l.w.cur; c != nil {
				// Sealing fsyncs (with WantSync) so that a sealed segment
				// is always wholly durable: the syncer only ever has the
				// current segment to worry about.
				if err := c.closeFile(l.w.end, l.opts.WantSync); err != nil {
					return err
				}
				if l.opts.WantSync {
					l.fsyncs.Add(1)
				}
				*sealed = append(*sealed, c)
			}
			l.w.cur, l.w.end = r.seg, 0
			if l.opts.WantSync {
				// The new file's directory entry must be durable before
				// any record in it is acknowledged as such.
				if err := l.syncDirWaiting(); err != nil {
					return err
				}
			}
		}
		if _, err := r.seg.f.WriteAt(b.buf[r.start:r.end], r.off); err != nil {
			return err
		}
		l.bytesWritten.Add(uint64(r.end - r.start))
		l.w.end = r.off + int64(r.end-r.start)
	}
	return nil
}

// syncDirWaiting fsyncs the directory for a segment the writer moves to.
// Doing so opens the directory, which fails while the process is out of
// descriptors (EMFILE, ENFILE): that says nothing about the disk, so the
// writer waits, with backoff, until a descriptor is free, rather than
// fail the log for good. Nothing in the batch is acknowledged meanwhile,
// and appends queue behind it (or get ErrNoSpace once the spares run out).
// Only Close ends the wait, with the error.
func (l *Log) syncDirWaiting() error {
	var backoff time.Duration
	for {
		err := l.opts.FS.SyncDir(l.opts.Dir)
		if !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) {
			if backoff != 0 && err == nil {
				l.log.Warn().Msg("binlog: descriptors available again; writing")
			}
			return err
		}
		l.mu.Lock()
		closed := l.closed
		l.mu.Unlock()
		if closed {
			return err
		}
		if backoff == 0 {
			l.log.Error().Err(err).Msg("binlog: out of file descriptors: nothing is written or acknowledged until one is free")
		}
		backoff = min(max(2*backoff, time.Millisecond), 200*time.Millisecond)
		time.Sleep(backoff)
	}
}

// finish is the writer's last act on Close: everything has been written;
// make it durable whatever the policy.
func (l *Log) finish() {
	c := l.w.cur
	if c == nil {
		return
	}
	err := c.sync()
	l.fsyncs.Add(1)
	if err == nil {
		err = l.opts.FS.SyncDir(l.opts.Dir) // new segments' names too
	}
	l.mu.Lock()
	if err != nil {
		l.failLocked(err)
	} else {
		l.syncedLSN = l.writtenLSN
	}
	l.cond.Broadcast()
	l.mu.Unlock()
}
