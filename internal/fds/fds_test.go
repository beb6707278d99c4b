package fds

import "testing"

// A connection may take every descriptor below limit − reserve, counting
// the ones it still needs after its own, and none from there up.
func TestShortKeepsTheReserveFree(t *testing.T) {
	for _, c := range []struct {
		fd, need, reserve int
		limit             uint64
		want              bool
	}{
		{fd: 10, need: 1, reserve: 16, limit: 64, want: false},
		{fd: 47, need: 1, reserve: 16, limit: 64, want: false}, // 48..63 stay free
		{fd: 48, need: 1, reserve: 16, limit: 64, want: true},
		{fd: 63, need: 1, reserve: 16, limit: 64, want: true},
		{fd: 46, need: 2, reserve: 16, limit: 64, want: false}, // 46 and 47
		{fd: 47, need: 2, reserve: 16, limit: 64, want: true},
		{fd: 1000, need: 1, reserve: 16, limit: 1 << 20, want: false},
		{fd: 5, need: 1, reserve: 16, limit: 10, want: true}, // a limit below the reserve sheds everything
	} {
		if got := ShortUnder(c.fd, c.need, c.reserve, c.limit); got != c.want {
			t.Errorf("ShortUnder(%d, %d, %d, %d) = %v, want %v", c.fd, c.need, c.reserve, c.limit, got, c.want)
		}
	}
}
