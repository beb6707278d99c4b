package loop

import "testing"

func TestShortOfFDs(t *testing.T) {
	for _, c := range []struct {
		fd      int
		limit   uint64
		reserve int
		want    bool
	}{
		{fd: 10, limit: 64, reserve: 16, want: false},
		{fd: 47, limit: 64, reserve: 16, want: false}, // 48..63 stay free
		{fd: 48, limit: 64, reserve: 16, want: true},
		{fd: 63, limit: 64, reserve: 16, want: true},
		{fd: 1000, limit: 1 << 20, reserve: 16, want: false},
		{fd: 5, limit: 10, reserve: 16, want: true}, // a limit below the reserve sheds everything
	} {
		if got := shortOfFDs(c.fd, c.limit, c.reserve); got != c.want {
			t.Errorf("shortOfFDs(%d, %d, %d) = %v, want %v", c.fd, c.limit, c.reserve, got, c.want)
		}
	}
}
