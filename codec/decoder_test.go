package codec

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// decoderMaxJob is the MaxJobSize of the decoders under test: small, so
// that scripts reach JOB_TOO_BIG cheaply.
const decoderMaxJob = 16

// feeder drives a Decoder the way a server does: input arrives in chunks,
// the bytes Next does not consume stay buffered and are presented again
// with the next chunk. Its events are written one per line, a body's parts
// joined into the event that ends it, so that any way of cutting the same
// input must give the same record.
type feeder struct {
	d       Decoder
	pending []byte
	body    []byte
	rec     strings.Builder
	fed     int // bytes given to feed
	taken   int // bytes consumed, by Next or by the caller (BodyRead)
	// direct: once the buffer is used up in the middle of a body, the
	// next chunk's body bytes go through BodyRead, as a server that reads
	// the rest of a large body straight into the job does.
	direct bool
}

func newFeeder() *feeder { return &feeder{d: Decoder{MaxJobSize: decoderMaxJob}} }

func (fd *feeder) feed(t testing.TB, chunk []byte) {
	fd.fed += len(chunk)
	if fd.direct && len(fd.pending) == 0 {
		if left := fd.d.BodyLeft(); left > 0 {
			n := min(left, len(chunk))
			fd.d.BodyRead(chunk[:n])
			fd.body = append(fd.body, chunk[:n]...)
			fd.taken += n
			chunk = chunk[n:]
		}
	}
	fd.pending = append(fd.pending, chunk...)
	var f Frame
	for steps, limit := 0, len(fd.pending)+4; ; steps++ {
		if steps > limit {
			t.Fatalf("Next makes no progress on %q", fd.pending)
		}
		in := bytes.Clone(fd.pending)
		fd.d.Next(fd.pending, &f)
		if !bytes.Equal(in, fd.pending) {
			t.Fatalf("Next modified its input: %q -> %q", in, fd.pending)
		}
		if f.N < 0 || f.N > len(fd.pending) {
			t.Fatalf("Next consumed %d of %d bytes", f.N, len(fd.pending))
		}
		if f.Body != nil && (len(f.Body) != f.N || len(f.Body) > 0 && &f.Body[0] != &fd.pending[0]) {
			t.Fatalf("Body %q is not the %d bytes consumed", f.Body, f.N)
		}
		fd.taken += f.N
		switch f.Event {
		case Line:
			fmt.Fprintf(&fd.rec, "line %v %s\n", f.Status, fmtCommand(f.Cmd))
		case BodyPart:
			fd.body = append(fd.body, f.Body...)
			if fd.d.BodyLeft() == 0 {
				t.Fatalf("BodyPart with no body left")
			}
		case Body, ExpectedCRLF:
			fd.body = append(fd.body, f.Body...)
			name := map[Event]string{Body: "body", ExpectedCRLF: "expected-crlf"}[f.Event]
			fmt.Fprintf(&fd.rec, "%s %q\n", name, fd.body)
			fd.body = fd.body[:0]
		case JobTooBig:
			fd.rec.WriteString("job-too-big\n")
		case Dropped:
			fd.rec.WriteString("dropped\n")
		case LineTooLong:
			fd.rec.WriteString("line-too-long\n")
		case More:
		default:
			t.Fatalf("unknown event %d", f.Event)
		}
		fd.pending = fd.pending[f.N:]
		if f.Event == More {
			return
		}
	}
}

// end records where the input left the decoder.
func (fd *feeder) end(t testing.TB) string {
	if fd.taken+len(fd.pending) != fd.fed {
		t.Fatalf("consumed %d + buffered %d != fed %d", fd.taken, len(fd.pending), fd.fed)
	}
	fmt.Fprintf(&fd.rec, "end idle=%v skipping=%v left=%d partial=%q pending=%q\n",
		fd.d.Idle(), fd.d.Skipping(), fd.d.BodyLeft(), fd.body, fd.pending)
	return fd.rec.String()
}

func fmtCommand(c Command) string {
	return fmt.Sprintf("%v id=%d pri=%d delay=%d ttr=%d bytes=%d timeout=%d bound=%d tube=%q",
		c.Op, c.ID, c.Pri, c.Delay, c.TTR, c.Bytes, c.Timeout, c.Bound, c.Tube)
}

