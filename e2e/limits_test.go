package e2e

// Job size limits (-z): upstream's testserv.c cases 20-22 and the
// "JOB_TOO_BIG waits for the body" extra case.

import (
	"strings"
	"testing"
	"time"
)

// Upstream's cttest_too_big: the body of a too-big job is discarded
// (bytes+2), then JOB_TOO_BIG.
func TestTooBig(t *testing.T) {
	t.Parallel()
	c := startServer(t, "-z", "10").dial(t)
	mustSend(t, c, "put 0 0 0 11\r\n")
	mustSend(t, c, "delete 9999\r\n") // 13 bytes: eaten as the body
	mustSend(t, c, "put 0 0 0 1\r\n")
	mustSend(t, c, "x\r\n")
	expect(t, c, "JOB_TOO_BIG\r\n")
	expect(t, c, "INSERTED 1\r\n")
}

// Upstream's cttest_job_size_invalid.
func TestJobSizeInvalid(t *testing.T) {
	t.Parallel()
	c := startServer(t, "-z", "1073741824").dial(t)
	mustSend(t, c, "put 0 0 0 4294967296\r\n")
	mustSend(t, c, "put 0 0 0 10b\r\n")
	mustSend(t, c, "put 0 0 0 --!@#$%^&&**()0b\r\n")
	mustSend(t, c, "put 0 0 0 1\r\nx\r\n")
	expect(t, c, "BAD_FORMAT\r\nBAD_FORMAT\r\nBAD_FORMAT\r\nINSERTED 1\r\n")
}

// Upstream's cttest_job_size_max_plus_1: a job one byte over the 1 GiB
// maximum is read in full and discarded. This streams 1 GiB over loopback.
func TestJobSizeMaxPlus1(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 1 GiB; skipped with -short")
	}
	t.Parallel()
	c := startServer(t, "-z", "1073741824").dial(t)
	const n = 1073741825
	mustSend(t, c, "put 0 0 0 1073741825\r\n")
	chunk := []byte(strings.Repeat("a", 1<<20))
	_ = c.nc.SetWriteDeadline(time.Now().Add(2 * time.Minute))
	left := n - 1
	for left > 0 {
		k := min(left, len(chunk))
		if _, err := c.nc.Write(chunk[:k]); err != nil {
			t.Fatalf("writing the body: %v (%d bytes left)", err, left)
		}
		left -= k
	}
	mustSend(t, c, "x\r\n")
	expectWithin(t, c, "JOB_TOO_BIG\r\n", time.Minute)
	mustSend(t, c, "put 0 0 0 1\r\ny\r\n")
	expect(t, c, "INSERTED 1\r\n")
}

// JOB_TOO_BIG is only sent once the whole body has arrived; a client
// that does not send it waits. The check comes before the trailing-garbage
// check, it counts in cmd-put and it does not burn an id.
func TestJobTooBigWaitsForBody(t *testing.T) {
	t.Parallel()
	c := startServer(t, "-z", "10").dial(t)
	mustSend(t, c, "put 0 0 0 11\r\n0123456789")
	expectNothing(t, c, 200*time.Millisecond)
	mustSend(t, c, "A\r")
	expectNothing(t, c, 100*time.Millisecond)
	mustSend(t, c, "\n")
	expect(t, c, "JOB_TOO_BIG\r\n")

	// Trailing garbage after <bytes>: the size check still comes first.
	mustSend(t, c, "put 0 0 0 20 garbage\r\n")
	mustSend(t, c, strings.Repeat("b", 20))
	expectNothing(t, c, 100*time.Millisecond)
	mustSend(t, c, "\r\n")
	expect(t, c, "JOB_TOO_BIG\r\n")
	// Trailing garbage with an allowed size: BAD_FORMAT, no body consumed.
	mustSend(t, c, "put 0 0 0 2 garbage\r\n")
	expect(t, c, "BAD_FORMAT\r\n")

	// The body bytes of a too-big job are never parsed as commands, even
	// when they look like them; the terminator is not checked either.
	mustSend(t, c, "put 0 0 0 12\r\nlist-tubes\r\nXY")
	expect(t, c, "JOB_TOO_BIG\r\n")

	mustSend(t, c, "put 0 0 0 10\r\n0123456789\r\n")
	expect(t, c, "INSERTED 1\r\n")
	st := stats(t, c)
	if st["cmd-put"] != "5" || st["max-job-size"] != "10" {
		t.Fatalf("cmd-put %s (want 5: every put whose numbers parse) max-job-size %s (want 10)", st["cmd-put"], st["max-job-size"])
	}
}

// The default limit is 65535 bytes.
func TestDefaultJobSizeLimit(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	body := strings.Repeat("z", 65535)
	mustSend(t, c, "put 0 0 10 65535\r\n"+body+"\r\n")
	expect(t, c, "INSERTED 1\r\n")
	mustSend(t, c, "put 0 0 10 65536\r\n"+body+"z\r\n")
	expect(t, c, "JOB_TOO_BIG\r\n")
	mustSend(t, c, "reserve\r\n")
	expect(t, c, "RESERVED 1 65535\r\n"+body+"\r\n")
}

// A large job (1 MiB under -z 2000000) goes through intact, and the
// reply is written fully even if the client reads it slowly.
func TestLargeJobRoundTrip(t *testing.T) {
	t.Parallel()
	c := startServer(t, "-z", "2000000").dial(t)
	var b strings.Builder
	for i := 0; b.Len() < 1<<20; i++ {
		b.WriteString(strings.Repeat(string(rune('a'+i%26)), 1000))
		b.WriteString("\r\n\x00")
	}
	body := b.String()
	mustSend(t, c, "put 0 0 10 "+itoa(len(body))+"\r\n"+body+"\r\n")
	expect(t, c, "INSERTED 1\r\n")
	mustSend(t, c, "peek 1\r\n")
	time.Sleep(50 * time.Millisecond)
	expect(t, c, "FOUND 1 "+itoa(len(body))+"\r\n"+body+"\r\n")
	// The same job via a reader that takes small bites.
	mustSend(t, c, "reserve\r\n")
	head := "RESERVED 1 " + itoa(len(body)) + "\r\n"
	got := make([]byte, len(head)+len(body)+2)
	off := copy(got, c.buf)
	c.buf = c.buf[off:]
	_ = c.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	for off < len(got) {
		n, err := c.nc.Read(got[off:min(len(got), off+4096)])
		off += n
		if err != nil {
			t.Fatalf("read: %v after %d bytes", err, off)
		}
	}
	if string(got) != head+body+"\r\n" {
		t.Fatalf("reserve reply differs%s", diffMsg(head+body+"\r\n", string(got)))
	}
}
