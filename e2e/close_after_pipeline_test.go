package e2e

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Every command a client sent before it closed the connection runs, also
// when the server was still waiting to answer an earlier one (with -b, a put
// is answered once its record is durable, and a delete after it waits for
// that). Each of closeAfterPipelineClients clients puts a job, reads its id,
// then sends a second put and the delete of its first job in one write and
// closes at once. Once the server has closed every client connection, a
// fresh connection finds each first job deleted (NOT_FOUND) and each second
// job present, with its body. On TCP and on a unix socket, with and without
// -b: on a unix socket the client's close reaches the server as EPOLLHUP
// (both directions shut), on TCP as a FIN.
func TestCloseAfterPipelineRunsEveryCommand(t *testing.T) {
	t.Parallel()
	for _, network := range []string{"tcp", "unix"} {
		for _, binlog := range []bool{false, true} {
			name := network
			if binlog {
				name += "-binlog"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				var extra []string
				if binlog {
					extra = []string{"-b", t.TempDir()}
				}
				var s *server
				if network == "unix" {
					s = startUnixServer(t, shortTempDir(t)+"/sock", extra...)
				} else {
					s = startServer(t, extra...)
				}
				closeAfterPipeline(t, s)
			})
		}
	}
}

const closeAfterPipelineClients = 32

func closeAfterPipeline(t *testing.T, s *server) {
	ctl := s.dial(t)
	first := make([]uint64, closeAfterPipelineClients)
	errs := make(chan error, closeAfterPipelineClients)
	var wg sync.WaitGroup
	for i := range first {
		nc, err := net.DialTimeout(s.network, s.addr, defaultTimeout)
		if err != nil {
			t.Fatalf("dial %s %s: %v", s.network, s.addr, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer nc.Close()
			id, err := putThenDeleteAndClose(nc, i)
			first[i] = id
			if err != nil {
				errs <- fmt.Errorf("client %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Only ctl is left once the server has closed every client: by then
	// each command it read has run.
	waitFor(t, 4*defaultTimeout, "the server closes every client connection", func() bool {
		return stats(t, ctl)["current-connections"] == "1"
	})
	isFirst := map[uint64]int{}
	for i, id := range first {
		isFirst[id] = i
	}
	var kept, lost []int
	seen := map[string]bool{}
	for id := uint64(1); id <= 2*closeAfterPipelineClients; id++ {
		mustSend(t, ctl, "peek "+strconv.FormatUint(id, 10)+"\r\n")
		if i, ok := isFirst[id]; ok {
			if line := readLine(t, ctl); line != "NOT_FOUND" {
				kept = append(kept, i)
				readN(t, ctl, len(closeAfterPipelineBody("first", i))+2, defaultTimeout)
			}
			continue
		}
		line := readLine(t, ctl)
		var gotID uint64
		var n int
		if _, err := fmt.Sscanf(line, "FOUND %d %d", &gotID, &n); err != nil || gotID != id {
			lost = append(lost, int(id))
			continue
		}
		seen[readN(t, ctl, n+2, defaultTimeout)] = true
	}
	if len(kept) > 0 {
		t.Errorf("%d of %d deletes sent before the close did not run (clients %v)", len(kept), closeAfterPipelineClients, kept)
	}
	if len(lost) > 0 {
		t.Errorf("ids %v: no job, want each second put's job", lost)
	}
	for i := range closeAfterPipelineClients {
		if body := closeAfterPipelineBody("second", i) + "\r\n"; !seen[body] {
			t.Errorf("client %d's second job (%q) is missing", i, body)
		}
	}
}

func closeAfterPipelineBody(which string, i int) string { return fmt.Sprintf("%s-%02d", which, i) }

// putThenDeleteAndClose puts a job on nc and reads its id, then sends a
// second put and the delete of the first job in one write; the caller closes
// nc right after.
func putThenDeleteAndClose(nc net.Conn, i int) (uint64, error) {
	_ = nc.SetDeadline(time.Now().Add(defaultTimeout))
	body := closeAfterPipelineBody("first", i)
	if _, err := fmt.Fprintf(nc, "put 0 0 60 %d\r\n%s\r\n", len(body), body); err != nil {
		return 0, err
	}
	var got []byte
	var tmp [64]byte
	for !bytes.HasSuffix(got, []byte("\r\n")) {
		n, err := nc.Read(tmp[:])
		got = append(got, tmp[:n]...)
		if err != nil {
			return 0, fmt.Errorf("reading the reply to the first put: %w (have %q)", err, got)
		}
	}
	var id uint64
	if _, err := fmt.Sscanf(string(got), "INSERTED %d\r\n", &id); err != nil {
		return 0, fmt.Errorf("first put: got %q, want INSERTED <id>", got)
	}
	body = closeAfterPipelineBody("second", i)
	_, err := fmt.Fprintf(nc, "put 0 0 60 %d\r\n%s\r\ndelete %d\r\n", len(body), body, id)
	return id, err
}
