package persist

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// Job record payloads. Every payload starts with a kind byte and the job id,
// so the log can route any record (pin, unpin, reserve space) without
// decoding the rest. Update records carry absolute values, never deltas:
// replaying one twice, or after a full record that already includes it,
// gives the same job. That is what keeps `buries` from growing on every
// restart (upstream #668) and makes a compaction rewrite racing an update
// harmless.
//
//	kind 1 full      id u64, pri u32, state u8, delay i64, ttr i64,
//	                 created i64, deadline i64, buried-seq u64,
//	                 counters 5×u32, tube-len u16, tube, body (rest)
//	kind 2 delete    id u64
//	kind 3 bury      id u64, pri u32, buried-seq u64, counters
//	kind 4 kick      id u64, counters
//	kind 5 release   id u64, pri u32, delay i64, deadline i64, counters
//	kind 6 id mark   id u64 (high-water mark; written by the log itself)
//
// Times are nanoseconds; created and deadline are wall-clock Unix
// nanoseconds, because a restart cannot resume a monotonic clock.
// counters = reserves, timeouts, releases, buries, kicks.
type kind uint8

const (
	kindFull      kind = 1
	kindDelete    kind = 2
	kindBury      kind = 3
	kindKick      kind = 4
	kindRelease   kind = 5
	kindHighWater kind = 6
)

func (k kind) String() string {
	switch k {
	case kindFull:
		return "full"
	case kindDelete:
		return "delete"
	case kindBury:
		return "bury"
	case kindKick:
		return "kick"
	case kindRelease:
		return "release"
	case kindHighWater:
		return "id-mark"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

const (
	countersSize    = 5 * 4
	fullFixedSize   = 1 + 8 + 4 + 1 + 8*4 + 8 + countersSize + 2 // 76
	deleteSize      = 1 + 8
	burySize        = 1 + 8 + 4 + 8 + countersSize
	kickSize        = 1 + 8 + countersSize
	releaseSize     = 1 + 8 + 4 + 8 + 8 + countersSize
	highWaterSize   = 1 + 8
	minPayloadSize  = deleteSize
	deleteFrameSize = frameHeaderSize + deleteSize
	idMarkFrameSize = frameHeaderSize + highWaterSize

	// segPrefix is what opens every segment: the header and an id mark.
	segPrefix = segHeaderSize + idMarkFrameSize
)

// State is a job's state as logged. The values are part of the on-disk
// format (and match the engine's).
type State uint8

const (
	StateReady    State = 1
	StateReserved State = 2 // never survives recovery: replay makes it ready
	StateDelayed  State = 3
	StateBuried   State = 4
)

func (s State) String() string {
	switch s {
	case StateReady:
		return "ready"
	case StateReserved:
		return "reserved"
	case StateDelayed:
		return "delayed"
	case StateBuried:
		return "buried"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Counters are a job's stats-job counters.
type Counters struct {
	Reserves, Timeouts, Releases, Buries, Kicks uint32
}

// Job is everything a full record carries, and what recovery returns.
type Job struct {
	ID    uint64
	Tube  string
	Pri   uint32
	State State
	// Delay is the delay last given by put or release.
	Delay time.Duration
	TTR   time.Duration
	// CreatedAt is wall-clock Unix ns (stats-job age survives restarts).
	CreatedAt int64
	// Deadline is the wall-clock Unix ns at which a delayed job becomes
	// ready; 0 for other states.
	Deadline int64
	// BuriedSeq orders a tube's buried jobs (oldest first). Any sequence
	// that grows with each bury works, per tube or global.
	BuriedSeq uint64
	Counters
	Body []byte
}

// FullSize is len(AppendFull(nil, j)).
func FullSize(j *Job) int { return fullFixedSize + len(j.Tube) + len(j.Body) }

// AppendFull appends the full record of j (a put, or a compaction rewrite
// of a live job) to dst. Tube names longer than 65535 bytes are cut (the
// protocol allows 200).
func AppendFull(dst []byte, j *Job) []byte {
	tube := j.Tube
	if len(tube) > math.MaxUint16 {
		tube = tube[:math.MaxUint16]
	}
	dst = append(dst, byte(kindFull))
	dst = binary.LittleEndian.AppendUint64(dst, j.ID)
	dst = binary.LittleEndian.AppendUint32(dst, j.Pri)
	dst = append(dst, byte(j.State))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(j.Delay))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(j.TTR))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(j.CreatedAt))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(j.Deadline))
	dst = binary.LittleEndian.AppendUint64(dst, j.BuriedSeq)
	dst = appendCounters(dst, j.Counters)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(tube)))
	dst = append(dst, tube...)
	return append(dst, j.Body...)
}

// AppendDelete appends a delete record.
func AppendDelete(dst []byte, id uint64) []byte {
	dst = append(dst, byte(kindDelete))
	return binary.LittleEndian.AppendUint64(dst, id)
}

// AppendBury appends a bury record: the job is buried with priority pri at
// position buriedSeq of its tube's buried list; c are its counters after
// the bury (Buries already incremented).
func AppendBury(dst []byte, id uint64, pri uint32, buriedSeq uint64, c Counters) []byte {
	dst = append(dst, byte(kindBury))
	dst = binary.LittleEndian.AppendUint64(dst, id)
	dst = binary.LittleEndian.AppendUint32(dst, pri)
	dst = binary.LittleEndian.AppendUint64(dst, buriedSeq)
	return appendCounters(dst, c)
}

