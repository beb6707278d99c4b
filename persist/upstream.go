package persist

import (
	"encoding/binary"
	"fmt"
	"sort"
	"time"
)

// Reading upstream beanstalkd's binlog, for the import (import.go).
//
// beanstalkd 1.10 to 1.13 write version 7: each binlog.N starts with an
// int32 version, then records, native-endian C structs (little-endian
// x86-64 and arm64 layouts, the ones Debian ships):
//
//	int32 namelen; namelen bytes of tube name; Jobrec (80 bytes); body
//
// A full record (a put, or a job moved by compaction) has namelen > 0 and
// carries the body; an update (delete, bury, kick, release with a delay)
// has namelen 0 and no body. Jobrec: u64 id @0, u32 pri @8, i64 delay ns
// @16, i64 ttr ns @24, i32 body size @32 (CRLF included), i64 created-at
// wall ns @40, i64 deadline wall ns @48, u32 reserve, timeout, release,
// bury and kick counts @56..@72, u8 state @76 (0 deleted, 1 ready,
// 2 reserved, 3 buried, 4 delayed). id 0 is the zero padding upstream
// preallocates: the end of the file's records.
//
// Replay follows upstream's: the last record of a job wins, a delete
// removes it, an update for a job no full record names is ignored (its
// put was compacted away), reserved comes back ready. Where upstream stops
// reading a file at a torn or bad record and goes on with the next file,
// so does this; the problem is reported with the file and offset.
// Version 5 (beanstalkd 1.4, a different layout) is refused by name.

const (
	upstreamVersion    = 7
	upstreamJobrecSize = 80
	upstreamMaxName    = 200
)

// upstreamJob is a job as upstream's records leave it.
type upstreamJob struct {
	Job
	seen bool // a full record named it (tube and body known)
}

// upstreamLog is what the upstream files of a directory replay to.
type upstreamLog struct {
	jobs     map[uint64]*upstreamJob
	maxID    uint64
	records  int
	problems []string
	buries   uint64 // orders buried jobs by their last bury record
}

// readUpstream replays the upstream files seqs of dir in order.
func readUpstream(fsys FS, dir string, seqs []uint64, maxBody int) (*upstreamLog, error) {
	u := &upstreamLog{jobs: map[uint64]*upstreamJob{}}
	var buf []byte
	for _, seq := range seqs {
		path := join(dir, segName(seq))
		var err error
		if buf, err = readWhole(fsys, path, buf); err != nil {
			return nil, fmt.Errorf("binlog import: %w", err)
		}
		if len(buf) < 4 {
			continue // empty: upstream skips it too
		}
		switch v := binary.LittleEndian.Uint32(buf); v {
		case upstreamVersion:
		case 5:
			return nil, fmt.Errorf("%w: %s is a beanstalkd 1.4 binlog (version 5); start beanstalkd 1.10 or later on it once to rewrite it as version 7, then beanpole", ErrFormat, path)
		default:
			return nil, fmt.Errorf("%w: %s: unknown binlog version %d", ErrFormat, path, v)
		}
		if off, err := u.replayFile(buf, maxBody); err != nil {
			u.problems = append(u.problems, fmt.Sprintf("%s at offset %d: %v; the rest of that file is skipped, as beanstalkd does", path, off, err))
		}
	}
	return u, nil
}

// replayFile applies the records of one file; on a bad record it reports
// where and why.
func (u *upstreamLog) replayFile(b []byte, maxBody int) (int, error) {
	off := 4
	for off < len(b) {
		if len(b)-off < 4 {
			if allZero(b[off:]) {
				return 0, nil // the preallocated tail
			}
			return off, fmt.Errorf("torn record (%d bytes)", len(b)-off)
		}
		namelen := int32(binary.LittleEndian.Uint32(b[off:]))
		if namelen < 0 || namelen > upstreamMaxName {
			return off, fmt.Errorf("bad tube name length %d", namelen)
		}
		p := off + 4
		if len(b)-p < int(namelen)+upstreamJobrecSize {
			if namelen == 0 && allZero(b[off:]) {
				return 0, nil // the preallocated tail
			}
			return off, fmt.Errorf("torn record")
		}
		name := string(b[p : p+int(namelen)])
		p += int(namelen)
		r := b[p : p+upstreamJobrecSize]
		p += upstreamJobrecSize
		id := binary.LittleEndian.Uint64(r[0:])
		if id == 0 {
			return 0, nil // zeros upstream preallocated: no more records
		}
		var body []byte
		if namelen > 0 {
			size := int(int32(binary.LittleEndian.Uint32(r[32:])))
			if size < 2 || size > maxBody+2 {
				return off, fmt.Errorf("job %d: body size %d out of range", id, size)
			}
			if len(b)-p < size {
				return off, fmt.Errorf("job %d: torn body", id)
			}
			body = append([]byte(nil), b[p:p+size]...)
			p += size
		}
		if err := u.apply(id, name, r, body); err != nil {
			return off, err
		}
		u.records++
		off = p
	}
	return 0, nil
}

func (u *upstreamLog) apply(id uint64, tube string, r, body []byte) error {
	u.maxID = max(u.maxID, id)
	state := r[76]
	if state == 0 { // deleted
		delete(u.jobs, id)
		return nil
	}
	j := u.jobs[id]
	if body == nil && j == nil {
		return nil // its put was compacted away: upstream ignores it too
	}
	if j == nil {
		j = &upstreamJob{}
		u.jobs[id] = j
	}
	if body != nil {
		if j.seen && len(j.Body) != len(body) {
			return fmt.Errorf("job %d: body size changed from %d to %d", id, len(j.Body), len(body))
		}
		j.Tube, j.Body, j.seen = tube, body, true
	}
	j.ID = id
	j.Pri = binary.LittleEndian.Uint32(r[8:])
	j.Delay = time.Duration(binary.LittleEndian.Uint64(r[16:]))
	j.TTR = time.Duration(binary.LittleEndian.Uint64(r[24:]))
	j.CreatedAt = int64(binary.LittleEndian.Uint64(r[40:]))
	j.Deadline = 0
	j.Counters = Counters{
		Reserves: binary.LittleEndian.Uint32(r[56:]), Timeouts: binary.LittleEndian.Uint32(r[60:]),
		Releases: binary.LittleEndian.Uint32(r[64:]), Buries: binary.LittleEndian.Uint32(r[68:]),
		Kicks: binary.LittleEndian.Uint32(r[72:]),
	}
	switch state {
	case 1, 2: // ready; reserved comes back ready, as upstream restarts it
		j.State = StateReady
	case 3:
		j.State = StateBuried
		u.buries++
		j.BuriedSeq = u.buries
	case 4:
		j.State = StateDelayed
		j.Deadline = int64(binary.LittleEndian.Uint64(r[48:]))
	default:
		return fmt.Errorf("job %d: unknown state %d", id, state)
	}
	return nil
}

// live returns the jobs to carry over, by id.
func (u *upstreamLog) live() []*Job {
	jobs := make([]*Job, 0, len(u.jobs))
	for _, j := range u.jobs {
		if j.seen {
			jobs = append(jobs, &j.Job)
		}
	}
	sort.Slice(jobs, func(a, b int) bool { return jobs[a].ID < jobs[b].ID })
	return jobs
}
