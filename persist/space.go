package persist

import (
	"github.com/beanpole/beanpole/record"

	"fmt"
	"os"
	"strconv"
	"time"
)

// Space reservation.
//
// Every byte a record will occupy is already allocated on disk (the current
// segment's free part and the preallocated spares), so a record that has
// been placed can always be written. Placement happens in Log.place, under
// Log.mu, in log order, and decides the segment and offset of each frame;
// the writer just writes them there.
//
// The guarantee upstream gives, and this keeps: a delete can always be
// logged. Each live job owes one delete frame, so placement keeps the
// invariant
//
//	deleteSlots(free part of current segment) + deleteSlots(spares) ≥ live jobs
//
// where deleteSlots(n) = n / deleteFrameSize: how many delete frames fit,
// counted per segment because frames never straddle segments. A put must
// leave room for its own future delete too; updates and rewrites must not
// eat into the reserve; a delete of a live job spends exactly the slot its
// put reserved, so it never needs new space. When the invariant would break,
// another spare is created on the spot; if that fails (ENOSPC, EDQUOT,
// EMFILE, EACCES...) the record is refused with ErrNoSpace and the server
// keeps running.

type spaceState struct {
	full    bool      // the last attempt to create a segment failed
	lastErr error     // why
	retryAt time.Time // no new attempt before this: a full disk must not cost a syscall per put
}

// growRetry is a variable so tests can shorten it.
var growRetry = time.Second

func slotsIn(free int64) int64 {
	if free < deleteFrameSize {
		return 0
	}
	return free / deleteFrameSize
}

// spareFree is the room a fresh segment offers records: all but its prefix.
func spareFree(s *segment) int64 { return s.size - segPrefix }

func (l *Log) curFreeLocked() int64 {
	if l.cur < 0 {
		return 0
	}
	if s := l.segs[l.cur]; !s.sealed {
		return s.size - s.used
	}
	return 0
}

// reserveOKLocked: would the reserve still cover owe deletes after using
// n more bytes of the current segment?
func (l *Log) reserveOKLocked(n, owe int64) bool {
	return l.cur+1 < len(l.segs) && slotsIn(l.curFreeLocked()-n)+l.spareSlots >= owe
}

// placeLocked finds room for a frame of n bytes and returns its segment
// (the frame goes at s.used). With keep, the delete reserve must still
// cover owe live jobs afterwards; without it (a delete of a live job) only
// the frame has to fit. Moving to a new segment places that segment's
// header and id mark first.
func (l *Log) placeLocked(n, owe int64, keep bool) (*segment, error) {
	for {
		free := l.curFreeLocked()
		if n <= free {
			if !keep || slotsIn(free-n)+l.spareSlots >= owe {
				return l.segs[l.cur], nil
			}
		} else if l.cur+1 < len(l.segs) {
			t := l.segs[l.cur+1]
			if spareFree(t) < n {
				// Larger than a segment: this spare grows to fit it.
				if err := l.enlargeLocked(t, segPrefix+n); err != nil {
					return nil, err
				}
				continue
			}
			tslots := slotsIn(spareFree(t))
			if !keep || slotsIn(spareFree(t)-n)+l.spareSlots-tslots >= owe {
				l.advanceLocked()
				return t, nil
			}
		}
		if err := l.growLocked(); err != nil {
			return nil, err
		}
	}
}

// advanceLocked makes the next spare the placement segment and places its
// prefix: the segment header and an id mark holding the highest job id in
// any earlier record, so that earlier segments can be deleted without ids
// ever being handed out twice.
func (l *Log) advanceLocked() {
	l.cur++
	t := l.segs[l.cur]
	l.spareSlots -= slotsIn(spareFree(t))
	lsn := l.nextLSN
	l.nextLSN++
	t.firstLSN = lsn
	b := l.pending.add(t, 0, segPrefix)
	putSegHeader(b[:segHeaderSize], t.seq)
	var mark [record.HighWaterSize]byte
	record.AppendHighWater(mark[:0], l.maxID)
	putFrameHeader(b[segHeaderSize:], frameHeader{n: record.HighWaterSize, lsn: lsn, crc: checksum(mark[:])})
	copy(b[segHeaderSize+frameHeaderSize:], mark[:])
	t.used = segPrefix
	l.pending.lastLSN = lsn
	kick(l.wakePrealloc)
}