// AppendKick appends a kick record (kick or kick-job of a buried or delayed
// job): the job is ready; c are its counters after the kick.
func AppendKick(dst []byte, id uint64, c Counters) []byte {
	dst = append(dst, byte(kindKick))
	dst = binary.LittleEndian.AppendUint64(dst, id)
	return appendCounters(dst, c)
}

// AppendRelease appends a release record. Log it for every release, delay
// 0 included, so the new priority survives a restart (upstream #597). With
// delay > 0 the job is delayed until deadline (wall-clock Unix ns),
// otherwise ready. c are the counters after the release; since reserves
// and timeouts are not logged on their own, this is where they persist.
func AppendRelease(dst []byte, id uint64, pri uint32, delay time.Duration, deadline int64, c Counters) []byte {
	dst = append(dst, byte(kindRelease))
	dst = binary.LittleEndian.AppendUint64(dst, id)
	dst = binary.LittleEndian.AppendUint32(dst, pri)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(delay))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(deadline))
	return appendCounters(dst, c)
}

// appendHighWater is the id mark the log writes at the start of every
// segment: the highest job id in any earlier record. Old segments can then
// be deleted without forgetting which ids were handed out.
func appendHighWater(dst []byte, id uint64) []byte {
	dst = append(dst, byte(kindHighWater))
	return binary.LittleEndian.AppendUint64(dst, id)
}

func appendCounters(dst []byte, c Counters) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, c.Reserves)
	dst = binary.LittleEndian.AppendUint32(dst, c.Timeouts)
	dst = binary.LittleEndian.AppendUint32(dst, c.Releases)
	dst = binary.LittleEndian.AppendUint32(dst, c.Buries)
	return binary.LittleEndian.AppendUint32(dst, c.Kicks)
}

func readCounters(b []byte) Counters {
	return Counters{
		Reserves: binary.LittleEndian.Uint32(b[0:]),
		Timeouts: binary.LittleEndian.Uint32(b[4:]),
		Releases: binary.LittleEndian.Uint32(b[8:]),
		Buries:   binary.LittleEndian.Uint32(b[12:]),
		Kicks:    binary.LittleEndian.Uint32(b[16:]),
	}
}

// record is a decoded payload. tube and body alias the payload.
type record struct {
	kind      kind
	id        uint64
	pri       uint32
	state     State
	delay     int64
	ttr       int64
	created   int64
	deadline  int64
	buriedSeq uint64
	c         Counters
	tube      []byte
	body      []byte
}

// peekRecord checks that p is a well-formed payload and returns its kind
// and id. It is the whole validation Append does.
func peekRecord(p []byte) (kind, uint64, error) {
	if len(p) < minPayloadSize {
		return 0, 0, fmt.Errorf("%w: %d bytes", ErrBadRecord, len(p))
	}
	k := kind(p[0])
	want := 0
	switch k {
	case kindFull:
		if len(p) < fullFixedSize {
			return 0, 0, fmt.Errorf("%w: short full record", ErrBadRecord)
		}
		if tl := int(binary.LittleEndian.Uint16(p[fullFixedSize-2:])); len(p) < fullFixedSize+tl {
			return 0, 0, fmt.Errorf("%w: tube name overruns record", ErrBadRecord)
		}
		want = len(p)
	case kindDelete:
		want = deleteSize
	case kindBury:
		want = burySize
	case kindKick:
		want = kickSize
	case kindRelease:
		want = releaseSize
	case kindHighWater:
		want = highWaterSize
	default:
		return 0, 0, fmt.Errorf("%w: unknown kind %d", ErrBadRecord, p[0])
	}
	if len(p) != want {
		return 0, 0, fmt.Errorf("%w: %v record of %d bytes", ErrBadRecord, k, len(p))
	}
	return k, binary.LittleEndian.Uint64(p[1:]), nil
}

func decodeRecord(p []byte, r *record) error {
	k, id, err := peekRecord(p)
	if err != nil {
		return err
	}
	*r = record{kind: k, id: id}
	b := p[9:]
	switch k {
	case kindFull:
		r.pri = binary.LittleEndian.Uint32(b[0:])
		r.state = State(b[4])
		r.delay = int64(binary.LittleEndian.Uint64(b[5:]))
		r.ttr = int64(binary.LittleEndian.Uint64(b[13:]))
		r.created = int64(binary.LittleEndian.Uint64(b[21:]))
		r.deadline = int64(binary.LittleEndian.Uint64(b[29:]))
		r.buriedSeq = binary.LittleEndian.Uint64(b[37:])
		r.c = readCounters(b[45:])
		tl := int(binary.LittleEndian.Uint16(b[65:]))
		r.tube = b[67 : 67+tl]
		r.body = b[67+tl:]
		if r.state < StateReady || r.state > StateBuried {
			return fmt.Errorf("%w: job %d has state %d", ErrBadRecord, id, r.state)
		}
	case kindBury:
		r.pri = binary.LittleEndian.Uint32(b[0:])
		r.buriedSeq = binary.LittleEndian.Uint64(b[4:])
		r.c = readCounters(b[12:])
	case kindKick:
		r.c = readCounters(b)
	case kindRelease:
		r.pri = binary.LittleEndian.Uint32(b[0:])
		r.delay = int64(binary.LittleEndian.Uint64(b[4:]))
		r.deadline = int64(binary.LittleEndian.Uint64(b[12:]))
		r.c = readCounters(b[20:])
	}
	return nil
}
