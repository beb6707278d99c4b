package upstream

import (
	"fmt"

	"github.com/beanpole/beanpole/persist/internal/zeros"
)

// outcome is what the parser found at an offset.
type outcome int

const (
	gotRecord outcome = iota
	atEnd             // the end of the file, exactly
	atZeros           // zeros where a record would start: the preallocation, if nothing follows
	atFault           // a record that cannot be read
)

// fault is a record that cannot be read.
type fault struct {
	off int64  // where it starts
	why string // what is wrong with it
	id  uint64 // its job, when the job struct was read
	// end is where the record ends as far as its fields could be trusted:
	// if nothing but zeros follows, the record is a torn tail.
	end int64
}

// parser reads records from a source.
type parser struct {
	src  source
	lay  layout
	name [MaxTubeName]byte // the last record's tube name
}

// parse reads the record at off. A record's tube name stays valid until
// the next call. Only the last two bytes of a body are read (to check the
// CRLF): the caller learns where the body is, not what it holds.
func (p *parser) parse(off int64) (r record, out outcome, f *fault, err error) {
	size, lay := p.src.size(), p.lay
	if off == size {
		return r, atEnd, nil, nil
	}
	bad := func(end int64, format string, a ...any) (record, outcome, *fault, error) {
		return r, atFault, &fault{off: off, why: fmt.Sprintf(format, a...), id: r.id, end: end}, nil
	}
	b, err := p.src.at(off, lay.nameWidth)
	if err != nil {
		return r, 0, nil, err
	}
	if len(b) < lay.nameWidth {
		if zeros.All(b) {
			return r, atZeros, nil, nil
		}
		return bad(size, "cut short by the end of the file")
	}
	nl := lay.nameLen(b)
	if nl < 0 || nl > MaxTubeName {
		return bad(off+int64(lay.nameWidth), "tube name length %d out of range", nl)
	}
	head := lay.nameWidth + int(nl) + lay.recSize
	if b, err = p.src.at(off, head); err != nil {
		return r, 0, nil, err
	}
	if len(b) < head {
		if zeros.All(b) {
			return r, atZeros, nil, nil
		}
		return bad(size, "cut short by the end of the file")
	}
	r.off = off
	r.tube = p.name[:copy(p.name[:nl], b[lay.nameWidth:])]
	lay.decodeJob(b[lay.nameWidth+int(nl):], &r)
	switch {
	case r.id == 0 && nl == 0 && zeros.All(b):
		return r, atZeros, nil, nil
	case r.id == 0:
		return bad(off+int64(head), "job id 0")
	case !validName(r.tube):
		return bad(off+int64(head), "tube name %q has bytes no tube name has", r.tube)
	case r.state > Delayed:
		return bad(off+int64(head), "job %d: unknown state %d", r.id, r.state)
	case !plausible(&r):
		return bad(off+int64(head), "job %d: TTR %v, delay %v, created at %d: not a record beanstalkd writes", r.id, r.ttr, r.delay, r.created)
	case !r.full():
		return r, gotRecord, nil, nil
	case r.state == Deleted:
		return bad(off+int64(head), "job %d: a record with a body in state deleted", r.id)
	case r.bodySize < 2 || r.bodySize > MaxBodySize:
		return bad(off+int64(head), "job %d: body size %d out of range", r.id, r.bodySize)
	}
	end := r.end(lay)
	if end > size {
		return bad(size, "job %d: body cut short by the end of the file", r.id)
	}
	if b, err = p.src.at(end-2, 2); err != nil {
		return r, 0, nil, err
	}
	if b[0] != '\r' || b[1] != '\n' {
		return bad(end, "job %d: body does not end in CRLF", r.id)
	}
	return r, gotRecord, nil, nil
}

// plausible holds for every record beanstalkd writes: it never stores a
// zero TTR (a put asking for one gets the least it allows), a negative
// delay or a job created before 1970. A record cut short and padded with
// zeros mostly fails it.
func plausible(r *record) bool {
	return r.ttr > 0 && r.delay >= 0 && r.created > 0
}
