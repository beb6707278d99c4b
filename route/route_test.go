package route

import (
	"testing"
)

// A tube's group and a job's group are part of a cluster's data: a node
// that placed them otherwise than its peers, or than it did before an
// upgrade, would look for jobs where they are not. These values must never
// change.
func TestPlacementNeverChanges(t *testing.T) {
	for _, tc := range []struct {
		tube   string
		groups int
		want   int
	}{
		// 1 + FNV-1a(name) mod groups, as computed apart from this code.
		{"default", 3, 1}, {"default", 1, 1}, {"emails", 3, 1}, {"emails", 16, 13}, {"t0", 6, 4},
	} {
		if got := GroupOfTube([]byte(tc.tube), tc.groups); got != tc.want {
			t.Errorf("GroupOfTube(%q, %d) = %d, want %d", tc.tube, tc.groups, got, tc.want)
		}
	}
	for _, tc := range []struct {
		id     uint64
		groups int
		want   int
	}{{1, 3, 1}, {2, 3, 2}, {3, 3, 3}, {4, 3, 1}, {7, 1, 1}, {18446744073709551615, 3, 3}} {
		if got := GroupOfID(tc.id, tc.groups); got != tc.want {
			t.Errorf("GroupOfID(%d, %d) = %d, want %d", tc.id, tc.groups, got, tc.want)
		}
	}
}

// A reply's body length is read from the replies that carry one, and only
// from those.
func TestBodyLenOfReplies(t *testing.T) {
	for _, tc := range []struct {
		line string
		n    int
		ok   bool
	}{
		{"RESERVED 12 5\r\n", 5, true}, {"FOUND 3 0\r\n", 0, true}, {"OK 120\r\n", 120, true},
		{"INSERTED 4\r\n", 0, false}, {"TIMED_OUT\r\n", 0, false}, {"RESERVED 12\r\n", 0, false},
		{"OK -1\r\n", 0, false}, {"USING OK 3\r\n", 0, false},
	} {
		if n, ok := bodyLen([]byte(tc.line)); ok != tc.ok || ok && n != tc.n {
			t.Errorf("bodyLen(%q) = %d, %v; want %d, %v", tc.line, n, ok, tc.n, tc.ok)
		}
	}
	if id := replyID([]byte("RESERVED 42 3\r\n")); id != 42 {
		t.Errorf("replyID: %d, want 42", id)
	}
}