// decode feeds in cut at the given offsets (ascending, within in).
func decode(t testing.TB, in []byte, direct bool, cuts ...int) string {
	fd := newFeeder()
	fd.direct = direct
	prev := 0
	for _, c := range cuts {
		fd.feed(t, in[prev:c])
		prev = c
	}
	fd.feed(t, in[prev:])
	return fd.end(t)
}

type decoderScript struct {
	name, in string
	want     []string // the events fed whole
	end      string   // and where they leave the decoder
}

func (s decoderScript) record() string { return strings.Join(append(s.want, s.end), "\n") + "\n" }

var decoderScripts = []decoderScript{
	{"pipeline", "put 0 0 60 5\r\nhello\r\nreserve\r\ndelete 1\r\n", []string{
		`line OK put id=0 pri=0 delay=0 ttr=60 bytes=5 timeout=0 bound=0 tube=""`,
		`body "hello\r\n"`,
		`line OK reserve id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
		`line OK delete id=1 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
	}, `end idle=true skipping=false left=0 partial="" pending=""`},
	{"two puts and a use", "put 1 2 3 4\r\n\r\n\r\n\r\nput 0 0 1 0\r\n\r\nuse foo\r\n", []string{
		`line OK put id=0 pri=1 delay=2 ttr=3 bytes=4 timeout=0 bound=0 tube=""`,
		`body "\r\n\r\n\r\n"`,
		`line OK put id=0 pri=0 delay=0 ttr=1 bytes=0 timeout=0 bound=0 tube=""`,
		`body "\r\n"`,
		`line OK use id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube="foo"`,
	}, `end idle=true skipping=false left=0 partial="" pending=""`},
	{"body largest accepted", "put 0 0 0 16\r\n0123456789abcdef\r\nstats\r\n", []string{
		`line OK put id=0 pri=0 delay=0 ttr=0 bytes=16 timeout=0 bound=0 tube=""`,
		`body "0123456789abcdef\r\n"`,
		`line OK stats id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
	}, `end idle=true skipping=false left=0 partial="" pending=""`},
	{"body without CRLF", "put 0 0 0 3\r\nabcde\r\nuse a\r\n", []string{
		`line OK put id=0 pri=0 delay=0 ttr=0 bytes=3 timeout=0 bound=0 tube=""`,
		`expected-crlf "abcde"`,
		`line Unknown unknown id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
		`line OK use id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube="a"`,
	}, `end idle=true skipping=false left=0 partial="" pending=""`},
	{"body ends LF CR", "put 0 0 0 2\r\nab\n\rlist-tubes\r\n", []string{
		`line OK put id=0 pri=0 delay=0 ttr=0 bytes=2 timeout=0 bound=0 tube=""`,
		`expected-crlf "ab\n\r"`,
		`line OK list-tubes id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
	}, `end idle=true skipping=false left=0 partial="" pending=""`},
	{"body ends CR only", "put 0 0 0 1\r\nx\rx\r\n", []string{
		`line OK put id=0 pri=0 delay=0 ttr=0 bytes=1 timeout=0 bound=0 tube=""`,
		`expected-crlf "x\rx"`,
		`line Unknown unknown id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
	}, `end idle=true skipping=false left=0 partial="" pending=""`},
	{"body too big", "put 0 0 0 17\r\n0123456789abcdefg\r\nlist-tubes\r\n", []string{
		`line OK put id=0 pri=0 delay=0 ttr=0 bytes=17 timeout=0 bound=0 tube=""`,
		`job-too-big`,
		`line OK list-tubes id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
	}, `end idle=true skipping=false left=0 partial="" pending=""`},
	{"too big with trailing garbage", "put 0 0 0 20 x\r\n0123456789abcdefghij\r\nquit\r\n", []string{
		`line PutTrailingGarbage put id=0 pri=0 delay=0 ttr=0 bytes=20 timeout=0 bound=0 tube=""`,
		`job-too-big`,
		`line OK quit id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
	}, `end idle=true skipping=false left=0 partial="" pending=""`},
	{"trailing garbage has no body", "put 0 0 0 5 x\r\nhello\r\n", []string{
		`line PutTrailingGarbage put id=0 pri=0 delay=0 ttr=0 bytes=5 timeout=0 bound=0 tube=""`,
		`line Unknown unknown id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
	}, `end idle=true skipping=false left=0 partial="" pending=""`},
	{"bad put has no body", "put 0 0\r\nhello\r\n", []string{
		`line BadFormat put id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
		`line Unknown unknown id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
	}, `end idle=true skipping=false left=0 partial="" pending=""`},
	{"empty lines", "\r\n\r\nstats\r\n", []string{
		`line Unknown unknown id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
		`line Unknown unknown id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
		`line OK stats id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
	}, `end idle=true skipping=false left=0 partial="" pending=""`},
	{"lone CR and LF in a line", "stats\r\r\nstats\n\r\n", []string{
		`line BadFormat stats id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
		`line BadFormat stats id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
	}, `end idle=true skipping=false left=0 partial="" pending=""`},
	{"NUL in a line", "stats\x00\r\nstats\r\n", []string{
		`line BadFormat unknown id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
		`line OK stats id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
	}, `end idle=true skipping=false left=0 partial="" pending=""`},
	{"longest line", "pause-tube " + strings.Repeat("a", 200) + " 4294967295\r\n", []string{
		`line OK pause-tube id=0 pri=0 delay=4294967295 ttr=0 bytes=0 timeout=0 bound=0 tube="` + strings.Repeat("a", 200) + `"`,
	}, `end idle=true skipping=false left=0 partial="" pending=""`},
	{"one byte too long", "pause-tube " + strings.Repeat("a", 200) + " 04294967295\r\nlist-tube-used\r\n", []string{
		`line-too-long`,
		`line OK list-tube-used id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
	}, `end idle=true skipping=false left=0 partial="" pending=""`},
	{"long line", strings.Repeat("x", 300) + "\r\nstats\r\n", []string{
		`line-too-long`,
		`line OK stats id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
	}, `end idle=true skipping=false left=0 partial="" pending=""`},
	{"long line of CRs", strings.Repeat("\r", 240) + "\nquit\r\n", []string{
		`line-too-long`,
		`line OK quit id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
	}, `end idle=true skipping=false left=0 partial="" pending=""`},
	{"long line with lone LFs", strings.Repeat("a\n", 130) + "\r\r\nstats\r\n", []string{
		`line-too-long`,
		`line OK stats id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
	}, `end idle=true skipping=false left=0 partial="" pending=""`},
	{"long line then a put", strings.Repeat("y", 230) + "\r\nput 0 0 0 2\r\nhi\r\n", []string{
		`line-too-long`,
		`line OK put id=0 pri=0 delay=0 ttr=0 bytes=2 timeout=0 bound=0 tube=""`,
		`body "hi\r\n"`,
	}, `end idle=true skipping=false left=0 partial="" pending=""`},
	{"long line unfinished", strings.Repeat("z", 230) + "\r", nil,
		`end idle=false skipping=false left=0 partial="" pending="\r"`},
	{"line unfinished", "reserve\r\nreserve-with-timeout 5\r", []string{
		`line OK reserve id=0 pri=0 delay=0 ttr=0 bytes=0 timeout=0 bound=0 tube=""`,
	}, `end idle=true skipping=false left=0 partial="" pending="reserve-with-timeout 5\r"`},
	{"body unfinished", "put 0 0 0 10\r\n01234", []string{
		`line OK put id=0 pri=0 delay=0 ttr=0 bytes=10 timeout=0 bound=0 tube=""`,
	}, `end idle=false skipping=false left=7 partial="01234" pending=""`},
	{"too big unfinished", "put 0 0 0 100\r\n01234", []string{
		`line OK put id=0 pri=0 delay=0 ttr=0 bytes=100 timeout=0 bound=0 tube=""`,
	}, `end idle=false skipping=true left=0 partial="" pending=""`},
}

