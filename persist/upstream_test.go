package persist

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// upRecord encodes one upstream version-7 record (a full one when tube is
// not empty).
func upRecord(id uint64, tube string, pri uint32, state byte, body string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(tube)))
	b = append(b, tube...)
	r := make([]byte, upstreamJobrecSize)
	binary.LittleEndian.PutUint64(r[0:], id)
	binary.LittleEndian.PutUint32(r[8:], pri)
	binary.LittleEndian.PutUint64(r[24:], 60e9)
	binary.LittleEndian.PutUint32(r[32:], uint32(len(body)))
	binary.LittleEndian.PutUint64(r[40:], 1e18)
	r[76] = state
	b = append(b, r...)
	if tube != "" {
		b = append(b, body...)
	}
	return b
}

func upFile(recs ...[]byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, upstreamVersion)
	for _, r := range recs {
		b = append(b, r...)
	}
	return b
}

// A file cut at every byte (C killed mid-write): the jobs whose records
// are whole come back, a cut inside a record is reported, nothing panics.
func TestUpstreamTornTailAtEveryByte(t *testing.T) {
	recs := [][]byte{
		upRecord(1, "a", 5, 1, "one\r\n"),
		upRecord(2, "bb", 6, 1, "two\r\n"),
		upRecord(1, "", 7, 3, ""), // job 1 buried
		upRecord(2, "", 6, 0, ""), // job 2 deleted
	}
	full := upFile(recs...)
	ends := []int{4}
	for _, r := range recs {
		ends = append(ends, ends[len(ends)-1]+len(r))
	}
	for cut := 4; cut <= len(full); cut++ {
		u := &upstreamLog{jobs: map[uint64]*upstreamJob{}}
		_, err := u.replayFile(full[:cut], importMaxBody)
		whole := 0
		for whole+1 < len(ends) && ends[whole+1] <= cut {
			whole++
		}
		// A cut that leaves only zeros of the next record reads as the
		// preallocated tail, as it does for upstream.
		clean := allZero(full[ends[whole]:cut])
		if clean != (err == nil) {
			t.Fatalf("cut at %d: err %v, only whole records or zeros %v", cut, err, clean)
		}
		if u.records != whole {
			t.Fatalf("cut at %d: %d records applied, want %d", cut, u.records, whole)
		}
		if whole >= 3 && u.jobs[1].State != StateBuried {
			t.Fatalf("cut at %d: job 1 not buried", cut)
		}
		if _, ok := u.jobs[2]; ok != (whole == 2 || whole == 3) {
			t.Fatalf("cut at %d: job 2 present %v after %d records", cut, ok, whole)
		}
	}
}

// The zeros upstream preallocates end a file's records, and an update for
// a job whose put was compacted away is ignored, as upstream does.
func TestUpstreamPaddingAndOrphanUpdates(t *testing.T) {
	b := upFile(upRecord(9, "", 1, 3, ""), upRecord(3, "t", 2, 2, "x\r\n"))
	b = append(b, make([]byte, 4096)...)
	u := &upstreamLog{jobs: map[uint64]*upstreamJob{}}
	if _, err := u.replayFile(b, importMaxBody); err != nil {
		t.Fatal(err)
	}
	jobs := u.live()
	if len(jobs) != 1 || jobs[0].ID != 3 || jobs[0].State != StateReady || u.maxID != 9 {
		t.Fatalf("jobs %+v, max id %d", jobs, u.maxID)
	}
}

// Versions other than 7 are refused by name; a directory holding both
// logs is refused.
func TestUpstreamVersionsAndMixedDirectories(t *testing.T) {
	dir := t.TempDir()
	v5 := binary.LittleEndian.AppendUint32(nil, 5)
	if err := os.WriteFile(filepath.Join(dir, "binlog.1"), append(v5, make([]byte, 100)...), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := readUpstream(OSFS{}, dir, []uint64{1}, importMaxBody)
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "beanstalkd 1.4") {
		t.Fatalf("version 5: %v", err)
	}
	hdr := make([]byte, segHeaderSize)
	putSegHeader(hdr, 2)
	if err := os.WriteFile(filepath.Join(dir, "binlog.2"), hdr, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := upstreamSegments(OSFS{}, dir); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "both") {
		t.Fatalf("mixed directory: %v", err)
	}
}
