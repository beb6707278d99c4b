package upstream

import (
	"io"
	"slices"
)

// probeLimit bounds how much of a damaged file the probe reads past the
// damage.
const probeLimit = 64 << 20

// laterIDs names the jobs of the records that follow damage at from, for
// the report: nothing it finds is applied. Framing is lost at the damage,
// so it tries every offset after it and keeps a run of records that parse
// only if the run reaches the end of the file's data or has at least two
// records. whole is false when the file goes on past what it read.
func laterIDs(r io.ReaderAt, size, from int64, lay layout) (ids []uint64, whole bool, err error) {
	n := min(size-from, probeLimit)
	if n <= 0 {
		return nil, true, nil
	}
	buf := make([]byte, n)
	if _, err := r.ReadAt(buf, from); err != nil && !(err == io.EOF && from+n == size) {
		return nil, false, err
	}
	p := parser{src: memory(buf), lay: lay}
	seen := map[uint64]bool{}
	// A record starts with a non-zero byte (namelen, at most 200, is its
	// low byte) or, for an update record, with zeros and then the id:
	// within lay.nameWidth+7 bytes of the next non-zero byte.
	lead := int64(lay.nameWidth + 7)
	for pos := int64(1); pos < n; {
		if buf[pos] == 0 {
			nz, _ := firstNonZero(memory(buf), pos)
			if nz < 0 {
				break
			}
			pos = max(pos, nz-lead)
		}
		run, next, ok := p.run(pos)
		if !ok {
			pos++
			continue
		}
		for _, id := range run {
			seen[id] = true
		}
		pos = next
	}
	for id := range seen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, n == size-from, nil
}

// run parses records from pos on and says whether they make a run worth
// believing (see laterIDs), and where the probe goes on.
func (p *parser) run(pos int64) (ids []uint64, next int64, ok bool) {
	off := pos
	for {
		r, out, _, _ := p.parse(off)
		if out == gotRecord {
			ids = append(ids, r.id)
			off = r.end(p.lay)
			continue
		}
		clean := out == atEnd
		if out == atZeros {
			nz, _ := firstNonZero(p.src, off)
			clean = nz < 0
		}
		switch {
		case clean && len(ids) > 0:
			return ids, p.src.size(), true
		case len(ids) >= 2:
			return ids, off + 1, true
		}
		return nil, 0, false
	}
}
