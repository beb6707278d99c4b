package upstream

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/beanpole/beanpole/persist/internal/intern"
)

// Job is a live job as upstream's binlog leaves it.
type Job struct {
	ID    uint64
	Tube  string
	Pri   uint32
	State State // Ready, Delayed or Buried
	Delay time.Duration
	TTR   time.Duration
	// CreatedAt is wall-clock Unix ns.
	CreatedAt int64
	// Deadline is the wall-clock Unix ns at which a delayed job becomes
	// ready (perhaps already past); 0 in the other states.
	Deadline int64
	// BuriedSeq orders buried jobs by when they were buried.
	BuriedSeq uint64
	Counters
	Body Body
}

// Body is where a job's body is (its CRLF included).
type Body struct {
	File   uint64 // the N of binlog.N
	Offset int64
	Size   int64
}

// Replay folds the files of an upstream binlog, in order, into the jobs
// they leave (see the package comment).
type Replay struct {
	dir      string
	jobs     map[uint64]*Job
	tubes    intern.Strings
	maxID    uint64
	records  int
	ignored  int // records that named a job no full record had
	buries   uint64
	files    int
	last     uint64
	versions []uint32
	damage   []Damage
	lastIDAt string // where a record names the largest id, if one does
}

// NewReplay starts the replay of the binlog in dir.
func NewReplay(dir string) *Replay {
	return &Replay{dir: dir, jobs: map[uint64]*Job{}, tubes: intern.Strings{}}
}

func (rp *Replay) path(seq uint64) string {
	return filepath.Join(rp.dir, "binlog."+strconv.FormatUint(seq, 10))
}

// ReadFile reads dir/binlog.seq through r, whose size is size. Files must
// come in increasing order of seq; one missing from the run is reported as
// damage. The error is an I/O error, or a version that cannot be read
// (an error wrapping ErrVersion): then nothing of that file was applied.
func (rp *Replay) ReadFile(seq uint64, r io.ReaderAt, size int64) error {
	if seq <= rp.last {
		return fmt.Errorf("%s: read after binlog.%d: files must be read in order", rp.path(seq), rp.last)
	}
	if rp.last != 0 && seq-rp.last > 1 {
		// One entry for the whole gap, however wide: a stray binlog.N of
		// a large N must not cost memory in proportion to N.
		why := fmt.Sprintf("missing, though binlog.%d and binlog.%d are there; whatever it held is lost", rp.last, seq)
		if n := seq - rp.last - 1; n > 1 {
			why = fmt.Sprintf("missing, and so is every file up to binlog.%d (%d files), though binlog.%d and binlog.%d are there; whatever they held is lost",
				seq-1, n, rp.last, seq)
		}
		rp.damage = append(rp.damage, Damage{File: rp.path(rp.last + 1), Why: why})
	}
	rp.last = seq
	rp.files++
	src := newWindow(r, size)
	head, err := src.at(0, headerSize)
	if err != nil {
		return fmt.Errorf("%s: %w", rp.path(seq), err)
	}
	v, ok := Version(head)
	if !ok {
		// Zeros only: a file beanstalkd was killed while preallocating.
		nz, err := firstNonZero(src, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", rp.path(seq), err)
		}
		if nz >= 0 {
			rp.damage = append(rp.damage, Damage{File: rp.path(seq), Bytes: size,
				Why: fmt.Sprintf("not a beanstalkd binlog (it starts % x)", head)})
		}
		return nil
	}
	lay, err := layoutOf(v)
	if err != nil {
		return fmt.Errorf("%s: %w", rp.path(seq), err)
	}
	if !slices.Contains(rp.versions, v) {
		rp.versions = append(rp.versions, v)
	}
	sc, err := scanFile(src, lay, func(rec *record) error { return rp.apply(seq, lay, rec) })
	if err == nil && sc.records == 0 && sc.fault != nil && sc.fault.off == headerSize {
		err = mismatch(src, lay, sc.fault)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", rp.path(seq), err)
	}
	rp.records += sc.records
	if f := sc.fault; f != nil {
		d := Damage{File: rp.path(seq), Offset: f.off, Bytes: size - f.off, Why: f.why, TornTail: sc.torn, ID: f.id}
		if !sc.torn {
			var whole bool
			if d.Later, whole, err = laterIDs(r, size, f.off, lay); err != nil {
				return fmt.Errorf("%s: %w", rp.path(seq), err)
			}
			d.LaterPartial = !whole
			// Unverified, but never to be handed out again either.
			for _, id := range d.Later {
				rp.noteID(id, "a record found past the damage at offset %d", f.off)
			}
		}
		rp.damage = append(rp.damage, d)
	}
	if rp.lastIDAt != "" {
		return fmt.Errorf("%s: %w", rp.path(seq), lastIDError(rp.lastIDAt))
	}
	return nil
}

