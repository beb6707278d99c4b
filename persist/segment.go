package persist

import (
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// A segment is one binlog.N file. Records never straddle segments.
//
// Life cycle: created preallocated and all zero (a spare) → current: the
// placement point, where appends put records → sealed once the writer has
// moved past it: fsynced, trimmed to its used length, closed → reclaimed
// (unlinked) from the head of the list once no live job's latest full
// record is in it.
type segment struct {
	seq  uint64
	path string

	// Guarded by Log.mu.
	size      int64  // file size: SegmentSize, or more for an oversized record
	used      int64  // bytes placed so far (header included)
	firstLSN  uint64 // LSN of its first frame (the id mark); 0 while a spare
	refs      int    // live jobs whose latest full record is here
	liveBytes int64  // total frame bytes of those records
	lastUnpin uint64 // LSN of the latest record that moved a job off it
	sealed    bool   // the writer has finished with it
	damaged   bool   // recovery found corruption in it: keep it aside, do not unlink

	// fmu orders fsync (syncer) against close (writer sealing it).
	fmu sync.Mutex
	f   File // nil once closed
}

const segPrefixName = "binlog."

func segName(seq uint64) string { return segPrefixName + strconv.FormatUint(seq, 10) }

// parseSegName accepts exactly binlog.<decimal>, like upstream.
func parseSegName(name string) (uint64, bool) {
	s, ok := strings.CutPrefix(name, segPrefixName)
	if !ok || s == "" || s[0] == '+' || s[0] == '0' {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil && n > 0
}

// tmpPrefix names files being preallocated; they get their binlog.N name
// only when they join the list, so sequence numbers stay in creation order.
// Leftovers from a crash are deleted at Open.
const tmpPrefix = "binlog-tmp."

// listSegments returns the sequence numbers of DIR's segments in order,
// and removes leftover temporary files.
func listSegments(fs FS, dir string) ([]uint64, error) {
	names, err := fs.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var seqs []uint64
	for _, n := range names {
		if seq, ok := parseSegName(n); ok {
			seqs = append(seqs, seq)
		} else if strings.HasPrefix(n, tmpPrefix) {
			_ = fs.Remove(join(dir, n))
		}
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	return seqs, nil
}

// sync makes everything written to s durable. Safe against a concurrent
// seal: a closed segment was synced when it was sealed.
func (s *segment) sync() error {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if s.f == nil {
		return nil
	}
	return s.f.Sync()
}

// closeFile closes s's file, syncing first if asked and trimming the
// preallocated tail beyond used (when used > 0) so sealed segments take
// only the space their records need.
func (s *segment) closeFile(trimTo int64, doSync bool) error {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if s.f == nil {
		return nil
	}
	var err error
	if trimTo > 0 {
		err = s.f.Truncate(trimTo)
	}
	if doSync && err == nil {
		err = s.f.Sync()
	}
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	s.f = nil
	return err
}

const filePerm os.FileMode = 0o600
