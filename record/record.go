package record

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// Record payloads. Every payload starts with a kind byte and the job id
// (0 for a pause, which names no job), so the log can route any record
// (pin, unpin, reserve space) without decoding the rest. Update records carry absolute values, never deltas:
// replaying one twice, or after a full record that already includes it,
// gives the same job. That is what keeps `buries` from growing on every
// restart (upstream #668) and makes a compaction rewrite racing an update
// harmless.
//
//	Kind 1 full      id u64, pri u32, state u8, delay i64, ttr i64,
//	                 created i64, deadline i64, buried-seq u64,
//	                 counters 5×u32, tube-len u16, tube, body (rest)
//	Kind 2 delete    id u64
//	Kind 3 bury      id u64, pri u32, buried-seq u64, counters
//	Kind 4 kick      id u64, counters
//	Kind 5 release   id u64, pri u32, delay i64, deadline i64, counters
//	Kind 6 id mark   id u64 (high-water mark; written by the log itself)
//	Kind 7 pause     id u64 (always 0), delay i64, deadline i64, tube (rest)
//
// Times are nanoseconds; created and deadline are wall-clock Unix
// nanoseconds, because a restart cannot resume a monotonic clock. A pause
// record is pause-tube: the tube is paused for delay, until deadline, or,
// with delay and deadline 0, no longer paused. Only the cluster's journal
// writes it (pauses are replicated); the binlog does not, as upstream's
// does not, and a replay of one ignores it.
// counters = reserves, timeouts, releases, buries, kicks.
type Kind uint8

const (
	KindFull      Kind = 1
	KindDelete    Kind = 2
	KindBury      Kind = 3
	KindKick      Kind = 4
	KindRelease   Kind = 5
	KindHighWater Kind = 6
	KindPause     Kind = 7
)

func (k Kind) String() string {
	switch k {
	case KindFull:
		return "full"
	case KindDelete:
		return "delete"
	case KindBury:
		return "bury"
	case KindKick:
		return "kick"
	case KindRelease:
		return "release"
	case KindHighWater:
		return "id-mark"
	case KindPause:
		return "pause"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// fewIDs is how few ids left make IDsLeft say few: 2^40, twelve days of
// a million puts a second.
const fewIDs = 1 << 40

// IDsLeft is how many job ids are left to hand out after maxID, the
// highest used, and whether they are few enough to warn of: ids are never
// reused, and once the largest (2^64-1) is out, puts are refused.
func IDsLeft(maxID uint64) (left uint64, few bool) {
	left = math.MaxUint64 - maxID
	return left, left < fewIDs
}

// FewIDsLeft says that only left ids are left, for a warning.
func FewIDsLeft(left uint64) string {
	if left == 0 {
		return "every job id has been handed out: every put is answered INTERNAL_ERROR (ids are never reused)"
	}
	return fmt.Sprintf("only %d job ids are left; once they are handed out, every put is answered INTERNAL_ERROR (ids are never reused)", left)
}

const (
	countersSize  = 5 * 4
	fullFixedSize = 1 + 8 + 4 + 1 + 8*4 + 8 + countersSize + 2 // 76
	// DeleteSize and HighWaterSize are the sizes of those payloads.
	DeleteSize     = 1 + 8
	burySize       = 1 + 8 + 4 + 8 + countersSize
	kickSize       = 1 + 8 + countersSize
	releaseSize    = 1 + 8 + 4 + 8 + 8 + countersSize
	HighWaterSize  = 1 + 8
	pauseFixedSize = 1 + 8 + 8 + 8
	MinPayloadSize = DeleteSize
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
	dst = append(dst, byte(KindFull))
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
	dst = append(dst, byte(KindDelete))
	return binary.LittleEndian.AppendUint64(dst, id)
}

// AppendBury appends a bury record: the job is buried with priority pri at
// position buriedSeq of its tube's buried list; c are its counters after
// the bury (Buries already incremented).
func AppendBury(dst []byte, id uint64, pri uint32, buriedSeq uint64, c Counters) []byte {
	dst = append(dst, byte(KindBury))
	dst = binary.LittleEndian.AppendUint64(dst, id)
	dst = binary.LittleEndian.AppendUint32(dst, pri)
	dst = binary.LittleEndian.AppendUint64(dst, buriedSeq)
	return appendCounters(dst, c)
}

// AppendKick appends a kick record (kick or kick-job of a buried or delayed
// job): the job is ready; c are its counters after the kick.
func AppendKick(dst []byte, id uint64, c Counters) []byte {
	dst = append(dst, byte(KindKick))
	dst = binary.LittleEndian.AppendUint64(dst, id)
	return appendCounters(dst, c)
}

// AppendRelease appends a release record. Log it for every release, delay
// 0 included, so the new priority survives a restart (upstream #597). With
// delay > 0 the job is delayed until deadline (wall-clock Unix ns),
// otherwise ready. c are the counters after the release; since reserves
// and timeouts are not logged on their own, this is where they persist.
func AppendRelease(dst []byte, id uint64, pri uint32, delay time.Duration, deadline int64, c Counters) []byte {
	dst = append(dst, byte(KindRelease))
	dst = binary.LittleEndian.AppendUint64(dst, id)
	dst = binary.LittleEndian.AppendUint32(dst, pri)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(delay))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(deadline))
	return appendCounters(dst, c)
}

