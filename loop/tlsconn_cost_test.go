package loop

import (
	"bytes"
	"runtime"
	"strconv"
	"testing"
)

// tlsRoundTrips is a client's records for put, reserve and delete of jobs
// 1 to n of size bytes, each command in a record (or records) of its own,
// as a client that waits for each reply sends them. They are sealed ahead,
// so that what runs them measures the server's side alone; the client's
// side never reads the replies.
func (p *tlsPair) tlsRoundTrips(t testing.TB, from, n, size int) [][]byte {
	body := append(bytes.Repeat([]byte("x"), size), "\r\n"...)
	put := append([]byte("put 0 0 60 "+strconv.Itoa(size)+"\r\n"), body...)
	recs := make([][]byte, 0, 3*n)
	for id := from; id < from+n; id++ {
		recs = append(recs, p.encrypt(t, put), p.encrypt(t, []byte("reserve\r\n")),
			p.encrypt(t, []byte("delete "+strconv.Itoa(id)+"\r\n")))
	}
	return recs
}

// run hands the server one of the client's records, as gnet would, runs
// what OnTraffic runs, and drops the replies.
func (p *tlsPair) run(record []byte) {
	p.rc.in = record // what deliver appends to, without its copy
	for p.rc.woken = true; p.rc.woken; {
		p.rc.woken = false
		p.t.fill()
		p.s.process(p.c)
		p.t.settle()
	}
	p.rc.out = p.rc.out[:0]
}

// A TLS round trip allocates what a plaintext one does (the job and its
// body) and what crypto/tls allocates for each record it opens, nothing
// more: the pass that has run a record's commands does not ask crypto/tls
// for a record gnet does not hold.
func TestTLSRoundTripAllocatesOnlyTheJobAndOnePerRecord(t *testing.T) {
	if raceBuild {
		t.Skip("allocations are not counted under the race detector")
	}
	p := newTLSPair(t, 100)
	p.deliver(p.encrypt(t, []byte("put 0 0 60 5\r\nhello\r\n")))
	p.deliver(p.encrypt(t, []byte("reserve\r\n")))
	p.deliver(p.encrypt(t, []byte("delete 1\r\n")))
	if got, want := p.replies(t), "INSERTED 1\r\nRESERVED 1 5\r\nhello\r\nDELETED\r\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	// The engine's job index allocates the first time each of its
	// shards takes a job: those are behind before counting.
	const warm, runs = 300, 100
	recs := p.tlsRoundTrips(t, 2, warm+runs+1, 5)
	for _, r := range recs[:3*warm] {
		p.run(r)
	}
	recs = recs[3*warm:]
	allocs := testing.AllocsPerRun(runs, func() {
		for _, r := range recs[:3] {
			p.run(r)
		}
		recs = recs[3:]
	})
	if p.c.closed || p.t.ended || len(recs) != 0 {
		t.Fatalf("the connection ended (%v, %v) or records are left (%d)", p.c.closed, p.t.ended, len(recs))
	}
	if allocs > 2+3 {
		t.Fatalf("a TLS round trip allocates %.1f times, want at most 5 (the job, its body, one per record opened)", allocs)
	}
}

// benchTLSRoundTrips is what a TLS connection's side of the server spends
// on put, reserve and delete of one job of size bytes: records opened,
// commands run, replies sealed.
func benchTLSRoundTrips(b *testing.B, size int) {
	p := newTLSPair(b, uint32(size))
	const batch = 256
	var recs [][]byte
	b.SetBytes(int64(2 * size))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if i%batch == 0 {
			b.StopTimer()
			recs = p.tlsRoundTrips(b, i+1, batch, size)
			b.StartTimer()
		}
		for _, r := range recs[3*(i%batch) : 3*(i%batch)+3] {
			p.run(r)
		}
	}
	b.StopTimer()
	if p.c.closed || p.t.ended {
		b.Fatal("the connection ended")
	}
}

func BenchmarkTLSRoundTrip(b *testing.B)      { benchTLSRoundTrips(b, 64) }
func BenchmarkTLSRoundTrip64KiB(b *testing.B) { benchTLSRoundTrips(b, 64<<10) }

// A large put body a client wrote with its line, in one write, so that its
// first record holds the line and the body's start, is allocated once, at
// its full size, at that first record: not at that record's size first and
// then again, with a copy, at the next.
func TestTLSLargePutBodyIsAllocatedOnce(t *testing.T) {
	if raceBuild {
		t.Skip("allocations are not counted under the race detector")
	}
	const size, warm, runs = 64 << 10, 300, 20
	p := newTLSPair(t, size)
	recs := p.tlsRoundTrips(t, 1, warm+runs, size)
	for _, r := range recs[:3*warm] {
		p.run(r)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, r := range recs[3*warm:] {
		p.run(r)
	}
	runtime.ReadMemStats(&after)
	if p.c.closed || p.t.ended {
		t.Fatal("the connection ended")
	}
	// The body (size+2 bytes, which the heap rounds up to 72 KiB) and a
	// few small objects; not another 16 KiB.
	if got := (after.TotalAlloc - before.TotalAlloc) / runs; got > size+12<<10 {
		t.Fatalf("a %d-byte TLS round trip allocates %d bytes", size, got)
	}
}
