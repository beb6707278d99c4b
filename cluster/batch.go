package cluster

import (
	"encoding/binary"
	"fmt"

	"github.com/beanpole/beanpole/record"
)

// An entry is a batch of records: each a little-endian u32 length and a
// payload made by record's Append functions.

// appendFramed appends one framed payload to an entry.
func appendFramed(entry, payload []byte) []byte {
	entry = binary.LittleEndian.AppendUint32(entry, uint32(len(payload)))
	return append(entry, payload...)
}

// eachRecord decodes the records of an entry in order.
func eachRecord(entry []byte, fn func(r *record.Record) error) error {
	var r record.Record
	for len(entry) > 0 {
		if len(entry) < 4 {
			return fmt.Errorf("%w: %d stray bytes at the end of an entry", record.ErrBad, len(entry))
		}
		n := binary.LittleEndian.Uint32(entry)
		if uint64(n) > uint64(len(entry)-4) {
			return fmt.Errorf("%w: a record of %d bytes overruns its entry", record.ErrBad, n)
		}
		if err := record.Decode(entry[4:4+n], &r); err != nil {
			return err
		}
		if err := fn(&r); err != nil {
			return err
		}
		entry = entry[4+n:]
	}
	return nil
}
