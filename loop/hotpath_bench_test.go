package loop

import (
	"io"
	"net"
	"strconv"
	"testing"

	"github.com/beanpole/beanpole/engine"
	"github.com/panjf2000/gnet/v2"
	"github.com/rs/zerolog"
)

// fakeConn is the part of gnet.Conn that process() touches, backed by
// plain buffers, so the benchmark measures parse → engine → reply and
// nothing of the kernel.
type fakeConn struct {
	gnet.Conn
	in      []byte
	written int
	woken   bool // the pass yielded (its time slice ran out) and asked to be woken
	// readSize is what SetReadSize last set: what gnet's reads ask for.
	readSize int
}

// Peek is gnet's: n bytes, all of them if n <= 0.
func (f *fakeConn) Peek(n int) ([]byte, error) {
	if n <= 0 {
		return f.in, nil
	}
	if n > len(f.in) {
		return nil, io.ErrShortBuffer
	}
	return f.in[:n], nil
}
func (f *fakeConn) Discard(n int) (int, error) { f.in = f.in[n:]; return n, nil }
func (f *fakeConn) Write(b []byte) (int, error) {
	f.written += len(b)
	return len(b), nil
}
func (f *fakeConn) Writev(bs [][]byte) (int, error) {
	n := 0
	for _, b := range bs {
		n += len(b)
	}
	f.written += n
	return n, nil
}
func (f *fakeConn) OutboundBuffered() int { return 0 }
func (f *fakeConn) InboundBuffered() int  { return len(f.in) }
func (f *fakeConn) PeerClosed() bool      { return false }
func (f *fakeConn) PeerHangup() bool      { return false }
func (f *fakeConn) PauseRead() error      { return nil }
func (f *fakeConn) ResumeRead() error     { return nil }
func (f *fakeConn) SetReadSize(n int)     { f.readSize = n }
func (f *fakeConn) Fd() int               { return -1 } // no socket: a direct read finds nothing
func (f *fakeConn) RemoteAddr() net.Addr  { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (f *fakeConn) Wake(gnet.AsyncCallback) error {
	f.woken = true
	return nil
}

// run is process until every command of the input has run: a pass that
// outlasts its time slice (a preempted benchmark) yields and is woken.
func (f *fakeConn) run(s *Server, c *conn) {
	for f.woken = true; f.woken; {
		f.woken = false
		s.process(c)
	}
}

func benchServer(b *testing.B) (*Server, *conn, *fakeConn) {
	eng := engine.New(1)
	s, err := New(Config{Loops: 1, MaxJobSize: 65535, Log: zerolog.Nop()}, eng)
	if err != nil {
		b.Fatal(err)
	}
	fc := &fakeConn{}
	ls := &loopState{s: s, shard: 1, heldBy: make(map[*conn]int)}
	ls.out.buf = make([]byte, 0, 64<<10)
	c := &conn{gc: fc, ls: ls}
	eng.InitClient(&c.cl, 1, c)
	return s, c, fc
}

// BenchmarkRoundTrip runs put, reserve and delete of one job through the
// real command path. The job and its body are the only allocations a
// round trip needs; everything else must stay allocation-free.
func BenchmarkRoundTrip(b *testing.B) {
	s, c, fc := benchServer(b)
	var scripts [][]byte
	for i := 1; i <= 1024; i++ {
		scripts = append(scripts, []byte("put 0 0 60 5\r\nhello\r\nreserve\r\ndelete "+strconv.Itoa(i)+"\r\n"))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%1024 == 0 && i > 0 {
			b.StopTimer()
			s, c, fc = benchServer(b)
			b.StartTimer()
		}
		fc.in = scripts[i%1024]
		fc.run(s, c)
	}
}

// BenchmarkReserveDelete is the consumer half alone: no job is created, so
// it must not allocate at all.
func BenchmarkReserveRelease(b *testing.B) {
	s, c, fc := benchServer(b)
	fc.in = []byte("put 0 0 60 5\r\nhello\r\n")
	s.process(c)
	script := []byte("reserve\r\nrelease 1 0 0\r\n")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fc.in = script
		fc.run(s, c)
	}
}

// BenchmarkPipelinedPuts is 64 pipelined puts in one pass: one write.
func BenchmarkPipelinedPuts(b *testing.B) {
	s, c, fc := benchServer(b)
	var script []byte
	for range 64 {
		script = append(script, "put 0 0 60 5\r\nhello\r\n"...)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fc.in = script
		fc.run(s, c)
	}
}

// BenchmarkLongPipeline is 1024 pipelined cheap commands in one pass: what
// the time slice costs a long pass (a clock read every second command past
// the first few) shows here.
func BenchmarkLongPipeline(b *testing.B) {
	s, c, fc := benchServer(b)
	var script []byte
	for range 1024 {
		script = append(script, "list-tube-used\r\n"...)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fc.in = script
		fc.run(s, c)
	}
}
