package codec

import "bytes"

// MaxLine is the longest command line, its CRLF included: upstream's
// LINE_BUF_SIZE, the length of `pause-tube <200-byte name> 4294967295\r\n`.
const MaxLine = 224

// lineEnd is crlf as bytes.Index takes it.
var lineEnd = []byte(crlf)

// Decoder frames a connection's input: command lines, put bodies, and the
// input that is read only to be dropped, with upstream beanstalkd's rules.
// It works on the bytes the caller has buffered and never copies or
// allocates; the caller keeps the bytes Next did not consume and presents
// them again, followed by whatever arrived since, at the next call.
//
// Its states, and what Next does in each (N is what it consumes, left the
// body bytes still to come, CRLF included):
//
//	state    input                               event         N                   next state
//	-------  ----------------------------------  ------------  ------------------  ---------------------------
//	line     CRLF within the first MaxLine bytes Line          the line and CRLF   body: put, OK, bytes <= max
//	                                                                               tooBig: put, OK or
//	                                                                                 PutTrailingGarbage, bytes > max
//	                                                                               line: any other line
//	line     MaxLine bytes and no CRLF in them   (as discard)  -                   discard
//	line     fewer than MaxLine bytes, no CRLF   More          0                   line
//	discard  a CRLF                              LineTooLong   through the CRLF    line
//	discard  no CRLF                             More          all but a final CR  discard
//	body     left > what is buffered, not empty  BodyPart      all of it           body
//	body     left <= what is buffered            Body or       left                line
//	                                             ExpectedCRLF
//	body     nothing buffered, left > 0          More          0                   body
//	tooBig   left > what is buffered             More          all of it           tooBig
//	tooBig   left <= what is buffered            JobTooBig     left                line
//	drop     left > what is buffered             More          all of it           drop
//	drop     left <= what is buffered            Dropped       left                line
//
// A body's last part ends the body: Body if its last two bytes are CRLF,
// ExpectedCRLF otherwise. A CR that ends the buffer while a line is being
// discarded is kept, as it may be the first half of the CRLF that ends the
// line. Outside the table, the caller may read body bytes itself (BodyRead,
// after which an empty buffer may give the body's end), or give a body up
// (Drop: the state becomes drop).
//
// The zero Decoder is between commands with a MaxJobSize of 0.
type Decoder struct {
	// MaxJobSize is the largest put body accepted, without its CRLF; a
	// larger one is read and dropped, then answered JOB_TOO_BIG.
	MaxJobSize uint32
	state      decState
	// badEnd: a byte of the body where its CRLF belongs was something else.
	badEnd bool
	left   uint64
}

type decState uint8

const (
	stLine decState = iota
	stDiscard
	stBody
	stTooBig
	stDrop
)

// Event is what Next found.
type Event uint8

const (
	// More: nothing more can be framed before more input arrives (Frame.N
	// bytes, possibly 0, were consumed).
	More Event = iota
	// Line: a command line, parsed (Frame.Status, Frame.Cmd). After a put
	// line whose body follows, BodyLeft is non-zero; after one whose body
	// is too big, Skipping is true and JobTooBig ends the body.
	Line
	// BodyPart: Frame.Body is the next part of the put body, not its end.
	BodyPart
	// Body: Frame.Body is the last part of the put body (possibly empty,
	// after BodyRead), which ends in CRLF.
	Body
	// ExpectedCRLF: as Body, but the body does not end in CRLF. Reply
	// EXPECTED_CRLF.
	ExpectedCRLF
	// JobTooBig: the body of a put larger than MaxJobSize was read and
	// dropped. Reply JOB_TOO_BIG.
	JobTooBig
	// Dropped: the rest of a body given up with Drop was read and dropped.
	Dropped
	// LineTooLong: a line longer than MaxLine was discarded through its
	// CRLF. Reply BAD_FORMAT.
	LineTooLong
)

// Frame is one result of Next.
type Frame struct {
	Event  Event
	N      int     // bytes of the input consumed
	Status Status  // Line
	Cmd    Command // Line; Cmd.Tube aliases the input
	Body   []byte  // BodyPart, Body, ExpectedCRLF: aliases the input
}

