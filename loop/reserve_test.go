package loop

import (
	"net"
	"testing"
)

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

// The probe names the descriptor the next dup gets: the lowest free one,
// and leaves it free.
func TestProbeNextFD(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skip(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fd, ok := probeNextFD(c)
	if !ok || fd < 0 {
		t.Fatalf("probe: %d %v", fd, ok)
	}
	again, _ := probeNextFD(c)
	if again != fd {
		t.Fatalf("the probe kept its descriptor: %d then %d", fd, again)
	}
	if fd2, ok := probeNextFD(pipeConn{}); !ok || fd2 != -1 {
		t.Fatalf("a conn without a descriptor: %d %v", fd2, ok)
	}
}

type pipeConn struct{ net.Conn }
