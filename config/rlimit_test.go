package config

import (
	"syscall"
	"testing"
)

func TestRaiseFileLimit(t *testing.T) {
	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig) })

	// Start from a low soft limit, as a default login shell would give.
	if orig.Max > 64 {
		low := orig
		low.Cur = 64
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
			t.Fatal(err)
		}
	}

	soft, hard, err := RaiseFileLimit()
	if err != nil {
		t.Fatal(err)
	}
	want := orig.Max
	if want == rlimInfinity {
		want, _ = nrOpen()
	}
	if soft != want || hard != orig.Max {
		t.Errorf("RaiseFileLimit = %d, %d; want %d, %d", soft, hard, want, orig.Max)
	}
	var now syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &now); err != nil {
		t.Fatal(err)
	}
	if now.Cur != soft || now.Max != hard {
		t.Errorf("limit in force = %d/%d; RaiseFileLimit said %d/%d", now.Cur, now.Max, soft, hard)
	}

	// Already at the top: nothing to do, same answer.
	soft2, hard2, err := RaiseFileLimit()
	if err != nil || soft2 != soft || hard2 != hard {
		t.Errorf("second call = %d, %d, %v", soft2, hard2, err)
	}
}
