package upstream

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
)

// torture is a file's records: puts in two tubes, a release with a delay,
// a bury, a delete, and a compaction move of the buried job.
func torture() []rec {
	a, b, c := base(1, "default", "first\r\n"), base(2, "mail", "second\r\n"), base(3, "mail", "third\r\n")
	delayed := b.Update(uDelayed)
	delayed.Deadline = 1767226000e9
	moved := c
	moved.State, moved.Buries = uBuried, 1
	return []rec{a, b, c, delayed, c.Update(uBuried), a.Update(uDeleted), moved}
}

// A file cut at every byte of every record, both ways beanstalkd's files
// end up cut: truncated there, and killed or powered off mid-record (the
// preallocated zeros stay after the cut). Every record before the cut
// applies, nothing of the cut record does, and the cut is a torn tail
// unless what it left is zeros only (then it cannot be told from the
// preallocation). One cut cannot be told from a whole record, for
// beanstalkd as here: an update record cut once a non-zero byte of its
// created-at field is written reads as a delete (state 0).
func TestTornTailAtEveryByte(t *testing.T) {
	recs := torture()
	whole := file(layout7, 0, recs...)
	ends := []int{headerSize}
	for _, r := range recs {
		ends = append(ends, ends[len(ends)-1]+len(r.Encode(7)))
	}
	for cut := headerSize; cut <= len(whole); cut++ {
		n := 0 // whole records before the cut
		for n+1 < len(ends) && ends[n+1] <= cut {
			n++
		}
		want := byID(replay(t, file(layout7, 0, recs[:n]...)))
		zeroed := append(append([]byte(nil), whole[:cut]...), make([]byte, len(whole)-cut+64)...)
		for how, f := range map[string][]byte{"killed": zeroed, "truncated": whole[:cut]} {
			rp := replay(t, f)
			if read, ok := asKilled(recs, n, whole[ends[n]:cut]); how == "killed" && ok {
				want := byID(replay(t, file(layout7, 0, append(recs[:n:n], read)...)))
				if got := byID(rp); !reflect.DeepEqual(got, want) || len(rp.Damage()) != 0 {
					t.Fatalf("%s at %d: jobs %+v, damage %v; want %+v", how, cut, got, rp.Damage(), want)
				}
				continue
			}
			if got := byID(rp); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s at %d: jobs %+v, want %+v", how, cut, got, want)
			}
			left := whole[ends[n]:cut]
			dmg := rp.Damage()
			if bytes.Count(left, []byte{0}) == len(left) {
				if len(dmg) != 0 {
					t.Fatalf("%s at %d: zeros only after the last record, yet %v", how, cut, dmg)
				}
				continue
			}
			if len(dmg) != 1 || !dmg[0].TornTail || dmg[0].Offset != int64(ends[n]) || rp.Records() != n {
				t.Fatalf("%s at %d: %d records, damage %+v; want a torn tail at %d after %d records", how, cut, rp.Records(), dmg, ends[n], n)
			}
		}
	}
}

// asKilled is what recs[n], an update record of which only written is on
// disk, reads as once zeros stand in for the rest: itself when only its
// padding is missing, a delete once a non-zero byte of its created-at is
// there. ok is false when it reads as a torn record or as zeros.
func asKilled(recs []rec, n int, written []byte) (read rec, ok bool) {
	const created, state = 4 + 40, 4 + 76 // offsets in an update record
	switch {
	case n == len(recs) || recs[n].Tube != "" || len(written) <= created:
		return rec{}, false
	case len(written) > state:
		return recs[n], true
	case bytes.Count(written[created:], []byte{0}) < len(written)-created:
		return recs[n].Update(uDeleted), true
	}
	return rec{}, false
}

// Damage in the middle of the data stops the file there, as upstream
// does (here a delete after it is not applied, so the job is still
// live), and the report names the jobs of the records after it.
func TestDamageInTheMiddleNamesTheLaterJobs(t *testing.T) {
	recs := []rec{base(1, "t", "a\r\n"), base(2, "t", "b\r\n"), base(3, "t", "c\r\n"),
		base(2, "", "").Update(uDeleted), base(4, "u", "d\r\n"), base(3, "", "").Update(uBuried)}
	f := file(layout7, 300, recs...)
	at := headerSize + len(recs[0].Encode(7)) + len(recs[1].Encode(7))
	binary.LittleEndian.PutUint32(f[at:], 0x7f7f7f7f) // job 3's namelen
	rp := replay(t, f, file(layout7, 0, base(5, "t", "later file\r\n")))
	dmg := rp.Damage()
	if len(dmg) != 1 {
		t.Fatalf("damage %v", dmg)
	}
	d := dmg[0]
	if d.TornTail || d.Offset != int64(at) || d.Bytes != int64(len(f)-at) || !reflect.DeepEqual(d.Lost(), []uint64{2, 3, 4}) || d.LaterPartial {
		t.Fatalf("damage %+v (lost %v)", d, d.Lost())
	}
	if s := d.String(); !strings.Contains(s, "/dir/binlog.1 at offset") || !strings.Contains(s, "jobs 2, 3, 4") {
		t.Fatalf("report: %s", s)
	}
	if max := replay(t, f).MaxID(); max != 4 {
		t.Fatalf("max id %d, want 4: ids named past the damage are never handed out again", max)
	}
	got := byID(rp)
	if _, ok := got[2]; !ok || len(got) != 3 || got[5].Tube != "t" {
		t.Fatalf("jobs %v: want 1 and 2 (its delete was past the damage) and 5 (the next file)", got)
	}
}

// Zeros in the middle of the data (a page lost) are damage, not the end
// of the file; so is a full record whose body size differs from the job's
// earlier one, and a body without its CRLF followed by more records.
func TestDamageThatLooksLikeAnEnd(t *testing.T) {
	a, b := base(1, "t", "aa\r\n"), base(2, "t", "b\r\n")
	gap := append(file(layout7, 200), b.Encode(7)...)
	resized := a
	resized.Body = "aaaa\r\n"
	noCRLF := a
	noCRLF.Body = "aa\n\n"
	for name, f := range map[string][]byte{
		"zeros then data": gap,
		"size changed":    file(layout7, 64, a, resized, b),
		"no CRLF":         file(layout7, 64, noCRLF, b),
	} {
		rp := replay(t, f)
		dmg := rp.Damage()
		if len(dmg) != 1 || dmg[0].TornTail || !reflect.DeepEqual(dmg[0].Later, []uint64{2}) {
			t.Errorf("%s: damage %+v", name, dmg)
		}
	}
}

// A body larger than the read window is located without being read.
func TestBodiesLargerThanTheWindow(t *testing.T) {
	big := base(1, "t", strings.Repeat("x", 3*windowSize)+"\r\n")
	rp := replay(t, file(layout7, 10, big, base(2, "t", "y\r\n"), big.Update(uBuried)))
	got := byID(rp)
	if len(got) != 2 || got[1].State != Buried || got[1].Body.Size != int64(len(big.Body)) || len(rp.Damage()) != 0 {
		t.Fatalf("jobs %+v, damage %v", got, rp.Damage())
	}
}
