package main

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// Kind is the first word of a server reply.
type Kind uint8

// Reply kinds. Only the replies a benchmark can legitimately expect are
// distinguished; every error word is still recognised so that it can be
// reported by name.
const (
	KNone Kind = iota
	KInserted
	KBuriedID // "BURIED <id>" (put only)
	KBuried
	KReserved
	KFound
	KOK
	KDeleted
	KReleased
	KTouched
	KKicked
	KUsing
	KWatching
	KNotIgnored
	KPaused
	KTimedOut
	KDeadlineSoon
	KNotFound
	KExpectedCRLF
	KJobTooBig
	KDraining
	KOutOfMemory
	KInternalError
	KBadFormat
	KUnknownCommand
)

var kindNames = [...]string{
	KNone: "NONE", KInserted: "INSERTED", KBuriedID: "BURIED <id>", KBuried: "BURIED",
	KReserved: "RESERVED", KFound: "FOUND", KOK: "OK", KDeleted: "DELETED",
	KReleased: "RELEASED", KTouched: "TOUCHED", KKicked: "KICKED", KUsing: "USING",
	KWatching: "WATCHING", KNotIgnored: "NOT_IGNORED", KPaused: "PAUSED",
	KTimedOut: "TIMED_OUT", KDeadlineSoon: "DEADLINE_SOON", KNotFound: "NOT_FOUND",
	KExpectedCRLF: "EXPECTED_CRLF", KJobTooBig: "JOB_TOO_BIG", KDraining: "DRAINING",
	KOutOfMemory: "OUT_OF_MEMORY", KInternalError: "INTERNAL_ERROR",
	KBadFormat: "BAD_FORMAT", KUnknownCommand: "UNKNOWN_COMMAND",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Reply is one parsed server reply. Body and Line alias the parser's input
// and are only valid until the input buffer is reused.
type Reply struct {
	Kind Kind
	ID   uint64 // INSERTED, BURIED <id>, RESERVED, FOUND
	N    uint64 // WATCHING count, KICKED count
	Line []byte // the reply line without CRLF
	Body []byte // RESERVED, FOUND, OK
	Name []byte // USING <tube>
}

// maxReplyLine bounds a reply line: the longest legal one is "USING " plus a
// 200-byte tube name. Anything longer without a CRLF is a protocol error.
const maxReplyLine = 256

// maxReplyBody bounds the announced body size of a reply (1 GiB is
// beanstalkd's hard maximum for -z).
const maxReplyBody = 1 << 30

var errShort = errors.New("short")

// ParseReply parses one reply from the front of b. It returns the number of
// bytes consumed. When b holds only part of a reply it returns consumed == 0,
// err == nil and need, the total length the reply is known to require (or
// len(b)+1 when unknown), so the caller can size its buffer.
func ParseReply(b []byte, r *Reply) (consumed, need int, err error) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		if len(b) > maxReplyLine {
			return 0, 0, fmt.Errorf("reply line longer than %d bytes without LF: %q", maxReplyLine, clip(b))
		}
		return 0, len(b) + 1, nil
	}
	if i == 0 || b[i-1] != '\r' {
		return 0, 0, fmt.Errorf("reply line not terminated by CRLF: %q", clip(b[:i+1]))
	}
	line := b[:i-1]
	if len(line) > maxReplyLine {
		return 0, 0, fmt.Errorf("reply line too long (%d bytes): %q", len(line), clip(line))
	}
	*r = Reply{Line: line}
	word, rest := line, []byte(nil)
	if sp := bytes.IndexByte(line, ' '); sp >= 0 {
		word, rest = line[:sp], line[sp+1:]
	}
	hasBody := false
	switch string(word) {
	case "INSERTED":
		r.Kind = KInserted
		r.ID, err = oneNum(rest)
	case "BURIED":
		if rest == nil {
			r.Kind = KBuried
		} else {
			r.Kind = KBuriedID
			r.ID, err = oneNum(rest)
		}
	case "RESERVED", "FOUND":
		r.Kind = KReserved
		if word[0] == 'F' {
			r.Kind = KFound
		}
		var n uint64
		r.ID, n, err = twoNums(rest)
		if err == nil && n > maxReplyBody {
			err = fmt.Errorf("body size %d too large", n)
		}
		r.N = n
		hasBody = true
	case "OK":
		r.Kind = KOK
		r.N, err = oneNum(rest)
		if err == nil && r.N > maxReplyBody {
			err = fmt.Errorf("body size %d too large", r.N)
		}
		hasBody = true
	case "USING":
		r.Kind = KUsing
		if len(rest) == 0 {
			err = errors.New("missing tube name")
		}
		r.Name = rest
	case "WATCHING":
		r.Kind = KWatching
		r.N, err = oneNum(rest)
	case "KICKED":
		r.Kind = KKicked
		if rest != nil {
			r.N, err = oneNum(rest)
		}
	default:
		k, ok := bareWords[string(word)]
		if !ok || rest != nil {
			return 0, 0, fmt.Errorf("unknown reply %q", clip(line))
		}
		r.Kind = k
	}
	if err != nil {
		return 0, 0, fmt.Errorf("malformed reply %q: %v", clip(line), err)
	}
	n := i + 1
	if !hasBody {
		return n, 0, nil
	}
	total := n + int(r.N) + 2
	if len(b) < total {
		return 0, total, nil
	}
	if b[total-2] != '\r' || b[total-1] != '\n' {
		return 0, 0, fmt.Errorf("reply %q: body of %d bytes not followed by CRLF", clip(line), r.N)
	}
	r.Body = b[n : total-2]
	return total, 0, nil
}

