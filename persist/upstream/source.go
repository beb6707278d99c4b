package upstream

import (
	"errors"
	"fmt"
	"io"

	"github.com/beanpole/beanpole/persist/internal/zeros"
)

// source gives the parser the bytes of one file.
type source interface {
	// at returns n bytes at off, fewer only where the file ends. The
	// slice is valid until the next call.
	at(off int64, n int) ([]byte, error)
	size() int64
	// dataFrom is the offset of the first byte at or after off that is
	// not in a hole of the file, or -1 if only holes follow: a hole reads
	// as zeros, so the search for data past the records need not read it.
	dataFrom(off int64) (int64, error)
}

// DataSeeker is what a file offers, when it can, to let the reading skip
// its holes: the offset of the first byte at or after off that is not in
// a hole (lseek's SEEK_DATA), or io.EOF when only holes follow. Upstream's
// files are preallocated, and the preallocation mostly reads as holes.
type DataSeeker interface {
	SeekData(off int64) (int64, error)
}

// windowSize is how much of a file a window reads at once: records are
// read front to back, so most of them come from one read.
const windowSize = 1 << 20

// window reads a file through a buffer that it refills wherever the
// parser asks. A body larger than the buffer is skipped, not read: only
// its last two bytes are looked at.
type window struct {
	r    io.ReaderAt
	n    int64
	buf  []byte
	base int64 // file offset of buf[0]
}

func newWindow(r io.ReaderAt, size int64) *window { return &window{r: r, n: size} }

func (w *window) size() int64 { return w.n }

func (w *window) dataFrom(off int64) (int64, error) {
	ds, ok := w.r.(DataSeeker)
	if !ok {
		return off, nil
	}
	d, err := ds.SeekData(off)
	switch {
	case errors.Is(err, io.EOF):
		return -1, nil
	case err != nil:
		return 0, err
	case d >= w.n:
		return -1, nil
	}
	return max(d, off), nil
}

func (w *window) at(off int64, n int) ([]byte, error) {
	if off >= w.n {
		return nil, nil
	}
	n = int(min(int64(n), w.n-off))
	if off >= w.base && off+int64(n) <= w.base+int64(len(w.buf)) {
		return w.buf[off-w.base:][:n], nil
	}
	c := int(min(int64(max(n, windowSize)), w.n-off))
	if cap(w.buf) < c {
		w.buf = make([]byte, c)
	}
	w.buf = w.buf[:c]
	k, err := w.r.ReadAt(w.buf, off)
	if k < c {
		w.buf, w.base = w.buf[:0], 0
		if err == nil || err == io.EOF {
			err = fmt.Errorf("%d bytes where %d were expected at offset %d: the file shrank while it was read", k, c, off)
		}
		return nil, err
	}
	w.base = off
	return w.buf[:n], nil
}

// memory is a source over bytes already read: the probe's, and tests'.
type memory []byte

func (m memory) size() int64 { return int64(len(m)) }

func (m memory) dataFrom(off int64) (int64, error) { return off, nil }

func (m memory) at(off int64, n int) ([]byte, error) {
	if off >= int64(len(m)) {
		return nil, nil
	}
	return m[off:][:min(n, len(m)-int(off))], nil
}

// firstNonZero is the offset of the first byte at or after from that is
// not zero, or -1 if there is none.
func firstNonZero(src source, from int64) (int64, error) {
	for off := from; off < src.size(); {
		var err error
		if off, err = src.dataFrom(off); err != nil || off < 0 {
			return -1, err
		}
		b, err := src.at(off, windowSize)
		if err != nil {
			return 0, err
		}
		if !zeros.All(b) {
			for i, c := range b {
				if c != 0 {
					return off + int64(i), nil
				}
			}
		}
		off += int64(len(b))
	}
	return -1, nil
}