// growLocked creates one more spare right now. It is the slow path: the
// preallocator normally keeps a spare ready.
func (l *Log) growLocked() error {
	if l.space.full && time.Now().Before(l.space.retryAt) {
		return fmt.Errorf("%w: %v", ErrNoSpace, l.space.lastErr)
	}
	f, tmp, err := l.createSpare(l.opts.SegmentSize)
	if err == nil {
		err = l.installLocked(f, tmp, l.opts.SegmentSize)
	}
	l.noteGrowLocked(err)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoSpace, err)
	}
	return nil
}

// noteGrowLocked logs the disk-full condition once when it starts and once
// when it ends, never per command.
func (l *Log) noteGrowLocked(err error) {
	if err != nil {
		l.space.lastErr = err
		l.space.retryAt = time.Now().Add(growRetry)
		if !l.space.full {
			l.space.full = true
			l.log.Error().Err(err).Msg("binlog: cannot allocate a new segment; puts get OUT_OF_MEMORY until space is available (deletes still work)")
		}
		return
	}
	if l.space.full {
		l.space.full = false
		l.log.Warn().Msg("binlog: space available again")
	}
}

// enlargeLocked grows an untouched spare so a record larger than a segment
// fits in it.
func (l *Log) enlargeLocked(t *segment, size int64) error {
	if err := t.f.Allocate(size); err != nil {
		l.noteGrowLocked(err)
		return fmt.Errorf("%w: %v", ErrNoSpace, err)
	}
	l.spareSlots -= slotsIn(spareFree(t))
	t.size = size
	l.spareSlots += slotsIn(spareFree(t))
	return nil
}

// createSpare makes a preallocated all-zero file under a temporary name.
// It takes no lock: this is the slow part and the preallocator runs it
// while appends go on.
func (l *Log) createSpare(size int64) (File, string, error) {
	path := join(l.opts.Dir, tmpPrefix+strconv.FormatUint(l.tmpSeq.Add(1), 10))
	f, err := l.opts.FS.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, filePerm)
	if err != nil {
		return nil, "", err
	}
	if err := f.Allocate(size); err != nil {
		f.Close()
		_ = l.opts.FS.Remove(path)
		return nil, "", err
	}
	return f, path, nil
}

// installLocked names a spare binlog.N with the next sequence number and
// appends it to the list. Naming at this point (not at creation) keeps
// sequence numbers in list order however creations interleave.
func (l *Log) installLocked(f File, tmp string, size int64) error {
	path := join(l.opts.Dir, segName(l.nextSeq))
	if err := l.opts.FS.Rename(tmp, path); err != nil {
		f.Close()
		_ = l.opts.FS.Remove(tmp)
		return err
	}
	s := &segment{seq: l.nextSeq, path: path, size: size, f: f}
	l.nextSeq++
	l.segs = append(l.segs, s)
	l.spareSlots += slotsIn(spareFree(s))
	return nil
}

// wantSpareLocked: should the preallocator make another spare? It keeps
// one spare ready, plus enough that the delete reserve has half a segment
// of headroom, so puts almost never create a segment themselves.
func (l *Log) wantSpareLocked() bool {
	if l.closed || l.failed != nil || (l.space.full && time.Now().Before(l.space.retryAt)) {
		return false
	}
	if l.cur+1 >= len(l.segs) {
		return true
	}
	return slotsIn(l.curFreeLocked())+l.spareSlots < int64(len(l.pins))+slotsIn(l.opts.SegmentSize)/2
}

// preallocLoop creates spares ahead of need, off the appenders' path.
func (l *Log) preallocLoop() {
	defer l.bg.Done()
	for {
		select {
		case <-l.wakePrealloc:
		case <-l.stop:
			return
		}
		for {
			l.mu.Lock()
			want := l.wantSpareLocked()
			l.mu.Unlock()
			if !want {
				break
			}
			f, tmp, err := l.createSpare(l.opts.SegmentSize)
			l.mu.Lock()
			if err == nil {
				if l.closed {
					l.mu.Unlock()
					f.Close()
					_ = l.opts.FS.Remove(tmp)
					return
				}
				err = l.installLocked(f, tmp, l.opts.SegmentSize)
			}
			l.noteGrowLocked(err)
			l.mu.Unlock()
			if err != nil {
				break
			}
		}
	}
}