// Next frames the start of buf into f.
func (d *Decoder) Next(buf []byte, f *Frame) {
	f.N, f.Body = 0, nil
	switch d.state {
	case stLine:
		window := buf[:min(len(buf), MaxLine)]
		i := bytes.Index(window, lineEnd)
		if i < 0 {
			if len(window) < MaxLine {
				f.Event = More
				return
			}
			d.state = stDiscard
			d.discard(buf, f)
			return
		}
		f.Event, f.N = Line, i+2
		f.Status = Parse(window[:i], &f.Cmd)
		if f.Cmd.Op == OpPut && (f.Status == OK || f.Status == PutTrailingGarbage) {
			// Upstream applies the size limit before it looks for
			// trailing garbage.
			switch {
			case f.Cmd.Bytes > d.MaxJobSize:
				d.state, d.left = stTooBig, uint64(f.Cmd.Bytes)+2
			case f.Status == OK:
				d.state, d.left, d.badEnd = stBody, uint64(f.Cmd.Bytes)+2, false
			}
		}
	case stDiscard:
		d.discard(buf, f)
	case stBody:
		n := int(min(uint64(len(buf)), d.left))
		if n == 0 && d.left > 0 {
			f.Event = More
			return
		}
		p := buf[:n:n]
		d.take(p)
		f.N, f.Body = n, p
		switch {
		case d.left > 0:
			f.Event = BodyPart
		case d.badEnd:
			d.state, f.Event = stLine, ExpectedCRLF
		default:
			d.state, f.Event = stLine, Body
		}
	case stTooBig, stDrop:
		n := min(uint64(len(buf)), d.left)
		d.left -= n
		f.N = int(n)
		switch {
		case d.left > 0:
			f.Event = More
		case d.state == stTooBig:
			d.state, f.Event = stLine, JobTooBig
		default:
			d.state, f.Event = stLine, Dropped
		}
	}
}

// discard consumes an over-long line through its CRLF.
func (d *Decoder) discard(buf []byte, f *Frame) {
	if i := bytes.Index(buf, lineEnd); i >= 0 {
		d.state, f.Event, f.N = stLine, LineTooLong, i+2
		return
	}
	f.Event, f.N = More, len(buf)
	if f.N > 0 && buf[f.N-1] == '\r' {
		f.N-- // it may be the first half of the CRLF
	}
}

// take accounts for p, the next bytes of the body, checking the two where
// its CRLF belongs.
func (d *Decoder) take(p []byte) {
	l, n := d.left, uint64(len(p))
	if l >= 2 && l-2 < n && p[l-2] != '\r' {
		d.badEnd = true
	}
	if l >= 1 && l-1 < n && p[l-1] != '\n' {
		d.badEnd = true
	}
	d.left -= n
}

// BodyLeft is how many bytes of the put body under way are still to come,
// its CRLF included; 0 when no body is under way or all of it has come.
func (d *Decoder) BodyLeft() int {
	if d.state != stBody {
		return 0
	}
	return int(d.left)
}

// BodyRead records p, the next bytes of the put body under way, which the
// caller read itself (straight into the job's memory, say) after consuming
// all the input Next gave it. p must be no longer than BodyLeft. Once
// BodyLeft is 0, the next call to Next, even with an empty buffer, ends the
// body (Body or ExpectedCRLF, with an empty Frame.Body).
func (d *Decoder) BodyRead(p []byte) {
	if d.state == stBody && uint64(len(p)) <= d.left {
		d.take(p)
	}
}

// Drop gives up the put body under way, or the one whose end Next has
// just returned: the rest of it is read and dropped, then Next returns
// Dropped.
func (d *Decoder) Drop() {
	if d.state == stBody || d.state == stLine {
		d.state = stDrop
	}
}

// Skipping reports whether d is reading a body only to drop it.
func (d *Decoder) Skipping() bool { return d.state == stTooBig || d.state == stDrop }

// Idle reports whether d is between commands, as a zero Decoder is.
func (d *Decoder) Idle() bool { return d.state == stLine }

// Reset puts d between commands, keeping MaxJobSize.
func (d *Decoder) Reset() { *d = Decoder{MaxJobSize: d.MaxJobSize} }