// AppendHighWater is the id mark the log writes at the start of every
// segment: the highest job id in any earlier record. Old segments can then
// be deleted without forgetting which ids were handed out.
func AppendHighWater(dst []byte, id uint64) []byte {
	dst = append(dst, byte(KindHighWater))
	return binary.LittleEndian.AppendUint64(dst, id)
}

// Pause is a tube's pause as a pause record carries it.
type Pause struct {
	Tube string
	// Delay is as given to pause-tube (stats-tube's pause).
	Delay time.Duration
	// Until is the wall-clock Unix ns at which the pause ends.
	Until int64
}

// AppendPause appends a pause record: p.Tube is paused for p.Delay, until
// p.Until; a Delay of 0 (and an Until of 0) unpauses it. Tube names
// longer than 65535 bytes are cut (the protocol allows 200).
func AppendPause(dst []byte, p *Pause) []byte {
	dst = append(dst, byte(KindPause))
	dst = binary.LittleEndian.AppendUint64(dst, 0)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(p.Delay))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(p.Until))
	return append(dst, p.Tube[:min(len(p.Tube), math.MaxUint16)]...)
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

// Record is a decoded payload. Tube and Body alias the payload.
type Record struct {
	Kind      Kind
	ID        uint64
	Pri       uint32
	State     State
	Delay     int64
	TTR       int64
	Created   int64
	Deadline  int64
	BuriedSeq uint64
	Counters  Counters
	Tube      []byte
	Body      []byte
}

// Peek checks that p is a well-formed payload and returns its kind and
// id without decoding the rest (the binlog's scan of damaged data uses it
// to name the jobs involved).
func Peek(p []byte) (Kind, uint64, error) {
	if len(p) < MinPayloadSize {
		return 0, 0, fmt.Errorf("%w: %d bytes", ErrBad, len(p))
	}
	k := Kind(p[0])
	want := 0
	switch k {
	case KindFull:
		if len(p) < fullFixedSize {
			return 0, 0, fmt.Errorf("%w: short full record", ErrBad)
		}
		if tl := int(binary.LittleEndian.Uint16(p[fullFixedSize-2:])); len(p) < fullFixedSize+tl {
			return 0, 0, fmt.Errorf("%w: tube name overruns record", ErrBad)
		}
		want = len(p)
	case KindDelete:
		want = DeleteSize
	case KindBury:
		want = burySize
	case KindKick:
		want = kickSize
	case KindRelease:
		want = releaseSize
	case KindHighWater:
		want = HighWaterSize
	case KindPause:
		if len(p) <= pauseFixedSize || len(p) > pauseFixedSize+math.MaxUint16 {
			return 0, 0, fmt.Errorf("%w: pause record of %d bytes", ErrBad, len(p))
		}
		if id := binary.LittleEndian.Uint64(p[1:]); id != 0 {
			return 0, 0, fmt.Errorf("%w: pause record names job %d", ErrBad, id)
		}
		want = len(p)
	default:
		return 0, 0, fmt.Errorf("%w: unknown kind %d", ErrBad, p[0])
	}
	if len(p) != want {
		return 0, 0, fmt.Errorf("%w: %v record of %d bytes", ErrBad, k, len(p))
	}
	return k, binary.LittleEndian.Uint64(p[1:]), nil
}

// Decode checks p as Peek does and decodes it into r.
func Decode(p []byte, r *Record) error {
	k, id, err := Peek(p)
	if err != nil {
		return err
	}
	*r = Record{Kind: k, ID: id}
	b := p[9:]
	switch k {
	case KindFull:
		r.Pri = binary.LittleEndian.Uint32(b[0:])
		r.State = State(b[4])
		r.Delay = int64(binary.LittleEndian.Uint64(b[5:]))
		r.TTR = int64(binary.LittleEndian.Uint64(b[13:]))
		r.Created = int64(binary.LittleEndian.Uint64(b[21:]))
		r.Deadline = int64(binary.LittleEndian.Uint64(b[29:]))
		r.BuriedSeq = binary.LittleEndian.Uint64(b[37:])
		r.Counters = readCounters(b[45:])
		tl := int(binary.LittleEndian.Uint16(b[65:]))
		r.Tube = b[67 : 67+tl]
		r.Body = b[67+tl:]
		if r.State < StateReady || r.State > StateBuried {
			return fmt.Errorf("%w: job %d has state %d", ErrBad, id, r.State)
		}
	case KindBury:
		r.Pri = binary.LittleEndian.Uint32(b[0:])
		r.BuriedSeq = binary.LittleEndian.Uint64(b[4:])
		r.Counters = readCounters(b[12:])
	case KindKick:
		r.Counters = readCounters(b)
	case KindRelease:
		r.Pri = binary.LittleEndian.Uint32(b[0:])
		r.Delay = int64(binary.LittleEndian.Uint64(b[4:]))
		r.Deadline = int64(binary.LittleEndian.Uint64(b[12:]))
		r.Counters = readCounters(b[20:])
	case KindPause:
		r.Delay = int64(binary.LittleEndian.Uint64(b[0:]))
		r.Deadline = int64(binary.LittleEndian.Uint64(b[8:]))
		r.Tube = b[16:]
	}
	return nil
}
