package loop

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/panjf2000/gnet/v2"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/beanpole/beanpole/engine"
)

// tap is the client's side of a test TLS connection: the socket during
// the handshake, then the two buffers the test moves by hand.
type tap struct {
	net.Conn
	live bool   // still the socket
	out  []byte // records the client wrote after the handshake
	in   []byte // records for the client to read
}

func (c *tap) Read(b []byte) (int, error) {
	if c.live {
		return c.Conn.Read(b)
	}
	if len(c.in) == 0 {
		return 0, errWouldBlock // not io.EOF, which would end the session
	}
	n := copy(b, c.in)
	c.in = c.in[n:]
	return n, nil
}

func (c *tap) Write(b []byte) (int, error) {
	if c.live {
		return c.Conn.Write(b)
	}
	c.out = append(c.out, b...)
	return len(b), nil
}

// tlsPair is a TLS session handshaken over loopback, then cut loose: the
// server's side is a tlsConn on a framing connection, the client's a
// tls.Conn over a tap.
type tlsPair struct {
	s      *Server
	c      *conn
	rc     *recConn
	t      *tlsConn
	client *tls.Conn
	tap    *tap
}

func newTLSPair(t testing.TB, maxJob uint32) *tlsPair {
	t.Helper()
	certPEM, keyPEM := selfSigned(t, "127.0.0.1")
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cc, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close(); cc.Close() })
	pipe := &recordPipe{hs: sc}
	server := tls.Server(pipe, &tls.Config{Certificates: []tls.Certificate{pair}})
	tp := &tap{Conn: cc, live: true}
	// The certificate is not what this tests; full records are written
	// from the first.
	client := tls.Client(tp, &tls.Config{InsecureSkipVerify: true, DynamicRecordSizingDisabled: true})
	var wg sync.WaitGroup
	var serr error
	wg.Add(1)
	go func() { defer wg.Done(); serr = server.Handshake() }()
	cerr := client.Handshake()
	wg.Wait()
	if err := errors.Join(serr, cerr); err != nil {
		t.Fatal(err)
	}
	tp.live = false
	s, c, rc := framingServer(t, maxJob)
	c.ls.tlsConns = make(map[*tlsConn]struct{})
	tc := newTLSConn(rc, &tlsSession{tc: server, pipe: pipe}, c.ls)
	c.gc = tc
	return &tlsPair{s: s, c: c, rc: rc, t: tc, client: client, tap: tp}
}

// deliver hands the server records as gnet would, then runs what
// OnTraffic runs.
func (p *tlsPair) deliver(records []byte) {
	p.rc.in = append(p.rc.in, records...)
	for p.rc.woken = true; p.rc.woken; {
		p.rc.woken = false
		p.t.fill()
		p.s.process(p.c)
		p.t.settle()
	}
}

