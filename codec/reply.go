package codec

import "strconv"

// Fixed replies, byte for byte as upstream's MSG_* strings.
// They are shared: append them to an output buffer, never write into them.
var (
	RepBuried         = []byte("BURIED\r\n")
	RepExpectedCRLF   = []byte("EXPECTED_CRLF\r\n")
	RepJobTooBig      = []byte("JOB_TOO_BIG\r\n")
	RepDraining       = []byte("DRAINING\r\n")
	RepDeadlineSoon   = []byte("DEADLINE_SOON\r\n")
	RepTimedOut       = []byte("TIMED_OUT\r\n")
	RepDeleted        = []byte("DELETED\r\n")
	RepReleased       = []byte("RELEASED\r\n")
	RepTouched        = []byte("TOUCHED\r\n")
	RepKicked         = []byte("KICKED\r\n") // kick-job; kick answers AppendKicked
	RepNotIgnored     = []byte("NOT_IGNORED\r\n")
	RepPaused         = []byte("PAUSED\r\n")
	RepNotFound       = []byte("NOT_FOUND\r\n")
	RepOutOfMemory    = []byte("OUT_OF_MEMORY\r\n")
	RepInternalError  = []byte("INTERNAL_ERROR\r\n")
	RepBadFormat      = []byte("BAD_FORMAT\r\n")
	RepUnknownCommand = []byte("UNKNOWN_COMMAND\r\n")
)

// Replies to beanpole's own commands (Op.Internal).
var (
	RepNotWaiting = []byte("NOT_WAITING\r\n") // beanpole-cancel-wait with no reserve parked
	RepUnreserved = []byte("UNRESERVED\r\n")
)

// crlf ends every reply line.
const crlf = "\r\n"

// The encoders below append one reply line to dst and return the extended
// slice, like strconv.Append*: no allocation once dst has room, so a
// connection can batch many replies into one reused buffer.

// appendWordUint appends "<word><n>\r\n"; word carries its trailing space.
func appendWordUint(dst []byte, word string, n uint64) []byte {
	dst = append(dst, word...)
	dst = strconv.AppendUint(dst, n, 10)
	return append(dst, crlf...)
}

// appendWordJob appends "<word><id> <n>\r\n", the header of a reply that
// carries a job body; the caller appends the body and its CRLF.
func appendWordJob(dst []byte, word string, id, n uint64) []byte {
	dst = append(dst, word...)
	dst = strconv.AppendUint(dst, id, 10)
	dst = append(dst, ' ')
	dst = strconv.AppendUint(dst, n, 10)
	return append(dst, crlf...)
}

// AppendInserted appends "INSERTED <id>\r\n" (put).
func AppendInserted(dst []byte, id uint64) []byte {
	return appendWordUint(dst, "INSERTED ", id)
}

// AppendReservedHeader appends "RESERVED <id> <n>\r\n". n is the body length
// without its trailing CRLF; the caller sends the body and the CRLF.
func AppendReservedHeader(dst []byte, id, n uint64) []byte {
	return appendWordJob(dst, "RESERVED ", id, n)
}

// AppendFoundHeader appends "FOUND <id> <n>\r\n" (the peek commands); the
// caller sends the body and its CRLF, as for AppendReservedHeader.
func AppendFoundHeader(dst []byte, id, n uint64) []byte {
	return appendWordJob(dst, "FOUND ", id, n)
}

// AppendReady appends "READY <id> <pri>\r\n" (beanpole-peek-watched).
func AppendReady(dst []byte, id uint64, pri uint32) []byte {
	return appendWordJob(dst, "READY ", id, uint64(pri))
}

// AppendKicked appends "KICKED <n>\r\n" (kick). kick-job answers RepKicked.
func AppendKicked(dst []byte, n uint64) []byte {
	return appendWordUint(dst, "KICKED ", n)
}

// AppendWatching appends "WATCHING <n>\r\n" (watch, ignore).
func AppendWatching(dst []byte, n uint64) []byte {
	return appendWordUint(dst, "WATCHING ", n)
}

// AppendUsing appends "USING <tube>\r\n" (use, list-tube-used).
func AppendUsing(dst []byte, tube []byte) []byte {
	dst = append(dst, "USING "...)
	dst = append(dst, tube...)
	return append(dst, crlf...)
}

// AppendOKHeader appends "OK <n>\r\n", the header of a YAML reply; n is the
// payload length without its trailing CRLF. The YAML encoders in yaml.go
// already frame their replies; this is for payloads built elsewhere.
func AppendOKHeader(dst []byte, n uint64) []byte {
	return appendWordUint(dst, "OK ", n)
}
