package upstream

import (
	"cmp"
	"fmt"
	"io"
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
	ignored  int
	buries   uint64
	files    int
	last     uint64
	versions []uint32
	damage   []Damage
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
// (see Readable): then nothing of that file was applied.
func (rp *Replay) ReadFile(seq uint64, r io.ReaderAt, size int64) error {
	if seq <= rp.last {
		return fmt.Errorf("%s: read after binlog.%d: files must be read in order", rp.path(seq), rp.last)
	}
	for m := rp.last + 1; rp.last != 0 && m < seq; m++ {
		rp.damage = append(rp.damage, Damage{File: rp.path(m),
			Why: fmt.Sprintf("missing, though binlog.%d and binlog.%d are there; whatever it held is lost", rp.last, seq)})
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
				rp.maxID = max(rp.maxID, id)
			}
		}
		rp.damage = append(rp.damage, d)
	}
	return nil
}

// apply folds one record in; it refuses a record only before changing
// anything.
func (rp *Replay) apply(seq uint64, lay layout, r *record) error {
	rp.maxID = max(rp.maxID, r.id)
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

// Records counts the records read; Ignored those among them that named a
// job no full record had.
func (rp *Replay) Records() int { return rp.records }
func (rp *Replay) Ignored() int { return rp.ignored }

// Files counts the files read.
func (rp *Replay) Files() int { return rp.files }

// Versions lists the binlog versions read, in the order first met.
func (rp *Replay) Versions() []uint32 { return slices.Clone(rp.versions) }

// Damage lists what could not be read, in file order.
func (rp *Replay) Damage() []Damage { return slices.Clone(rp.damage) }
