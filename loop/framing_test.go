package loop

import (
	"bytes"
	"strings"
	"testing"

	"github.com/beanpole/beanpole/engine"
	"github.com/rs/zerolog"
)

// recConn is fakeConn keeping what is written.
type recConn struct {
	fakeConn
	out []byte
}

func (r *recConn) Write(b []byte) (int, error) {
	r.out = append(r.out, b...)
	return len(b), nil
}

func (r *recConn) Writev(bs [][]byte) (int, error) {
	n := 0
	for _, b := range bs {
		r.out = append(r.out, b...)
		n += len(b)
	}
	return n, nil
}

// framingServer is a server with one loop and -z maxJob, and one
// connection to it driven by hand.
func framingServer(t testing.TB, maxJob uint32) (*Server, *conn, *recConn) {
	eng := engine.New(1)
	s, err := New(Config{Loops: 1, MaxJobSize: maxJob, Log: zerolog.Nop()}, eng)
	if err != nil {
		t.Fatal(err)
	}
	rc := &recConn{}
	ls := &loopState{s: s, shard: 1, heldBy: make(map[*conn]int)}
	c := &conn{gc: rc, ls: ls}
	eng.InitClient(&c.cl, 1, c)
	return s, c, rc
}

// The replies to a connection's input do not depend on how it arrives:
// the same input, delivered whole or in two reads cut at any byte, gets
// the same bytes back (bodies, over-long lines, bodies without CRLF or
// over -z, and empty lines across the cut included). The put whose body
// lacks its CRLF burns id 2, as upstream makes the job at the put line.
func TestRepliesDoNotDependOnHowInputIsCut(t *testing.T) {
	in := []byte("put 0 0 60 5\r\nhello\r\n" +
		strings.Repeat("x", 230) + "\r\n" +
		"put 0 0 0 3\r\nabcde\r\n" +
		"put 0 0 0 11\r\n01234567890\r\n\r\n" +
		"peek-ready\r\nuse foo\r\nput 0 0 0 0\r\n\r\ndelete 1\r\nlist-tube-used\r\n")
	want := "INSERTED 1\r\nBAD_FORMAT\r\nEXPECTED_CRLF\r\nUNKNOWN_COMMAND\r\nJOB_TOO_BIG\r\nUNKNOWN_COMMAND\r\n" +
		"FOUND 1 5\r\nhello\r\nUSING foo\r\nINSERTED 3\r\nDELETED\r\nUSING foo\r\n"
	for cut := 0; cut <= len(in); cut++ {
		s, c, rc := framingServer(t, 10)
		rc.in = bytes.Clone(in[:cut])
		rc.run(s, c)
		rc.in = append(rc.in, in[cut:]...)
		rc.run(s, c)
		if string(rc.out) != want || len(rc.in) != 0 {
			t.Fatalf("cut at %d: got %q, %q left unread; want %q", cut, rc.out, rc.in, want)
		}
	}
}
