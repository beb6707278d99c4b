package loop

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"

	"github.com/beanpole/beanpole/engine"
)

// A put body of directBody bytes or more makes the connection's reads ask
// for headRead bytes, so that its next large body is read straight into the
// job; the next large body is given, and charged, its full size as soon as
// its first part arrives; a smaller body sets the reads back to gnet's
// whole buffer.
func TestLargeBodiesAreReadInSmallReads(t *testing.T) {
	s, c, rc := framingServer(t, 1<<20)
	put := func(n int) string { return "put 0 0 10 " + strconv.Itoa(n) + "\r\n" }

	rc.in = []byte(put(directBody) + string(bytes.Repeat([]byte("a"), directBody)) + "\r\n")
	rc.run(s, c)
	if rc.readSize != headRead {
		t.Fatalf("after a body of %d bytes: reads of %d bytes, want %d", directBody, rc.readSize, headRead)
	}

	putLargeInSmallReads(t, s, c, rc, put(5)+"small\r\n")
	if rc.readSize != 0 {
		t.Fatalf("after a body of 5 bytes: reads of %d bytes, want 0 (gnet's whole buffer)", rc.readSize)
	}
	if got := s.eng.Memory(engine.MemPartialBodies); got != 0 {
		t.Fatalf("%d bytes of partial bodies still charged, want 0", got)
	}
	if want := "INSERTED 1\r\nINSERTED 2\r\nINSERTED 3\r\n"; string(rc.out) != want {
		t.Fatalf("replies %q, want %q", rc.out, want)
	}
}

// putLargeInSmallReads puts a body of 100,000 bytes on c, whose reads are
// small, as they come: its line and the rest of a small read, which must
// have the body charged its full size at once, then the rest, followed by
// after.
func putLargeInSmallReads(t *testing.T, s *Server, c *conn, rc *recConn, after string) {
	t.Helper()
	const next = 100_000
	line := "put 0 0 10 " + strconv.Itoa(next) + "\r\n"
	first := headRead - len(line)
	rc.in = []byte(line + string(bytes.Repeat([]byte("b"), first)))
	rc.run(s, c)
	if got, want := s.eng.Memory(engine.MemPartialBodies), int64(engine.AllocSize(next+2)); got != want {
		t.Fatalf("the next large body, %d of %d bytes in: %d bytes charged, want its full size %d", first, next, got, want)
	}
	rc.in = []byte(string(bytes.Repeat([]byte("b"), next-first)) + "\r\n" + after)
	rc.run(s, c)
}

// Bodies large and small, put one at a time and pipelined, over a real
// socket whose reads change size between them, all come back intact.
func TestLargeBodiesIntactAcrossReadSizes(t *testing.T) {
	addr := startServer(t, 1<<20)
	c := dial(t, addr)
	sizes := []int{directBody, 65536, 10, 300_000, directBody - 1, 65536, 1 << 20, 100}
	body := func(i, n int) []byte {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte('a' + (i+j)%26)
		}
		return b
	}
	var id int
	// One at a time: each reply awaited, the reads sized by the body before.
	for i, n := range sizes {
		id++
		send(t, c, fmt.Sprintf("put 0 0 10 %d\r\n%s\r\n", n, body(i, n)))
		expect(t, c, fmt.Sprintf("INSERTED %d\r\n", id))
		send(t, c, "reserve\r\n")
		expect(t, c, fmt.Sprintf("RESERVED %d %d\r\n%s\r\n", id, n, body(i, n)))
		send(t, c, fmt.Sprintf("delete %d\r\n", id))
		expect(t, c, "DELETED\r\n")
	}
	// Pipelined: every put in one write, then every reserve and delete.
	var in, want bytes.Buffer
	for i, n := range sizes {
		fmt.Fprintf(&in, "put 0 0 10 %d\r\n%s\r\n", n, body(i, n))
		fmt.Fprintf(&want, "INSERTED %d\r\n", id+1+i)
	}
	for i, n := range sizes {
		in.WriteString("reserve\r\n")
		fmt.Fprintf(&in, "delete %d\r\n", id+1+i)
		fmt.Fprintf(&want, "RESERVED %d %d\r\n%s\r\nDELETED\r\n", id+1+i, n, body(i, n))
	}
	go func() { _, _ = c.Write(in.Bytes()) }()
	expect(t, c, want.String())
}

// A producer of large bodies that reserves and deletes a job at a time
// between its puts keeps reading in small reads, so that its next body is
// read straight into the job (and given its full size at once); small
// commands pipelined behind a large put bring gnet's whole buffer back.
func TestSmallReadsLastUntilSmallCommandsArePipelined(t *testing.T) {
	s, c, rc := framingServer(t, 1<<20)
	put := func(n int) string { return "put 0 0 10 " + strconv.Itoa(n) + "\r\n" }
	body := string(bytes.Repeat([]byte("a"), directBody))
	rc.in = []byte(put(directBody) + body + "\r\n")
	rc.run(s, c)
	if rc.readSize != headRead {
		t.Fatalf("after a large body: reads of %d bytes, want %d", rc.readSize, headRead)
	}
	for _, line := range []string{"reserve\r\n", "delete 1\r\n"} {
		rc.in = []byte(line)
		rc.run(s, c)
		if rc.readSize != headRead {
			t.Fatalf("after %q on its own: reads of %d bytes, want %d", line, rc.readSize, headRead)
		}
	}

	putLargeInSmallReads(t, s, c, rc, "")

	rc.in = []byte("list-tube-used\r\nlist-tube-used\r\n")
	rc.run(s, c)
	if rc.readSize != 0 {
		t.Fatalf("after pipelined list-tube-used: reads of %d bytes, want 0 (gnet's whole buffer)", rc.readSize)
	}
	want := "INSERTED 1\r\nRESERVED 1 " + strconv.Itoa(directBody) + "\r\n" + body + "\r\nDELETED\r\n" +
		"INSERTED 2\r\nUSING default\r\nUSING default\r\n"
	if string(rc.out) != want {
		t.Fatalf("replies %q, want %q", rc.out, want)
	}
}
