package persist

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/beanpole/beanpole/persist/upstream"
	"github.com/beanpole/beanpole/record"
)

// ImportReport says what an import of upstream beanstalkd's binlog carried
// over, or would (PlanImport).
type ImportReport struct {
	Dir      string
	Files    int      // upstream files read
	Versions []uint32 // their binlog versions
	Records  int      // records read
	Jobs     int      // jobs carried over
	// MaxID is the highest id upstream handed out, deleted jobs included:
	// the next job gets MaxID+1.
	MaxID  uint64
	Tubes  []TubeCount // by name
	Damage []upstream.Damage
	// Skipped says which binlog.N were not read because they are not
	// regular files.
	Skipped []string
	// Interrupted: a crash stopped an import after the new log was
	// complete; only moving files was left, which Open finishes. The
	// counts above are not known then.
	Interrupted bool
	// InUse: a running server held the directory's lock when it was read
	// (dry run only): what it says may be out of date already.
	InUse bool
}

// TubeCount is how many jobs of a tube are carried over, by state: a
// delayed job whose time has come counts as ready.
type TubeCount struct {
	Tube                   string
	Ready, Delayed, Buried int
}

func newImportReport(dir string, rp *upstream.Replay, jobs []*upstream.Job) *ImportReport {
	r := &ImportReport{Dir: dir, Files: rp.Files(), Versions: rp.Versions(), Records: rp.Records(),
		Jobs: len(jobs), MaxID: rp.MaxID(), Damage: rp.Damage()}
	per := map[string]*TubeCount{}
	now := time.Now().UnixNano()
	for _, j := range jobs {
		c := per[j.Tube]
		if c == nil {
			c = &TubeCount{Tube: j.Tube}
			per[j.Tube] = c
		}
		switch {
		case j.State == upstream.Delayed && j.Deadline > now:
			c.Delayed++
		case j.State == upstream.Buried:
			c.Buried++
		default:
			c.Ready++
		}
	}
	for _, c := range per {
		r.Tubes = append(r.Tubes, *c)
	}
	slices.SortFunc(r.Tubes, func(a, b TubeCount) int { return strings.Compare(a.Tube, b.Tube) })
	return r
}

// Refused is the damage an import stops at unless told to accept it:
// everything but torn tails.
func (r *ImportReport) Refused() []upstream.Damage {
	var bad []upstream.Damage
	for _, d := range r.Damage {
		if !d.TornTail {
			bad = append(bad, d)
		}
	}
	return bad
}

// String is the report for a person, one fact a line.
func (r *ImportReport) String() string {
	var b strings.Builder
	if r.Interrupted {
		fmt.Fprintf(&b, "%s: an import of upstream beanstalkd's binlog was interrupted after its new log was complete; starting beanpole (or beanpole import) finishes it\n", r.Dir)
		return b.String()
	}
	if r.InUse {
		fmt.Fprintf(&b, "%s is in use by a running server: what follows may already be out of date\n", r.Dir)
	}
	vs := make([]string, len(r.Versions))
	for i, v := range r.Versions {
		vs[i] = fmt.Sprint(v)
	}
	fmt.Fprintf(&b, "%s: %d upstream beanstalkd binlog files (version %s), %d records\n", r.Dir, r.Files, strings.Join(vs, ", "), r.Records)
	var ready, delayed, buried int
	for _, t := range r.Tubes {
		ready, delayed, buried = ready+t.Ready, delayed+t.Delayed, buried+t.Buried
	}
	fmt.Fprintf(&b, "%d jobs to carry over: %d ready, %d delayed, %d buried; ids up to %d, the next job gets %d\n",
		r.Jobs, ready, delayed, buried, r.MaxID, r.MaxID+1)
	if left, few := record.IDsLeft(r.MaxID); few {
		fmt.Fprintf(&b, "warning: %s\n", record.FewIDsLeft(left))
	}
	for _, t := range r.Tubes {
		fmt.Fprintf(&b, "  tube %q: %d ready, %d delayed, %d buried\n", t.Tube, t.Ready, t.Delayed, t.Buried)
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(&b, "skipped: %s\n", s)
	}
	for _, d := range r.Damage {
		what := "damage"
		if d.TornTail {
			what = "torn tail"
		}
		fmt.Fprintf(&b, "%s: %s\n", what, d)
	}
	return b.String()
}

// damageError refuses an import of a binlog damaged other than by a torn
// tail: beanstalkd would start without what it cannot read, beanpole does
// not unless told to. errors.Is(err, ErrFormat) holds.
type damageError struct {
	dir    string
	damage []upstream.Damage
}

func (e *damageError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "binlog import: upstream beanstalkd's binlog in %s is damaged: ", e.dir)
	for i, d := range e.damage {
		if i > 0 {
			b.WriteString("; and ")
		}
		b.WriteString(d.String())
	}
	fmt.Fprintf(&b, ". Nothing was changed. beanstalkd itself would start without what it cannot read;"+
		" `beanpole import -b %s --accept-damage` imports the same and keeps the upstream files in %s"+
		" (`--dry-run` shows what would be carried over)", e.dir, join(e.dir, importArchive))
	return b.String()
}

func (e *damageError) Unwrap() error { return ErrFormat }