// replies decrypts everything the server wrote.
func (p *tlsPair) replies(t testing.TB) string {
	t.Helper()
	p.tap.in = append(p.tap.in, p.rc.out...)
	p.rc.out = nil
	var got []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := p.client.Read(buf)
		got = append(got, buf[:n]...)
		if err == errWouldBlock {
			return string(got)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// encrypt is script as the client's records, written in writes of the
// given sizes (the rest in one): each write is a record of its own, or
// several.
func (p *tlsPair) encrypt(t testing.TB, script []byte, writes ...int) []byte {
	t.Helper()
	for _, n := range writes {
		n = min(n, len(script))
		if _, err := p.client.Write(script[:n]); err != nil {
			t.Fatal(err)
		}
		script = script[n:]
	}
	if len(script) > 0 {
		if _, err := p.client.Write(script); err != nil {
			t.Fatal(err)
		}
	}
	out := p.tap.out
	p.tap.out = nil
	return out
}

// plainReplies is what the script gets over plaintext.
func plainReplies(t *testing.T, maxJob uint32, script []byte) string {
	s, c, rc := framingServer(t, maxJob)
	rc.in = bytes.Clone(script)
	rc.run(s, c)
	return string(rc.out)
}

// tlsScript has what framing must get right: a put, an over-long line, a
// body without its CRLF, one over -z, pipelined commands, and a put body
// of 40,000 bytes (past directBody, so decrypted straight into the job).
func tlsScript() []byte {
	big := strings.Repeat("b", 40000)
	return []byte("put 0 0 60 5\r\nhello\r\n" +
		strings.Repeat("x", 230) + "\r\n" +
		"put 0 0 0 3\r\nabcde\r\n" +
		"put 0 0 0 50001\r\n" + strings.Repeat("z", 50001) + "\r\n" +
		"put 0 0 0 40000\r\n" + big + "\r\n" +
		"peek-ready\r\nuse foo\r\nput 0 0 0 0\r\n\r\ndelete 1\r\npeek 3\r\nlist-tube-used\r\n")
}

// A TLS connection's replies are the plaintext replies to the same
// commands, however the client's records are sized and however gnet's
// reads cut them: whole, one byte at a time, or in two reads cut at any
// byte of the first records.
func TestTLSRepliesAreThePlaintextRepliesHoweverRecordsAreCut(t *testing.T) {
	const maxJob = 50000
	script := tlsScript()
	want := plainReplies(t, maxJob, script)
	if !strings.Contains(want, "JOB_TOO_BIG") || !strings.Contains(want, "FOUND 3 40000\r\n") {
		t.Fatalf("the script does not test what it should: %.200q", want)
	}
	for _, writes := range [][]int{nil, {1, 7, 30}, {16 << 10, 3, 100 << 10}} {
		p := newTLSPair(t, maxJob)
		p.deliver(p.encrypt(t, script, writes...))
		if got := p.replies(t); got != want {
			t.Fatalf("writes %v, delivered whole: got %.300q, want %.300q", writes, got, want)
		}
		p = newTLSPair(t, maxJob)
		for _, b := range p.encrypt(t, script, writes...) {
			p.deliver([]byte{b})
		}
		if got := p.replies(t); got != want {
			t.Fatalf("writes %v, delivered a byte at a time: got %.300q, want %.300q", writes, got, want)
		}
	}
	small := script[:bytes.Index(script, []byte("put 0 0 0 50001"))]
	want = plainReplies(t, maxJob, small)
	p := newTLSPair(t, maxJob)
	n := len(p.encrypt(t, small, 20, 20))
	for cut := 0; cut <= n; cut++ {
		p := newTLSPair(t, maxJob)
		records := p.encrypt(t, small, 20, 20)
		p.deliver(records[:cut])
		p.deliver(records[cut:])
		if got := p.replies(t); got != want {
			t.Fatalf("cut at %d of %d: got %q, want %q", cut, n, got, want)
		}
		if p.t.plain != nil || len(p.rc.in) != 0 {
			t.Fatalf("cut at %d: %d bytes of plaintext and %d of records left", cut, len(p.t.plain), len(p.rc.in))
		}
	}
}

// A connection holds no plaintext buffer between callbacks unless input
// is left over, and never the loop's.
func TestTLSConnectionKeepsNoBufferOfTheLoops(t *testing.T) {
	p := newTLSPair(t, 100)
	p.deliver(p.encrypt(t, []byte("use a\r\nput 0 0 0 1\r\nx\r\nlist-tube-u")))
	if got := p.replies(t); got != "USING a\r\nINSERTED 1\r\n" {
		t.Fatalf("got %q", got)
	}
	if string(p.t.plain) != "list-tube-u" || p.t.borrowed {
		t.Fatalf("left %q (borrowed %v), want the incomplete line in the connection's own memory", p.t.plain, p.t.borrowed)
	}
	p.deliver(p.encrypt(t, []byte("sed\r\n")))
	if got := p.replies(t); got != "USING a\r\n" {
		t.Fatalf("got %q", got)
	}
	if p.t.plain != nil {
		t.Fatalf("an idle connection holds %d bytes of buffer", cap(p.t.plain))
	}
}

// randomScript is a pipelined run of commands whose replies do not depend
// on time: puts of many sizes (past directBody and past -z too), bodies
// without their CRLF, over-long lines, and the commands that read what
// the puts made.
func randomScript(rng *rand.Rand, maxJob int) []byte {
	var b []byte
	for n := 5 + rng.IntN(40); n > 0; n-- {
		switch rng.IntN(10) {
		case 0, 1, 2:
			sizes := []int{0, 1, 100, 5000, 17000, 40000, maxJob + 1}
			size := sizes[rng.IntN(len(sizes))]
			body := make([]byte, size)
			for i := range body {
				body[i] = "ab\r\n"[rng.IntN(4)]
			}
			b = fmt.Appendf(b, "put %d 0 60 %d\r\n%s\r\n", rng.IntN(3), size, body)
		case 3:
			b = append(b, "put 0 0 60 3\r\nabcde\r\n"...)
		case 4:
			b = fmt.Appendf(b, "peek %d\r\n", 1+rng.IntN(8))
		case 5:
			b = fmt.Appendf(b, "delete %d\r\n", 1+rng.IntN(8))
		case 6:
			b = append(b, "reserve-with-timeout 0\r\n"...)
		case 7:
			tube := []string{"default", "a", "b"}[rng.IntN(3)]
			b = fmt.Appendf(b, "use %s\r\nwatch %s\r\n", tube, tube)
		case 8:
			b = append(b, "peek-ready\r\nlist-tube-used\r\n"...)
		case 9:
			b = append(append(b, bytes.Repeat([]byte("y"), 200+rng.IntN(400))...), "\r\n"...)
		}
	}
	return b
}

// randomCuts splits n bytes into pieces of random sizes, from single
// bytes to more than a record.
func randomCuts(rng *rand.Rand, n int) []int {
	var cuts []int
	for n > 0 {
		k := min(n, []int{1, 7, 100, 4096, 16 << 10, 40000}[rng.IntN(6)])
		cuts = append(cuts, k)
		n -= k
	}
	return cuts
}

// Random pipelined scripts get over TLS exactly the replies they get over
// plaintext, whatever sizes the client writes them in and however gnet's
// reads cut the records.
func TestTLSRandomScriptsGetThePlaintextReplies(t *testing.T) {
	const maxJob = 50000
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for i := 0; i < 200; i++ {
		script := randomScript(rng, maxJob)
		want := plainReplies(t, maxJob, script)
		p := newTLSPair(t, maxJob)
		records := p.encrypt(t, script, randomCuts(rng, len(script))...)
		for _, k := range randomCuts(rng, len(records)) {
			p.deliver(records[:k])
			records = records[k:]
		}
		if got := p.replies(t); got != want {
			t.Fatalf("seed %d, script %d (%d bytes): got %.300q, want %.300q", seed, i, len(script), got, want)
		}
		if p.t.plain != nil || len(p.rc.in) != 0 {
			t.Fatalf("seed %d, script %d: %d bytes of plaintext and %d of records left", seed, i, len(p.t.plain), len(p.rc.in))
		}
	}
}

// A client that pipelines commands and then half-closes (close_notify)
// gets every reply, and the connection closes, however its records are
// sized and however gnet's reads cut them.
func TestTLSHalfCloseAnswersEveryCommandHoweverRecordsAreCut(t *testing.T) {
	var send, want strings.Builder
	for i := 1; i <= 200; i++ {
		send.WriteString("put 0 0 60 4\r\nbody\r\n")
		fmt.Fprintf(&want, "INSERTED %d\r\n", i)
	}
	for i := 1; i <= 200; i++ {
		fmt.Fprintf(&send, "delete %d\r\n", i)
		want.WriteString("DELETED\r\n")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for it := range 100 {
		p := newTLSPair(t, 1000)
		writes := []int{1 + rng.IntN(3000), 1 + rng.IntN(3000)}
		records := p.encrypt(t, []byte(send.String()), writes...)
		if err := p.client.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		records = append(records, p.tap.out...)
		p.tap.out = nil
		var cuts []int
		for len(records) > 0 {
			k := min(len(records), 1+rng.IntN(3000))
			cuts = append(cuts, k)
			p.deliver(records[:k])
			records = records[k:]
		}
		if got := p.replies(t); got != want.String() {
			t.Fatalf("run %d, writes %v, reads %v: %d bytes of replies, want %d", it, writes, cuts, len(got), want.Len())
		}
		if !p.c.closing {
			t.Fatalf("run %d, writes %v, reads %v: not closing after close_notify (%d bytes of plaintext, %d of records left)",
				it, writes, cuts, len(p.t.plain), len(p.rc.in))
		}
	}
}

// A record still arriving is held as a put body under way is: its first
// bytes stay in gnet's buffer, counted as the connection's input against
// the input budget, until half of it has come; then crypto/tls is handed
// it, and its record buffer, grown to hold the record and kept for the
// connection's life, is charged against the memory ceiling until the
// connection closes. A second record of the same size costs nothing more.
func TestTLSPartialRecordIsCharged(t *testing.T) {
	p := newTLSPair(t, 100)
	line := "list-tube-used\r\n" + strings.Repeat("x", tlsRecord-16) + "\r\n"
	records := p.encrypt(t, []byte(line+line), len(line), len(line))
	size := recordHeader + (int(records[3])<<8 | int(records[4]))
	charged := func() int64 { return p.s.eng.Memory(engine.MemPartialBodies) }
	base := charged()
	p.deliver(records[:1000])
	if got := p.t.Conn.InboundBuffered(); got != 1000 {
		t.Fatalf("1,000 bytes of a %d-byte record: gnet holds %d bytes", size, got)
	}
	if !p.c.holdsInput || p.c.ls.heldIn < 1000 {
		t.Fatalf("1,000 bytes of a record are not held against the input budget (held %d)", p.c.ls.heldIn)
	}
	half := (size + bytes.MinRead + 1) / 2
	p.deliver(records[1000:half])
	if got := p.t.Conn.InboundBuffered(); got != 0 {
		t.Fatalf("%d bytes of a %d-byte record: gnet still holds %d bytes", half, size, got)
	}
	if p.c.holdsInput {
		t.Fatalf("the record handed to crypto/tls is still held as input (%d bytes)", p.c.ls.heldIn)
	}
	grown := charged() - base
	if grown < int64(size) || grown > 2*int64(size) {
		t.Fatalf("crypto/tls holds %d bytes of a %d-byte record: %d bytes charged", half, size, grown)
	}
	p.deliver(records[half:])
	if got := p.replies(t); got != "USING default\r\nBAD_FORMAT\r\nUSING default\r\nBAD_FORMAT\r\n" {
		t.Fatalf("got %q", got)
	}
	if got := charged() - base; got != grown {
		t.Fatalf("a second record of the same size: charged %d bytes, then %d", grown, got)
	}
	p.t.closed()
	if got := charged(); got != base {
		t.Fatalf("closed: %d bytes still charged", got-base)
	}
}

// A record header announcing more than a record may hold ends the
// connection's input at once, as crypto/tls refuses it, instead of
// waiting for its 64 KiB.
func TestTLSOversizedRecordHeaderIsRefusedAtOnce(t *testing.T) {
	p := newTLSPair(t, 100)
	p.deliver([]byte{23, 3, 3, 0xff, 0xff, 'x'})
	if !p.t.ended {
		t.Fatalf("a header announcing 65,535 bytes: the connection still waits for them (%d bytes buffered)", p.t.InboundBuffered())
	}
}

// A TLS client that pipelines more than the input cap is served as a
// plaintext one is: a pass that yields at its time slice leaves whole
// records undecrypted in gnet's buffer, and those are input still to be
// run, not input held by a waiting connection, so the connection is not
// closed for them.
func TestTLSPipelineLongerThanTheInputCapIsServedAcrossYields(t *testing.T) {
	p := newTLSPair(t, 100)
	const cmd = "list-tube-used\r\n"
	n := (p.s.inCap + 1<<20) / len(cmd)
	p.rc.in = append(p.rc.in, p.encrypt(t, []byte(strings.Repeat(cmd, n)))...)
	passes := 0
	for p.rc.woken = true; p.rc.woken; passes++ {
		p.rc.woken = false
		p.t.fill()
		if act := p.s.process(p.c); act == gnet.Close {
			t.Fatalf("pass %d closed the connection with %d bytes of records buffered", passes+1, p.t.Conn.InboundBuffered())
		}
		p.t.settle()
	}
	if passes < 2 {
		t.Fatalf("%d commands ran in one pass: no yield was tried", n)
	}
	if got := p.replies(t); got != strings.Repeat("USING default\r\n", n) {
		t.Fatalf("%d bytes of replies, want %d", len(got), n*len("USING default\r\n"))
	}
}
