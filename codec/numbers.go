package codec

import "math"

// The number readers below reproduce upstream's read_u64/read_u32 (every
// numeric argument but kick's) and the strtoul that kick still uses. They
// work on the unterminated line: "end of slice" plays the role of the NUL
// that upstream writes over the CR, and Parse has already rejected lines
// holding a NUL of their own.

// skipSpaces drops leading ' ' bytes. Only the space: read_u64, read_u32 and
// read_tube_name skip nothing else, so "delete \t1" is BAD_FORMAT.
func skipSpaces(b []byte) []byte {
	for len(b) > 0 && b[0] == ' ' {
		b = b[1:]
	}
	return b
}

// v*10+d overflows a uint64 exactly when v > u64Cutoff, or v == u64Cutoff
// and d > u64CutDigit (the strtoul way of checking, without a division).
const (
	u64Cutoff   = math.MaxUint64 / 10
	u64CutDigit = math.MaxUint64 % 10
)

// readU64 is upstream's read_u64 with a non-NULL end pointer: skip spaces,
// require a decimal digit (so no sign, no tab, no "0x"), then take every
// digit as strtoumax does. A value above 2^64-1 fails (ERANGE) even though
// strtoumax would go on consuming digits. rest is what follows the digits;
// the caller decides whether anything may follow (see strict).
func readU64(b []byte) (v uint64, rest []byte, ok bool) {
	b = skipSpaces(b)
	if len(b) == 0 || !isDigit(b[0]) {
		return 0, b, false
	}
	overflow := false
	i := 0
	for ; i < len(b) && isDigit(b[i]); i++ {
		d := uint64(b[i] - '0')
		if v > u64Cutoff || (v == u64Cutoff && d > u64CutDigit) {
			overflow = true
		}
		v = v*10 + d
	}
	if overflow {
		return 0, b[i:], false
	}
	return v, b[i:], true
}

// readU32 is upstream's read_u32: readU64's rules, and a value above
// 4294967295 fails. Delays and ttrs (read_duration) are read with it too.
func readU32(b []byte) (v uint32, rest []byte, ok bool) {
	w, rest, ok := readU64(b)
	if !ok || w > math.MaxUint32 {
		return 0, rest, false
	}
	return uint32(w), rest, true
}

// strict is the end == NULL mode of upstream's readers: the number must be
// the last thing on the line, with not even a trailing space after it.
func strict(rest []byte, ok bool) bool {
	return ok && len(rest) == 0
}

// readKickBound is kick's argument as upstream parses it: plain
// strtoul(..., 10) on a 64-bit unsigned long, stored in an unsigned int.
// Unlike readU64 it skips any C whitespace, accepts a sign (a negative value
// is negated modulo 2^64, so "-1" is the maximum), ignores whatever follows
// the digits, and truncates to 32 bits ("4294967296" kicks 0 jobs). It only
// fails when there are no digits (strtoul leaves end at the start) or when the
// magnitude exceeds 2^64-1 (ERANGE), exactly the two cases upstream checks.
func readKickBound(b []byte) (uint32, bool) {
	i := 0
	for i < len(b) && isCSpace(b[i]) {
		i++
	}
	neg := false
	if i < len(b) && (b[i] == '+' || b[i] == '-') {
		neg = b[i] == '-'
		i++
	}
	if i == len(b) || !isDigit(b[i]) {
		return 0, false
	}
	var v uint64
	for ; i < len(b) && isDigit(b[i]); i++ {
		d := uint64(b[i] - '0')
		if v > u64Cutoff || (v == u64Cutoff && d > u64CutDigit) {
			return 0, false
		}
		v = v*10 + d
	}
	if neg {
		v = -v
	}
	return uint32(v), true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isCSpace is C's isspace in the "C" locale, which is what strtoul skips.
func isCSpace(c byte) bool {
	return c == ' ' || ('\t' <= c && c <= '\r') // \t \n \v \f \r
}
