package e2e

// A binlog that cannot open its directory for lack of descriptors waits
// for one instead of failing for good.

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A binlog that cannot open its directory to move to a new file, because
// the process is out of descriptors, holds the replies instead of failing
// for good; once descriptors are free again, the held command and every
// later one are written and acknowledged, without a restart. Each job is
// deleted after its put, so that the binlog moves from file to file with
// no more spare files than the one made ahead.
func TestBinlogWaitsOutDescriptorExhaustion(t *testing.T) {
	skipLegacy(t, "upstream has no descriptor handling in its binlog")
	t.Parallel()
	s := blStart(t, t.TempDir(), "-s", "1024", "-f0")
	c := s.dial(t)
	job := "put 0 0 60 100\r\n" + strings.Repeat("x", 100) + "\r\n"
	// send sends cmd and returns its reply line, or held when none comes
	// within a second.
	send := func(cmd string) (line string, held bool) {
		mustSend(t, c, cmd)
		deadline := time.Now().Add(time.Second)
		for !strings.Contains(string(c.buf), "\r\n") {
			if err := c.fill(deadline); err != nil {
				if !isTimeout(err) {
					t.Fatalf("%q: %v", cmd, err)
				}
				return "", true
			}
		}
		return readLine(t, c), false
	}
	// cycle puts a job and deletes it; ok is false when a reply is held
	// or the put refused.
	cycle := func() (held, ok bool) {
		line, held := send(job)
		if held || line == "OUT_OF_MEMORY" {
			return held, false
		}
		id, found := strings.CutPrefix(line, "INSERTED ")
		if !found {
			t.Fatalf("put: %q; want INSERTED, OUT_OF_MEMORY or nothing yet", line)
		}
		if line, held = send("delete " + id + "\r\n"); held {
			return true, false
		}
		if line != "DELETED" {
			t.Fatalf("delete %s: %q; want DELETED or nothing yet", id, line)
		}
		return false, true
	}
	if _, ok := cycle(); !ok {
		t.Fatalf("a put and delete with descriptors free failed")
	}

	var old unix.Rlimit
	if err := unix.Prlimit(s.pid(), unix.RLIMIT_NOFILE, nil, &old); err != nil {
		t.Skipf("prlimit: %v", err)
	}
	// A limit below every descriptor the process holds: no open succeeds,
	// whatever numbers closed files left free.
	full := unix.Rlimit{Cur: 3, Max: old.Max}
	if err := unix.Prlimit(s.pid(), unix.RLIMIT_NOFILE, &full, nil); err != nil {
		t.Skipf("prlimit: %v", err)
	}
	held, ok := false, true
	for i := 0; i < 100 && ok; i++ {
		held, ok = cycle()
	}
	if ok {
		t.Fatalf("100 puts and deletes all written with no descriptor free")
	}
	t.Logf("with no descriptor free: a reply held %v (else a put refused)", held)
	if err := unix.Prlimit(s.pid(), unix.RLIMIT_NOFILE, &old, nil); err != nil {
		t.Fatalf("prlimit: %v", err)
	}
	if held { // answered now, and written
		if line := readLine(t, c); !strings.HasPrefix(line, "INSERTED ") && line != "DELETED" {
			t.Fatalf("the held command got %q once descriptors were free", line)
		}
	}
	waitFor(t, 10*time.Second, "puts written again", func() bool {
		held, ok := cycle()
		if held {
			t.Fatalf("a reply held with descriptors free")
		}
		return ok
	})
	for range 50 {
		if held, ok := cycle(); !ok {
			t.Fatalf("a put and delete failed (held %v) after descriptors were freed", held)
		}
	}
	if st := stats(t, c); st["binlog-failed"] == "true" {
		t.Fatalf("binlog-failed after descriptors were freed")
	}
}
