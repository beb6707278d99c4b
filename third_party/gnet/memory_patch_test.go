//go:build linux

package gnet

import (
	"testing"
	"unsafe"
)

// A stream connection is 232 bytes, in the 240-byte size class: upstream's
// 248 (256-byte class) less the protocol's name, now a bool. With servers
// holding hundreds of thousands of idle connections, every byte counts.
func TestPatchConnFitsItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(conn{}); n > 240 {
		t.Fatalf("conn is %d bytes, want at most 240", n)
	}
}
