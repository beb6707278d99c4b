// Package zeros tells whether a byte slice is all zero bytes: recovery and
// import both ask it of whole preallocated segment tails.
package zeros

import "encoding/binary"

// All reports whether every byte of b is zero. It compares eight bytes at
// a time.
func All(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
