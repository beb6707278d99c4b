package upstream

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Damage is a place where Replay could not read upstream's binlog.
type Damage struct {
	File string // path of the binlog.N
	// Offset is where the unreadable record starts (0 for a file missing
	// or not readable at all); Bytes how many bytes from there to the end
	// of the file were not applied.
	Offset, Bytes int64
	Why           string
	// TornTail: nothing but zeros follows the unreadable record, so it is
	// a write cut short (beanstalkd killed mid-record) and at most that
	// record is lost. Otherwise the damage is in the middle of the data.
	TornTail bool
	// ID is the job the unreadable record names, when its job struct
	// could be read.
	ID uint64
	// Later are the jobs named by records found past the damage, read
	// without trusting them: what those records did to them is lost.
	// LaterPartial: the search stopped before the end of the file.
	Later        []uint64
	LaterPartial bool
}

// Lost lists every job the damage may have changed, in order.
func (d Damage) Lost() []uint64 {
	ids := slices.Clone(d.Later)
	if d.ID != 0 && !slices.Contains(ids, d.ID) {
		ids = append(ids, d.ID)
	}
	slices.Sort(ids)
	return ids
}

func (d Damage) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s at offset %d: %s", d.File, d.Offset, d.Why)
	switch {
	case d.TornTail:
		b.WriteString("; the file's last record was cut short (a write interrupted), so it is left out, as beanstalkd does")
		if d.ID != 0 {
			fmt.Fprintf(&b, ": the last change to job %d is lost", d.ID)
		}
		return b.String()
	case d.Bytes > 0:
		fmt.Fprintf(&b, "; the %d bytes from there to the end of the file are not read, as beanstalkd does", d.Bytes)
	}
	if lost := d.Lost(); len(lost) > 0 {
		fmt.Fprintf(&b, "; changes there to %s are lost", idList(lost))
		if d.LaterPartial {
			b.WriteString(" (and perhaps others: the search stopped early)")
		}
	}
	return b.String()
}

// idList writes ids as "job 1" or "jobs 1, 2, 3", shortened past 20.
func idList(ids []uint64) string {
	const most = 20
	if len(ids) == 1 {
		return "job " + strconv.FormatUint(ids[0], 10)
	}
	parts := make([]string, 0, min(len(ids), most))
	for i, id := range ids {
		if i == most {
			return "jobs " + strings.Join(parts, ", ") + fmt.Sprintf(" and %d more", len(ids)-most)
		}
		parts = append(parts, strconv.FormatUint(id, 10))
	}
	return "jobs " + strings.Join(parts, ", ")
}
