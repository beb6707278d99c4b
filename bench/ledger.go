package main

import (
	"bytes"
	"fmt"
)

// Job bodies are self-describing so every delivery can be checked without a
// per-job allocation: 16 lowercase hex digits of the client's sequence
// number, then filler taken from a rotating alphabet that starts at
// seq%26. The filler is a slice of one shared pattern, so puts send it
// without copying and reservations compare it with one memcmp.
const seqDigits = 16

const (
	stInserted = 1 << iota
	stReserved
	stDeleted
)

type jobRec struct {
	id    uint64
	t0    int64 // when the put was sent (for end-to-end latency)
	tube  int32
	state uint8
}

// Ledger tracks every job a run creates, and checks ids, bodies and
// exactly-once delivery.
type Ledger struct {
	size    int
	pattern []byte
	recs    []jobRec
	ids     idSet
	nIns    int
	nRes    int
	nDel    int
}

// NewLedger makes a ledger for jobs of size bytes (size >= seqDigits).
func NewLedger(size int) *Ledger {
	if size < seqDigits {
		size = seqDigits
	}
	fill := size - seqDigits
	p := make([]byte, fill+26)
	for i := range p {
		p[i] = 'a' + byte(i%26)
	}
	return &Ledger{size: size, pattern: p}
}

// New registers a job to be put into tube at time now and returns its
// sequence number.
func (l *Ledger) New(tube int, now int64) int {
	l.recs = append(l.recs, jobRec{t0: now, tube: int32(tube)})
	return len(l.recs) - 1
}

// Count is the number of jobs registered.
func (l *Ledger) Count() int { return len(l.recs) }

// Rec returns the record for seq.
func (l *Ledger) Rec(seq int) *jobRec { return &l.recs[seq] }

// AppendHead appends the body prefix of seq (seqDigits bytes).
func (l *Ledger) AppendHead(dst []byte, seq int) []byte {
	const hexd = "0123456789abcdef"
	var b [seqDigits]byte
	v := uint64(seq)
	for i := seqDigits - 1; i >= 0; i-- {
		b[i] = hexd[v&15]
		v >>= 4
	}
	return append(dst, b[:]...)
}

// Filler returns the shared (read-only) filler for seq.
func (l *Ledger) Filler(seq int) []byte {
	o := seq % 26
	return l.pattern[o : o+l.size-seqDigits]
}

// Inserted records "INSERTED id" for seq.
func (l *Ledger) Inserted(seq int, id uint64) error {
	r := &l.recs[seq]
	if id == 0 {
		return fmt.Errorf("INSERTED 0 for job seq %d", seq)
	}
	if r.state&stInserted != 0 {
		return fmt.Errorf("job seq %d acknowledged twice", seq)
	}
	if r.id != 0 && r.id != id {
		return fmt.Errorf("job seq %d: INSERTED %d but it was delivered as id %d", seq, id, r.id)
	}
	if r.id == 0 {
		if !l.ids.Add(id) {
			return fmt.Errorf("INSERTED %d: id given to two jobs", id)
		}
	}
	r.id = id
	r.state |= stInserted
	l.nIns++
	return nil
}

// Reserved checks a delivered job (id, body) and returns its sequence number.
func (l *Ledger) Reserved(id uint64, body []byte) (int, error) {
	if len(body) != l.size {
		return -1, fmt.Errorf("RESERVED %d: body is %d bytes, want %d", id, len(body), l.size)
	}
	var seq uint64
	for _, c := range body[:seqDigits] {
		switch {
		case c >= '0' && c <= '9':
			seq = seq<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			seq = seq<<4 | uint64(c-'a'+10)
		default:
			return -1, fmt.Errorf("RESERVED %d: corrupt body prefix %q", id, clip(body[:seqDigits]))
		}
	}
	if seq >= uint64(len(l.recs)) {
		return -1, fmt.Errorf("RESERVED %d: body names job seq %d that was never put", id, seq)
	}
	s := int(seq)
	if !bytes.Equal(body[seqDigits:], l.Filler(s)) {
		return -1, fmt.Errorf("RESERVED %d: body of job seq %d corrupted", id, s)
	}
	r := &l.recs[s]
	if r.state&stReserved != 0 {
		return -1, fmt.Errorf("RESERVED %d: job seq %d delivered twice (not exactly-once)", id, s)
	}
	if r.id != 0 && r.id != id {
		return -1, fmt.Errorf("RESERVED %d: job seq %d was INSERTED as id %d", id, s, r.id)
	}
	if r.id == 0 {
		if !l.ids.Add(id) {
			return -1, fmt.Errorf("RESERVED %d: id belongs to another job", id)
		}
	}
	r.id = id
	r.state |= stReserved
	l.nRes++
	return s, nil
}

// Deleted records the DELETED reply for seq.
func (l *Ledger) Deleted(seq int) error {
	r := &l.recs[seq]
	if r.state&stReserved == 0 || r.state&stDeleted != 0 {
		return fmt.Errorf("job seq %d (id %d): DELETED in state %d", seq, r.id, r.state)
	}
	r.state |= stDeleted
	l.nDel++
	return nil
}

// CheckAllDone verifies that every registered job was inserted, delivered
// exactly once and deleted.
func (l *Ledger) CheckAllDone() error {
	n := len(l.recs)
	if l.nIns == n && l.nRes == n && l.nDel == n {
		return nil
	}
	for i, r := range l.recs {
		if r.state != stInserted|stReserved|stDeleted {
			return fmt.Errorf("%d jobs put, %d acknowledged, %d delivered, %d deleted; first incomplete: seq %d id %d state %03b",
				n, l.nIns, l.nRes, l.nDel, i, r.id, r.state)
		}
	}
	return fmt.Errorf("ledger counters inconsistent: %d/%d/%d of %d", l.nIns, l.nRes, l.nDel, n)
}

// CheckConsistent verifies that every registered job was acknowledged and
// that every delivered job was deleted; it returns how many jobs were never
// delivered (still ready on the server).
func (l *Ledger) CheckConsistent() (int, error) {
	left := 0
	for i, r := range l.recs {
		switch r.state {
		case stInserted:
			left++
		case stInserted | stReserved | stDeleted:
		default:
			return 0, fmt.Errorf("job seq %d (id %d) ended in state %03b (want acknowledged, and deleted if delivered)", i, r.id, r.state)
		}
	}
	return left, nil
}

// idSet is a set of job ids: a bitmap for the usual small dense ids, a map
// beyond that.
type idSet struct {
	bits []uint64
	big  map[uint64]struct{}
}

const idBitmapMax = 1 << 26

func (s *idSet) Add(id uint64) bool {
	if id < idBitmapMax {
		w := int(id >> 6)
		if w >= len(s.bits) {
			n := 2*len(s.bits) + 64
			for n <= w {
				n *= 2
			}
			nb := make([]uint64, n)
			copy(nb, s.bits)
			s.bits = nb
		}
		m := uint64(1) << (id & 63)
		if s.bits[w]&m != 0 {
			return false
		}
		s.bits[w] |= m
		return true
	}
	if s.big == nil {
		s.big = make(map[uint64]struct{})
	}
	if _, ok := s.big[id]; ok {
		return false
	}
	s.big[id] = struct{}{}
	return true
}
