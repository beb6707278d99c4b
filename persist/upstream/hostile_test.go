package upstream

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
)

// A gap in the run is one damage entry however many files it spans: a
// stray binlog.N of a huge N costs no memory in proportion to N.
func TestReplayGapIsOneDamageWhateverItsWidth(t *testing.T) {
	for _, c := range []struct {
		last uint64
		want string
	}{
		{4, "/d/binlog.2 at offset 0: missing, and so is every file up to binlog.3 (2 files), though binlog.1 and binlog.4 are there"},
		{3, "/d/binlog.2 at offset 0: missing, though binlog.1 and binlog.3 are there"},
		{999999999999, "/d/binlog.2 at offset 0: missing, and so is every file up to binlog.999999999998 (999999999997 files), though binlog.1 and binlog.999999999999 are there"},
	} {
		rp := NewReplay("/d")
		one := file(layout7, 0, base(1, "t", "x\r\n"))
		if err := rp.ReadFile(1, bytes.NewReader(one), int64(len(one))); err != nil {
			t.Fatal(err)
		}
		if err := rp.ReadFile(c.last, bytes.NewReader(nil), 0); err != nil {
			t.Fatal(err)
		}
		d := rp.Damage()
		if len(d) != 1 || !strings.Contains(d[0].String(), c.want) {
			t.Fatalf("binlog.1 and binlog.%d: damage %v, want one entry %q", c.last, d, c.want)
		}
	}
}

// sparse is a file of size bytes that is one hole after data: what
// reading it costs is counted, and reading far into the hole fails the
// test.
type sparse struct {
	t     *testing.T
	data  []byte
	size  int64
	read  int64
	limit int64
}

func (s *sparse) ReadAt(p []byte, off int64) (int, error) {
	if s.read += int64(len(p)); s.read > s.limit {
		s.t.Fatalf("%d bytes read of a file that is a hole after its first %d bytes", s.read, len(s.data))
	}
	clear(p)
	if off < int64(len(s.data)) {
		copy(p, s.data[off:])
	}
	if n := s.size - off; n < int64(len(p)) {
		return int(max(n, 0)), io.EOF
	}
	return len(p), nil
}

func (s *sparse) SeekData(off int64) (int64, error) {
	if off < int64(len(s.data)) {
		return off, nil
	}
	return 0, io.EOF
}

// The preallocation's holes are passed over, not read: a 20 GB file of a
// version word, records and a hole is read as far as its data goes, be
// its end clean or a torn record.
func TestReplaySkipsHoles(t *testing.T) {
	const size = 20 << 30
	whole := file(layout7, 0, base(1, "t", "one\r\n"), base(2, "t", "two\r\n"))
	for name, data := range map[string][]byte{
		"version only": file(layout7, 0),
		"records":      whole,
		"torn":         whole[:len(whole)-3],
	} {
		f := &sparse{t: t, data: data, size: size, limit: 8 << 20}
		rp := NewReplay("/d")
		if err := rp.ReadFile(1, f, size); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d := rp.Damage(); name == "torn" != (len(d) == 1 && d[0].TornTail) || name != "torn" && len(d) > 0 {
			t.Errorf("%s: damage %v", name, d)
		}
	}
}

// A record naming the largest id is refused, whether it is read or found
// past damage: no id could follow it, so ids would be handed out twice.
func TestReplayRefusesTheLargestID(t *testing.T) {
	bad := binary.LittleEndian.AppendUint32(nil, 0x7f7f7f7f)
	one, last, two := base(1, "t", "one\r\n"), base(math.MaxUint64, "t", "last\r\n"), base(2, "t", "two\r\n")
	for name, c := range map[string]struct {
		f     []byte
		where string
	}{
		"read": {file(layout7, 64, one, last), "/d/binlog.1: the record at offset 94 names job id 18446744073709551615, the largest there is"},
		"past damage": {append(append(file(layout7, 0, one), bad...), file(layout7, 64, two, last)[headerSize:]...),
			"/d/binlog.1: a record found past the damage at offset 94 names job id 18446744073709551615, the largest there is"},
		"updated": {file(layout7, 64, one, last.Update(uBuried)), "/d/binlog.1: the record at offset 94 names job id 18446744073709551615"},
	} {
		rp := NewReplay("/d")
		err := rp.ReadFile(1, bytes.NewReader(c.f), int64(len(c.f)))
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.where) {
			t.Errorf("%s: %v, want %q", name, err, c.where)
		}
	}
	rp := replay(t, file(layout7, 0, one, base(math.MaxUint64-1, "t", "x\r\n")))
	if rp.MaxID() != math.MaxUint64-1 {
		t.Errorf("max id %d", rp.MaxID())
	}
}

// A header that does not match the records (version 5 on version 7
// records, or the other way) is refused: read under the wrong version the
// records are damage, and probing past it finds nonsense ids.
func TestReplayRefusesAHeaderNotMatchingTheRecords(t *testing.T) {
	recs := torture()
	for _, c := range []struct{ header, data uint32 }{{5, 7}, {7, 5}} {
		f := upstreamFile(int(c.data), recs)
		binary.LittleEndian.PutUint32(f, c.header)
		rp := NewReplay("/d")
		err := rp.ReadFile(1, bytes.NewReader(f), int64(len(f)))
		want := "/d/binlog.1: the header says binlog version " + itoa(c.header) + ", but the records are those of version " + itoa(c.data) +
			" (7 of them read as version " + itoa(c.data) + "; read as version " + itoa(c.header) + " the first, at offset 4, fails: "
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), want) {
			t.Errorf("version %d records under a version %d header: %v, want %q", c.data, c.header, err, want)
		}
	}
	// A first record damaged beyond reading either way stays damage.
	f := file(layout7, 64, recs...)
	copy(f[headerSize:], []byte{0x7f, 0x7f, 0x7f, 0x7f})
	if rp := replay(t, f); len(rp.Damage()) != 1 {
		t.Errorf("damage %v", rp.Damage())
	}
}

func upstreamFile(version int, recs []rec) []byte {
	if version == 5 {
		return file(layout5, 64, recs...)
	}
	return file(layout7, 64, recs...)
}

func itoa(v uint32) string { return string(rune('0' + v)) }
