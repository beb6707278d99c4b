package upstream

import "fmt"

// scanned is how the records of one file ended.
type scanned struct {
	records int
	// fault is the record that stopped the reading, nil if the records
	// ended cleanly (end of file, or the zeros of the preallocation).
	fault *fault
	// torn: nothing but zeros follows the fault.
	torn bool
}

// scanFile reads the records of one file, after its version field, and
// passes each to apply, which may refuse one (the record then counts as
// damage). It stops at the first record it cannot read, as upstream does.
func scanFile(src source, lay layout, apply func(*record) error) (scanned, error) {
	p := parser{src: src, lay: lay}
	var s scanned
	for off := int64(headerSize); ; {
		r, out, f, err := p.parse(off)
		if err != nil {
			return s, err
		}
		switch out {
		case atEnd:
			return s, nil
		case atZeros:
			nz, err := firstNonZero(src, off)
			if err != nil || nz < 0 {
				return s, err
			}
			s.fault = &fault{off: off, end: off,
				why: fmt.Sprintf("zeros where a record should start, yet data follows at offset %d", nz)}
			return s, nil
		case atFault:
			nz, err := firstNonZero(src, f.end)
			s.fault, s.torn = f, nz < 0
			return s, err
		}
		if err := apply(&r); err != nil {
			s.fault = &fault{off: off, why: err.Error(), id: r.id, end: r.end(lay)}
			return s, nil
		}
		s.records++
		off = r.end(lay)
	}
}
