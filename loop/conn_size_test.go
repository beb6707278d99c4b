package loop

import (
	"testing"
	"unsafe"
)

// An idle connection's memory is gnet's conn plus this one, which holds
// the engine's Client inside it. 128 bytes is one of Go's size classes;
// the next is 144. Grow it only knowing that every idle connection pays.
func TestConnFitsItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(conn{}); n > 128 {
		t.Fatalf("conn is %d bytes, want at most 128", n)
	}
}
