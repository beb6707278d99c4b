package zeros

import "testing"

func TestAll(t *testing.T) {
	for n := 0; n <= 20; n++ {
		b := make([]byte, n)
		if !All(b) {
			t.Fatalf("%d zero bytes: All = false", n)
		}
		for i := range n {
			b[i] = 1
			if All(b) {
				t.Fatalf("%d bytes, byte %d set: All = true", n, i)
			}
			b[i] = 0
		}
	}
}
