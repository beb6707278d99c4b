package codec

// MaxTubeNameLen is the longest tube name upstream accepts. Its buffers are
// MAX_TUBE_NAME_LEN = 201 bytes including the NUL, and every name check is
// is_valid_tube(name, MAX_TUBE_NAME_LEN-1).
const MaxTubeNameLen = 200

// nameChar marks the bytes upstream's NAME_CHARS allows in a tube name:
// A-Z a-z 0-9 and - + / ; . $ _ ( ). A table, because Parse asks for every
// byte of every name and a switch per byte is measurably slower.
var nameChar = func() (t [256]bool) {
	for _, c := range []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-+/;.$_()") {
		t[c] = true
	}
	return t
}()

// ValidTubeName reports whether name is a tube name upstream would accept
// (is_valid_tube): 1..200 bytes, all from NAME_CHARS, not starting with '-'.
// There is no distinct error for any of these: each gives BAD_FORMAT.
func ValidTubeName(name []byte) bool {
	if len(name) == 0 || len(name) > MaxTubeNameLen || name[0] == '-' {
		return false
	}
	return nameRun(name) == len(name)
}

// nameRun is strspn(b, NAME_CHARS): the length of the longest prefix of b
// made only of tube-name bytes.
func nameRun(b []byte) int {
	for i, c := range b {
		if !nameChar[c] {
			return i
		}
	}
	return len(b)
}

// readTubeName is upstream's read_tube_name, used only by pause-tube: skip
// spaces, then take the longest run of name bytes, whatever follows it. The
// run may still be invalid (a leading '-', or longer than 200 bytes); upstream
// checks that later, after counting the command. ok is false when the run is
// empty.
func readTubeName(b []byte) (name, rest []byte, ok bool) {
	b = skipSpaces(b)
	n := nameRun(b)
	if n == 0 {
		return nil, b, false
	}
	return b[:n:n], b[n:], true
}