var bareWords = map[string]Kind{
	"DELETED": KDeleted, "RELEASED": KReleased, "TOUCHED": KTouched,
	"NOT_IGNORED": KNotIgnored, "PAUSED": KPaused, "TIMED_OUT": KTimedOut,
	"DEADLINE_SOON": KDeadlineSoon, "NOT_FOUND": KNotFound,
	"EXPECTED_CRLF": KExpectedCRLF, "JOB_TOO_BIG": KJobTooBig, "DRAINING": KDraining,
	"OUT_OF_MEMORY": KOutOfMemory, "INTERNAL_ERROR": KInternalError,
	"BAD_FORMAT": KBadFormat, "UNKNOWN_COMMAND": KUnknownCommand,
}

// parseU64 parses a strictly decimal unsigned number (no sign, no spaces).
func parseU64(b []byte) (uint64, error) {
	if len(b) == 0 || len(b) > 20 {
		return 0, errShortNum(b)
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, errShortNum(b)
		}
		d := uint64(c - '0')
		if v > (^uint64(0)-d)/10 {
			return 0, errShortNum(b)
		}
		v = v*10 + d
	}
	return v, nil
}

func errShortNum(b []byte) error { return fmt.Errorf("bad number %q", clip(b)) }

func oneNum(b []byte) (uint64, error) { return parseU64(b) }

func twoNums(b []byte) (uint64, uint64, error) {
	sp := bytes.IndexByte(b, ' ')
	if sp < 0 {
		return 0, 0, errors.New("expected two numbers")
	}
	x, err := parseU64(b[:sp])
	if err != nil {
		return 0, 0, err
	}
	y, err := parseU64(b[sp+1:])
	return x, y, err
}

func clip(b []byte) []byte {
	if len(b) > 80 {
		return append(append([]byte(nil), b[:80]...), "..."...)
	}
	return b
}

// ParseStats parses the YAML dictionary of a "stats" / "stats-tube" reply
// ("---\nkey: value\n...") into a map. String values keep no quotes.
func ParseStats(body []byte) (map[string]string, error) {
	m := make(map[string]string)
	lines := bytes.Split(body, []byte("\n"))
	if len(lines) == 0 || string(lines[0]) != "---" {
		return nil, fmt.Errorf("stats body does not start with ---: %q", clip(body))
	}
	for _, ln := range lines[1:] {
		if len(ln) == 0 {
			continue
		}
		k, v, ok := bytes.Cut(ln, []byte(": "))
		if !ok {
			return nil, fmt.Errorf("bad stats line %q", clip(ln))
		}
		s := string(v)
		if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
			s = s[1 : len(s)-1]
		}
		m[string(k)] = s
	}
	return m, nil
}

// appendPut appends a put command header, without body, to dst.
func appendPut(dst []byte, pri, delay, ttr uint32, size int) []byte {
	dst = append(dst, "put "...)
	dst = strconv.AppendUint(dst, uint64(pri), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendUint(dst, uint64(delay), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendUint(dst, uint64(ttr), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(size), 10)
	return append(dst, "\r\n"...)
}

func appendIDCmd(dst []byte, cmd string, id uint64) []byte {
	dst = append(dst, cmd...)
	dst = append(dst, ' ')
	dst = strconv.AppendUint(dst, id, 10)
	return append(dst, "\r\n"...)
}
