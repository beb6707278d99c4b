package persist

import (
	"github.com/beanpole/beanpole/record"

	"encoding/binary"
	"hash/crc32"

	"github.com/beanpole/beanpole/persist/internal/zeros"
)

// On-disk framing. Everything is little-endian.
//
// A segment starts with a 32-byte header:
//
//	0  [8]byte "BPBINLOG"
//	8  u32     format version (1)
//	12 u32     flags (0)
//	16 u64     segment sequence number (the N of binlog.N)
//	24 u32     reserved (0)
//	28 u32     CRC32C of bytes 0..28
//
// then frames back to back, then zeros (preallocated space) to the end of
// the file. A frame is a 20-byte header and a payload:
//
//	0  u32 payload length
//	4  u64 LSN: log sequence number, +1 per frame across the whole log
//	12 u32 CRC32C of the payload
//	16 u32 CRC32C of bytes 0..16 of this header
//
// The header has its own checksum so that a damaged payload can be skipped
// safely: if the header checks out, its length is trustworthy and the next
// frame starts right after the payload. If the header does not check out,
// nothing after it can be located safely and reading stops. An all-zero
// header is the end of the data: no real frame has LSN 0.
const (
	segMagic        = "BPBINLOG"
	segVersion      = 1
	segHeaderSize   = 32
	frameHeaderSize = 20

	// maxPayload bounds a frame length during recovery: a 1 GiB body (the
	// largest -z) plus its record fields.
	maxPayload = 1<<30 + 1<<16
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

func putSegHeader(b []byte, seq uint64) {
	copy(b[0:8], segMagic)
	binary.LittleEndian.PutUint32(b[8:], segVersion)
	binary.LittleEndian.PutUint32(b[12:], 0)
	binary.LittleEndian.PutUint64(b[16:], seq)
	binary.LittleEndian.PutUint32(b[24:], 0)
	binary.LittleEndian.PutUint32(b[28:], checksum(b[:28]))
}

type headerStatus int

const (
	hdrOK       headerStatus = iota
	hdrEmpty                 // all zero: preallocated, never written
	hdrBad                   // damaged or torn
	hdrVersion               // ours, but a version we cannot read
	hdrUpstream              // beanstalkd's own binlog (version 5 or 7)
)

// parseSegHeader classifies the first bytes of a segment file.
func parseSegHeader(b []byte) (seq uint64, st headerStatus) {
	if len(b) >= 4 && string(b[:min(len(b), 8)]) != segMagic[:min(len(b), 8)] {
		if v := binary.LittleEndian.Uint32(b); v == 5 || v == 7 {
			return 0, hdrUpstream
		}
	}
	if len(b) < segHeaderSize {
		if zeros.All(b) {
			return 0, hdrEmpty
		}
		return 0, hdrBad
	}
	b = b[:segHeaderSize]
	if zeros.All(b) {
		return 0, hdrEmpty
	}
	if string(b[0:8]) != segMagic {
		return 0, hdrBad
	}
	if binary.LittleEndian.Uint32(b[28:]) != checksum(b[:28]) {
		return 0, hdrBad
	}
	if binary.LittleEndian.Uint32(b[8:]) != segVersion {
		return 0, hdrVersion
	}
	return binary.LittleEndian.Uint64(b[16:]), hdrOK
}

type frameHeader struct {
	n   uint32 // payload length
	lsn uint64
	crc uint32 // of the payload
}

func putFrameHeader(b []byte, h frameHeader) {
	binary.LittleEndian.PutUint32(b[0:], h.n)
	binary.LittleEndian.PutUint64(b[4:], h.lsn)
	binary.LittleEndian.PutUint32(b[12:], h.crc)
	binary.LittleEndian.PutUint32(b[16:], checksum(b[:16]))
}

// parseFrameHeader reports ok only if the header's own checksum matches.
func parseFrameHeader(b []byte) (h frameHeader, ok bool) {
	if binary.LittleEndian.Uint32(b[16:]) != checksum(b[:16]) {
		return h, false
	}
	h.n = binary.LittleEndian.Uint32(b[0:])
	h.lsn = binary.LittleEndian.Uint64(b[4:])
	h.crc = binary.LittleEndian.Uint32(b[12:])
	return h, true
}

// appendFrame appends a complete frame for payload to dst.
func appendFrame(dst []byte, lsn uint64, payload []byte, crc uint32) []byte {
	var h [frameHeaderSize]byte
	putFrameHeader(h[:], frameHeader{n: uint32(len(payload)), lsn: lsn, crc: crc})
	dst = append(dst, h[:]...)
	return append(dst, payload...)
}

const (
	deleteFrameSize = frameHeaderSize + record.DeleteSize
	idMarkFrameSize = frameHeaderSize + record.HighWaterSize

	// segPrefix is what opens every segment: the header and an id mark.
	segPrefix = segHeaderSize + idMarkFrameSize
)