// Every script gives its expected events fed whole, and the same events
// cut at any byte boundary, with or without the caller reading body bytes
// itself (BodyRead), and, for short scripts, cut at any two boundaries.
func TestDecoderEventsDoNotDependOnHowInputIsCut(t *testing.T) {
	for _, s := range decoderScripts {
		t.Run(s.name, func(t *testing.T) {
			in := []byte(s.in)
			whole := decode(t, in, false)
			if want := s.record(); whole != want {
				t.Fatalf("fed whole:\n%s\nwant:\n%s", whole, want)
			}
			for _, direct := range []bool{false, true} {
				for i := 0; i <= len(in); i++ {
					if got := decode(t, in, direct, i); got != whole {
						t.Fatalf("cut at %d (direct %v):\n%s\nwant:\n%s", i, direct, got, whole)
					}
				}
				if len(in) > 80 {
					continue
				}
				for i := 0; i <= len(in); i++ {
					for j := i; j <= len(in); j++ {
						if got := decode(t, in, direct, i, j); got != whole {
							t.Fatalf("cut at %d and %d (direct %v):\n%s\nwant:\n%s", i, j, direct, got, whole)
						}
					}
				}
			}
			bytewise := make([]int, len(in))
			for i := range bytewise {
				bytewise[i] = i
			}
			if got := decode(t, in, false, bytewise...); got != whole {
				t.Fatalf("one byte at a time:\n%s\nwant:\n%s", got, whole)
			}
		})
	}
}