// noteID counts id among the ids handed out; where, with off, says where
// it was found.
func (rp *Replay) noteID(id uint64, where string, off int64) {
	rp.maxID = max(rp.maxID, id)
	if id == math.MaxUint64 && rp.lastIDAt == "" {
		rp.lastIDAt = fmt.Sprintf(where, off)
	}
}

// lastIDError refuses a binlog naming the largest job id: no id can follow
// it, so no job could be put after the import.
func lastIDError(at string) error {
	return refusal(fmt.Sprintf("%s names job id %d, the largest there is: no id would be left for a job put after the import."+
		" beanstalkd never comes near that id: the binlog is damaged, or not beanstalkd's", at, uint64(math.MaxUint64)))
}

// mismatch checks a file whose very first record cannot be read under
// the version its header declares: if its records read under the other
// version, the header does not match the data, and the file is refused
// rather than read as damage (probing it under the wrong version would
// find nonsense ids). f is the fault under the declared version.
func mismatch(src source, lay layout, f *fault) error {
	other := layout5
	if lay.version == 5 {
		other = layout7
	}
	sc, err := scanFile(src, other, func(*record) error { return nil })
	if err != nil || sc.records == 0 || (sc.fault != nil && !sc.torn && sc.records < 2) {
		return err
	}
	return refusal(fmt.Sprintf("the header says binlog version %d, but the records are those of version %d"+
		" (%d of them read as version %d; read as version %d the first, at offset %d, fails: %s):"+
		" the header does not match the data, and reading it either way would be guessing",
		lay.version, other.version, sc.records, other.version, lay.version, f.off, f.why))
}

// ErrRefused is what the errors for a binlog that must not be imported
// at all wrap: one naming the largest job id, or whose header does not
// match its records.
var ErrRefused = errors.New("upstream binlog refused")

// refusal says, in words for an operator, why a binlog is refused.
type refusal string

func (e refusal) Error() string { return string(e) }
func (e refusal) Unwrap() error { return ErrRefused }

// apply folds one record in; it refuses a record only before changing
// anything.
func (rp *Replay) apply(seq uint64, lay layout, r *record) error {
	rp.noteID(r.id, "the record at offset %d", r.off)
	j := rp.jobs[r.id]
	switch {
	case j == nil && !r.full():
		// Its put was in a file since deleted, so the job was deleted or
		// moved: upstream ignores the record too.
		rp.ignored++
		return nil
	case r.state == Deleted:
		delete(rp.jobs, r.id)
		return nil
	case j != nil && r.full() && j.Body.Size != r.bodySize:
		return fmt.Errorf("job %d: a body of %d bytes where an earlier record has %d", r.id, r.bodySize, j.Body.Size)
	}
	if j == nil {
		j = &Job{ID: r.id, Tube: rp.tubes.Of(r.tube)}
		rp.jobs[r.id] = j
	}
	if r.full() {
		j.Body = Body{File: seq, Offset: r.bodyOff(lay), Size: r.bodySize}
	}
	wasBuried := j.State == Buried
	j.Pri, j.Delay, j.TTR, j.CreatedAt, j.Counters = r.pri, r.delay, r.ttr, r.created, r.counters
	j.State, j.Deadline = Ready, 0 // reserved too: as upstream restarts it
	switch r.state {
	case Delayed:
		j.State, j.Deadline = Delayed, r.deadline
	case Buried:
		// A buried job moved by compaction keeps its place.
		if !wasBuried {
			rp.buries++
			j.BuriedSeq = rp.buries
		}
		j.State = Buried
	}
	return nil
}

// Jobs are the live jobs, ordered by where their bodies are, so that
// copying the bodies reads each file once, front to back.
func (rp *Replay) Jobs() []*Job {
	jobs := make([]*Job, 0, len(rp.jobs))
	for _, j := range rp.jobs {
		jobs = append(jobs, j)
	}
	slices.SortFunc(jobs, func(a, b *Job) int {
		if c := cmp.Compare(a.Body.File, b.Body.File); c != 0 {
			return c
		}
		return cmp.Compare(a.Body.Offset, b.Body.Offset)
	})
	return jobs
}

// MaxID is the highest job id any record names, deleted jobs and records
// found past damage included.
func (rp *Replay) MaxID() uint64 { return rp.maxID }

// Records counts the records read.
func (rp *Replay) Records() int { return rp.records }

// Files counts the files read.
func (rp *Replay) Files() int { return rp.files }

// Versions lists the binlog versions read, in the order first met.
func (rp *Replay) Versions() []uint32 { return slices.Clone(rp.versions) }

// Damage lists what could not be read, in file order.
func (rp *Replay) Damage() []Damage { return slices.Clone(rp.damage) }
