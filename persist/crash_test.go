package persist

import (
	"github.com/beanpole/beanpole/record"

	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// crashChild is the subprocess of TestKill9: it logs puts and deletes one
// at a time and prints each one once Append has acknowledged it, until it
// is killed.
func crashChild(dir string) {
	// -b alone: fsync every 50 ms, ack after write(2); small segments to
	// rotate and reclaim a lot.
	opts := Options{Dir: dir, WantSync: true, SyncEvery: 50 * time.Millisecond, SegmentSize: 2048}
	l, rec, err := Open(opts, testLogger(nil))
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	w := bufio.NewWriter(os.Stdout)
	next := rec.MaxID
	ack := func(rec []byte) {
		ch := make(chan error, 1)
		if err := l.Append(rec, record.AckFunc(func(err error) { ch <- err })); err != nil {
			panic(err)
		}
		if err := <-ch; err != nil {
			panic(err)
		}
	}
	for {
		next++
		ack(record.AppendFull(nil, &record.Job{ID: next, Tube: "t", State: record.StateReady, Body: []byte("body " + strconv.FormatUint(next, 10))}))
		fmt.Fprintf(w, "put %d\n", next)
		if next%3 == 0 {
			// Announce the delete first: if the kill comes before the ack
			// the delete may or may not have reached the log.
			fmt.Fprintf(w, "del? %d\n", next-1)
			w.Flush()
			ack(record.AppendDelete(nil, next-1))
			fmt.Fprintf(w, "del %d\n", next-1)
		}
		w.Flush()
	}
}

// TestKill9 kills a process that is busy logging and checks that every
// acknowledged change survived, and nothing else appeared: what survives
// a kill -9 is everything written, since it is in the kernel.
func TestKill9(t *testing.T) {
	dir := t.TempDir()
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
		cmd.Env = append(os.Environ(), "PERSIST_HELPER=crash", "PERSIST_DIR="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		puts, dels, tried := map[uint64]bool{}, map[uint64]bool{}, map[uint64]bool{}
		sc := bufio.NewScanner(out)
		line := func() {
			f := strings.Fields(sc.Text())
			if len(f) != 2 {
				t.Fatalf("child said %q", sc.Text())
			}
			id, _ := strconv.ParseUint(f[1], 10, 64)
			switch f[0] {
			case "put":
				puts[id] = true
			case "del?":
				tried[id] = true
			default:
				dels[id] = true
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for n := 0; n < 400+round*100 && sc.Scan() && time.Now().Before(deadline); n++ {
			line()
		}
		cmd.Process.Signal(syscall.SIGKILL)
		// The child may have got further than we read: what it said
		// before dying is still in the pipe.
		for sc.Scan() {
			line()
		}
		cmd.Wait()

		l, rec := mustOpen(t, Options{Dir: dir, SegmentSize: 2048})
		got := map[uint64]*record.Job{}
		for _, j := range rec.Jobs {
			got[j.ID] = j
		}
		for id := range puts {
			if !tried[id] && got[id] == nil {
				t.Fatalf("round %d: acknowledged job %d lost", round, id)
			}
			if dels[id] && got[id] != nil {
				t.Fatalf("round %d: deleted job %d came back", round, id)
			}
		}
		for id, j := range got {
			if string(j.Body) != "body "+strconv.FormatUint(id, 10) {
				t.Fatalf("job %d body %q", id, j.Body)
			}
		}
		if len(rec.Problems) > 1 || (len(rec.Problems) == 1 && rec.Problems[0].Kind != TornTail) {
			t.Fatalf("round %d: problems %v", round, rec.Problems)
		}
		l.Close()
	}
}