// A body given up with Drop is read to its end, whichever part of it the
// decoder had reached, and then answered once.
func TestDecoderDropReadsTheRestOfTheBody(t *testing.T) {
	in := []byte("put 0 0 0 6\r\nabcdef\r\nstats\r\n")
	for cut := len("put 0 0 0 6\r\n") + 1; cut <= len("put 0 0 0 6\r\nabcdef\r\n"); cut++ {
		d := Decoder{MaxJobSize: decoderMaxJob}
		var f Frame
		buf, rest := in[:cut], in[cut:]
		var events []Event
		dropped := false
		for {
			d.Next(buf, &f)
			buf = buf[f.N:]
			if f.Event != More {
				events = append(events, f.Event)
			}
			if (f.Event == BodyPart || f.Event == Body) && !dropped {
				d.Drop()
				dropped = true
				if d.BodyLeft() != 0 || !d.Skipping() {
					t.Fatalf("cut %d: after Drop BodyLeft %d, Skipping %v", cut, d.BodyLeft(), d.Skipping())
				}
			}
			if f.Event == More {
				buf = append(buf, rest...)
				rest = nil
				if len(buf) == 0 {
					break
				}
			}
		}
		want := []Event{Line, events[1], Dropped, Line}
		if fmt.Sprint(events) != fmt.Sprint(want) {
			t.Fatalf("cut %d: events %v, want %v", cut, events, want)
		}
	}
}

// The hot path: a pipelined put and a command framed without allocating.
func TestDecoderDoesNotAllocate(t *testing.T) {
	in := []byte("put 0 0 60 5\r\nhello\r\nreserve\r\n" + strings.Repeat("x", 300) + "\r\n")
	d := Decoder{MaxJobSize: decoderMaxJob}
	var f Frame
	allocs := testing.AllocsPerRun(100, func() {
		for buf := in; ; {
			d.Next(buf, &f)
			buf = buf[f.N:]
			if f.Event == More {
				break
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per run", allocs)
	}
}

// FuzzDecoder checks that any input, cut anywhere, gives the events it
// gives fed whole (also when the caller reads body bytes itself), that the
// decoder accounts for every byte and never panics or writes its input.
// The seed corpus is in testdata/fuzz/FuzzDecoder: an input and the cuts,
// each byte of which is the length of the next chunk; run
// `go test -run='^$' -fuzz=FuzzDecoder ./codec` to explore.
func FuzzDecoder(f *testing.F) {
	for _, s := range decoderScripts {
		f.Add([]byte(s.in), []byte{1, 7, 0, 3})
	}
	f.Fuzz(func(t *testing.T, in, sizes []byte) {
		whole := decode(t, in, false)
		var cuts []int
		at := 0
		for _, n := range sizes {
			if at += int(n); at > len(in) {
				break
			}
			cuts = append(cuts, at)
		}
		direct := len(sizes) > 0 && sizes[0]&1 == 1
		if got := decode(t, in, direct, cuts...); got != whole {
			t.Fatalf("cut at %v (direct %v):\n%s\nfed whole:\n%s", cuts, direct, got, whole)
		}
	})
}
