package codec

import (
	"math"
	"testing"
)

func TestFixedReplies(t *testing.T) {
	for got, want := range map[*[]byte]string{
		&RepBuried: "BURIED\r\n", &RepExpectedCRLF: "EXPECTED_CRLF\r\n", &RepJobTooBig: "JOB_TOO_BIG\r\n",
		&RepDraining: "DRAINING\r\n", &RepDeadlineSoon: "DEADLINE_SOON\r\n", &RepTimedOut: "TIMED_OUT\r\n",
		&RepDeleted: "DELETED\r\n", &RepReleased: "RELEASED\r\n", &RepTouched: "TOUCHED\r\n",
		&RepKicked: "KICKED\r\n", &RepNotIgnored: "NOT_IGNORED\r\n", &RepPaused: "PAUSED\r\n",
		&RepNotFound: "NOT_FOUND\r\n", &RepOutOfMemory: "OUT_OF_MEMORY\r\n",
		&RepInternalError: "INTERNAL_ERROR\r\n", &RepBadFormat: "BAD_FORMAT\r\n",
		&RepUnknownCommand: "UNKNOWN_COMMAND\r\n",
	} {
		if string(*got) != want {
			t.Errorf("got %q, want %q", *got, want)
		}
	}
}

func TestReplyEncoders(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{string(AppendInserted(nil, 1)), "INSERTED 1\r\n"},
		{string(AppendInserted(nil, math.MaxUint64)), "INSERTED 18446744073709551615\r\n"},
		{string(AppendReservedHeader(nil, 1, 0)), "RESERVED 1 0\r\n"},
		{string(AppendReservedHeader(nil, 12, 65535)), "RESERVED 12 65535\r\n"},
		{string(AppendFoundHeader(nil, 3, 1)), "FOUND 3 1\r\n"},
		{string(AppendKicked(nil, 0)), "KICKED 0\r\n"},
		{string(AppendKicked(nil, math.MaxUint32)), "KICKED 4294967295\r\n"},
		{string(AppendWatching(nil, 2)), "WATCHING 2\r\n"},
		{string(AppendUsing(nil, []byte("default"))), "USING default\r\n"},
		{string(AppendOKHeader(nil, 14)), "OK 14\r\n"},
		// They append.
		{string(AppendWatching(AppendUsing([]byte("X"), []byte("a")), 1)), "XUSING a\r\nWATCHING 1\r\n"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestReplyAllocs(t *testing.T) {
	buf := make([]byte, 0, 512)
	name := []byte("default")
	if n := testing.AllocsPerRun(100, func() {
		b := AppendInserted(buf[:0], math.MaxUint64)
		b = AppendReservedHeader(b, 1, 2)
		b = AppendFoundHeader(b, 1, 2)
		b = AppendKicked(b, 3)
		b = AppendWatching(b, 4)
		b = AppendUsing(b, name)
		b = AppendOKHeader(b, 5)
		_ = append(b, RepNotFound...)
	}); n != 0 {
		t.Fatalf("reply encoders allocate: %v allocs per run", n)
	}
}
