package upstream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"time"
)

// State is a job's state as upstream's records store it.
type State uint8

const (
	Deleted  State = 0 // upstream's "Invalid": the record of a delete
	Ready    State = 1
	Reserved State = 2 // never left by Replay: the job comes back ready
	Buried   State = 3
	Delayed  State = 4
)

func (s State) String() string {
	switch s {
	case Deleted:
		return "deleted"
	case Ready:
		return "ready"
	case Reserved:
		return "reserved"
	case Buried:
		return "buried"
	case Delayed:
		return "delayed"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Counters are the stats-job counters upstream keeps in every record.
type Counters struct {
	Reserves, Timeouts, Releases, Buries, Kicks uint32
}

const (
	// MaxTubeName is the longest tube name upstream accepts.
	MaxTubeName = 200
	// MaxBodySize bounds a record's body size: upstream's largest -z
	// (1 GiB) and the CRLF every body ends with.
	MaxBodySize = 1<<30 + 2
	// headerSize is the file's version field.
	headerSize = 4
)

// layout is what differs between the versions this package reads.
type layout struct {
	version   uint32
	nameWidth int           // bytes of namelen: int32, or size_t in version 5
	recSize   int           // bytes of the job struct
	unit      time.Duration // of delay, ttr, created-at and deadline
}

var (
	layout7 = layout{version: 7, nameWidth: 4, recSize: 80, unit: time.Nanosecond}
	layout5 = layout{version: 5, nameWidth: 8, recSize: 77, unit: time.Microsecond}
)

// maxRecordHead is the most bytes before a body: namelen, name, job struct.
const maxRecordHead = 8 + MaxTubeName + 80

// Version reads the first bytes of a binlog.N file. ok reports whether
// they are an upstream header at all: beanpole's own files start with
// "BPBINLOG" and files never written with zeros, and neither is. v is the
// version as stored, whether or not this package reads it (see layoutOf).
func Version(head []byte) (v uint32, ok bool) {
	if len(head) < headerSize {
		return 0, false
	}
	v = binary.LittleEndian.Uint32(head)
	if (v >= 1 && v <= 7) || isBigEndian(v) {
		return v, true
	}
	return 0, false
}

// isBigEndian reports a version 5 or 7 header written by a big-endian
// machine (s390x, for one).
func isBigEndian(v uint32) bool {
	r := bits.ReverseBytes32(v)
	return r == 5 || r == 7
}

// ErrVersion is what the errors for a version that cannot be read wrap.
var ErrVersion = errors.New("upstream binlog version not readable")

// versionError says, in words for an operator, why a version cannot be
// read.
type versionError string

func (e versionError) Error() string { return string(e) }
func (e versionError) Unwrap() error { return ErrVersion }

// layoutOf is the layout of files of version v, or why they cannot be
// read (an error wrapping ErrVersion).
func layoutOf(v uint32) (layout, error) {
	switch {
	case v == 7:
		return layout7, nil
	case v == 5:
		return layout5, nil
	case isBigEndian(v):
		return layout{}, versionError(fmt.Sprintf("a version %d binlog written by a big-endian machine; only little-endian binlogs can be read", bits.ReverseBytes32(v)))
	}
	return layout{}, versionError(fmt.Sprintf("binlog version %d, which no released beanstalkd wrote (1.4 wrote 5, 1.5 to 1.13 write 7)", v))
}

// record is one record's fixed part, decoded.
type record struct {
	off      int64 // where it starts in its file
	tube     []byte
	id       uint64
	pri      uint32
	delay    time.Duration
	ttr      time.Duration
	bodySize int64 // CRLF included; full records only
	created  int64 // wall-clock Unix ns
	deadline int64 // wall-clock Unix ns
	counters Counters
	state    State
}

func (r *record) full() bool { return len(r.tube) > 0 }

// bodyOff is where a full record's body starts.
func (r *record) bodyOff(lay layout) int64 {
	return r.off + int64(lay.nameWidth+len(r.tube)+lay.recSize)
}

// end is where the record ends.
func (r *record) end(lay layout) int64 {
	e := r.bodyOff(lay)
	if r.full() {
		e += r.bodySize
	}
	return e
}

// nameLen decodes namelen; b holds lay.nameWidth bytes.
func (lay layout) nameLen(b []byte) int64 {
	if lay.nameWidth == 8 {
		n := binary.LittleEndian.Uint64(b)
		if n > 1<<31 {
			return -1
		}
		return int64(n)
	}
	return int64(int32(binary.LittleEndian.Uint32(b)))
}

// decodeJob fills r from the job struct in b (lay.recSize bytes).
func (lay layout) decodeJob(b []byte, r *record) {
	le := binary.LittleEndian
	r.id = le.Uint64(b[0:])
	r.pri = le.Uint32(b[8:])
	r.delay = time.Duration(int64(le.Uint64(b[16:]))) * lay.unit
	r.ttr = time.Duration(int64(le.Uint64(b[24:]))) * lay.unit
	r.bodySize = int64(int32(le.Uint32(b[32:])))
	r.created = int64(le.Uint64(b[40:])) * int64(lay.unit)
	r.deadline = int64(le.Uint64(b[48:])) * int64(lay.unit)
	r.counters = Counters{
		Reserves: le.Uint32(b[56:]), Timeouts: le.Uint32(b[60:]), Releases: le.Uint32(b[64:]),
		Buries: le.Uint32(b[68:]), Kicks: le.Uint32(b[72:]),
	}
	r.state = State(b[76])
}

// validName reports whether every byte of a tube name is one upstream
// allows in a name.
func validName(b []byte) bool {
	for _, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-' || c == '+' || c == '/' || c == ';' || c == '.' || c == '$' || c == '_' || c == '(' || c == ')':
		default:
			return false
		}
	}
	return true
}
