package persist

import (
	"github.com/beanpole/beanpole/record"

	"encoding/binary"

	"github.com/beanpole/beanpole/persist/internal/zeros"
)

// segScan is what reading one segment file found.
type segScan struct {
	seq  uint64
	size int64
	hdr  headerStatus
	// empty: every byte is zero (a spare that was never written).
	empty bool
	// end is the offset just past the last good frame: where appending
	// would continue. 0 when the header is not valid.
	end               int64
	firstLSN, lastLSN uint64
	// lastSeen also counts frames skipped for a bad payload: their
	// header, LSN included, checked out.
	lastSeen uint64
	records  int
	// lostAt is where framing was lost (-1 if never): a frame header that
	// does not check out, a length that runs past the file, an LSN out of
	// sequence, or a gap of zeros followed by more data. Nothing after it
	// can be located safely.
	lostAt  int64
	lostWhy string
	// bad are frames whose header checked out but whose payload did not.
	// Their length was trustworthy, so reading went on after them.
	bad []badFrame
	// probe is what a byte-by-byte search after lostAt found; diagnostics
	// only, never applied.
	probe probeResult
}

type badFrame struct {
	off int64
	lsn uint64
	n   int64  // frame bytes
	id  uint64 // from the damaged payload: unverified
	why string
}

// scanSegment checks buf (a whole segment file) frame by frame and hands
// every good record to apply, in order. prevLSN is the last LSN of the log
// so far (0 at the head): the first frame must come after it; within a
// segment LSNs are consecutive.
func scanSegment(buf []byte, seq, prevLSN uint64, apply func(r *record.Record, lsn uint64, frameLen int64) error) *segScan {
	sc := &segScan{seq: seq, size: int64(len(buf)), lostAt: -1}
	hseq, st := parseSegHeader(buf)
	sc.hdr = st
	if st == hdrEmpty && zeros.All(buf) {
		sc.empty = true
		return sc
	}
	if st == hdrOK && hseq != seq {
		sc.hdr = hdrBad
	}
	if sc.hdr != hdrOK {
		sc.probe = probe(buf, 0, prevLSN)
		return sc
	}
	off := int64(segHeaderSize)
	sc.end = off
	size := int64(len(buf))
	expect := uint64(0) // 0: anything after prevLSN
	var rec record.Record
	lose := func(why string) { sc.lostAt, sc.lostWhy = off, why }
	for off < size {
		if size-off < frameHeaderSize {
			if !zeros.All(buf[off:]) {
				lose("incomplete frame header at end of file")
			}
			break
		}
		hb := buf[off : off+frameHeaderSize]
		if zeros.All(hb) {
			// End of the data. Anything non-zero after this point was
			// written out of order and then cut off (a lost page).
			if !zeros.All(buf[off:]) {
				lose("zeros followed by more data")
			}
			break
		}
		h, ok := parseFrameHeader(hb)
		if !ok {
			lose("frame header checksum mismatch")
			break
		}
		if int64(h.n) < record.MinPayloadSize || int64(h.n) > size-off-frameHeaderSize || h.n > maxPayload {
			lose("frame length out of range")
			break
		}
		if (expect != 0 && h.lsn != expect) || (expect == 0 && h.lsn <= prevLSN) {
			lose("LSN out of sequence")
			break
		}
		flen := frameHeaderSize + int64(h.n)
		payload := buf[off+frameHeaderSize : off+flen]
		expect = h.lsn + 1
		sc.lastSeen = h.lsn
		if checksum(payload) != h.crc {
			sc.bad = append(sc.bad, badFrame{off: off, lsn: h.lsn, n: flen, id: unverifiedID(payload), why: "payload checksum mismatch"})
			off += flen
			continue
		}
		err := record.Decode(payload, &rec)
		if err == nil {
			err = apply(&rec, h.lsn, flen)
		}
		if err != nil {
			// The bytes are what was written, but not something this
			// version understands: skip it, loudly.
			sc.bad = append(sc.bad, badFrame{off: off, lsn: h.lsn, n: flen, id: unverifiedID(payload), why: err.Error()})
			off += flen
			continue
		}
		if sc.records == 0 {
			sc.firstLSN = h.lsn
		}
		sc.records++
		sc.lastLSN = h.lsn
		off += flen
		sc.end = off
	}
	if sc.lostAt >= 0 {
		sc.probe = probe(buf, sc.lostAt+1, max(prevLSN, sc.lastLSN))
	}
	return sc
}

// dirty reports whether anything follows the last good frame.
func (sc *segScan) dirty() bool {
	if sc.lostAt >= 0 {
		return true
	}
	for _, b := range sc.bad {
		if b.off >= sc.end {
			return true
		}
	}
	return false
}

func unverifiedID(p []byte) uint64 {
	if len(p) < 9 {
		return 0
	}
	return binary.LittleEndian.Uint64(p[1:])
}

// probeResult describes intact-looking frames found where framing was lost.
type probeResult struct {
	frames         int
	minLSN, maxLSN uint64
	ids            []uint64 // at most maxProbeIDs
	maxID          uint64
}

const maxProbeIDs = 32

// probe searches buf[from:] byte by byte for frames that check out
// completely (header and payload checksums) with an LSN after afterLSN. It
// exists to tell a torn tail (nothing valid after the tear) from damage in
// the middle (valid records exist past it, and are lost), and to name the
// jobs involved. What it finds is never applied: a job body could contain
// bytes that look like a frame, and resynchronising on it would let a
// client forge records.
func probe(buf []byte, from int64, afterLSN uint64) probeResult {
	var pr probeResult
	size := int64(len(buf))
	for p := from; p+frameHeaderSize <= size; p++ {
		// Cheap filters first: a plausible LSN and length before paying
		// for a checksum.
		lsn := binary.LittleEndian.Uint64(buf[p+4:])
		if lsn <= afterLSN || lsn-afterLSN > 1<<32 {
			continue
		}
		n := int64(binary.LittleEndian.Uint32(buf[p:]))
		if n < record.MinPayloadSize || n > size-p-frameHeaderSize {
			continue
		}
		h, ok := parseFrameHeader(buf[p : p+frameHeaderSize])
		if !ok {
			continue
		}
		payload := buf[p+frameHeaderSize : p+frameHeaderSize+n]
		if checksum(payload) != h.crc {
			continue
		}
		if pr.frames == 0 || lsn < pr.minLSN {
			pr.minLSN = lsn
		}
		pr.maxLSN = max(pr.maxLSN, lsn)
		pr.frames++
		if _, id, err := record.Peek(payload); err == nil {
			pr.maxID = max(pr.maxID, id)
			if len(pr.ids) < maxProbeIDs && id != 0 {
				pr.ids = append(pr.ids, id)
			}
		}
		p += frameHeaderSize + n - 1
	}
	return pr
}
