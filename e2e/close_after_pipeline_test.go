package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Every command a client sent before it closed the connection runs, also
// when the server was still waiting to answer an earlier one (with -b, a put
// is answered once its record is durable, and a delete after it waits for
// that). Each of closeAfterPipelineClients clients watches a tube of its own
// instead of default, puts jobs a and b and reads their ids, then sends one of
// these pipelines in one write and closes at once:
//   - put-delete: put c, delete a;
//   - reserve-put-delete-delete: reserve (nothing to reserve: it waits until
//     the server sees the close and answers TIMED_OUT), put c, delete a,
//     delete b.
//
// Once the server has closed every client connection, a fresh connection
// peeks every id: exactly the jobs that were not deleted are there (c, and b
// after put-delete), with their bodies. On TCP and on a unix socket, with and
// without -b. On a unix socket the client's close reaches the server as
// EPOLLHUP (both directions shut) and its writes fail with EPIPE; on TCP as a
// FIN, and the first reply that reaches the closed client draws a reset from
// its kernel. The server cannot answer before it sees the close in
// reserve-put-delete-delete, and in put-delete its first reply comes with
// the delete already run, so no client's close can find replies unread (that
// would make the close itself a reset, which drops what has not run).
func TestCloseAfterPipelineRunsEveryCommand(t *testing.T) {
	t.Parallel()
	for _, network := range []string{"tcp", "unix"} {
		for _, binlog := range []bool{false, true} {
			for _, reserveFirst := range []bool{false, true} {
				name := network
				if binlog {
					name += "-binlog"
				}
				if reserveFirst {
					name += "/reserve-put-delete-delete"
				} else {
					name += "/put-delete"
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
					closeAfterPipeline(t, s, reserveFirst)
				})
			}
		}
	}
}

const closeAfterPipelineClients = 32

func closeAfterPipeline(t *testing.T, s *server, reserveFirst bool) {
	ctl := s.dial(t)
	errs := make(chan error, closeAfterPipelineClients)
	var wg sync.WaitGroup
	for i := range closeAfterPipelineClients {
		nc, err := net.DialTimeout(s.network, s.addr, defaultTimeout)
		if err != nil {
			t.Fatalf("dial %s %s: %v", s.network, s.addr, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer nc.Close()
			if err := pipelineThenClose(nc, i, reserveFirst); err != nil {
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
	var want, got []string
	for i := range closeAfterPipelineClients {
		if !reserveFirst {
			want = append(want, closeAfterPipelineBody("b", i))
		}
		want = append(want, closeAfterPipelineBody("c", i))
	}
	for id := 1; id <= 3*closeAfterPipelineClients; id++ {
		mustSend(t, ctl, "peek "+strconv.Itoa(id)+"\r\n")
		line := readLine(t, ctl)
		if line == "NOT_FOUND" {
			continue
		}
		var gotID, n int
		if _, err := fmt.Sscanf(line, "FOUND %d %d", &gotID, &n); err != nil || gotID != id {
			t.Fatalf("peek %d: got %q, want FOUND %d <bytes> or NOT_FOUND", id, line, id)
		}
		body := readN(t, ctl, n+2, defaultTimeout)
		got = append(got, body[:n])
	}
	slices.Sort(want)
	slices.Sort(got)
	var kept, lost []string // jobs a delete should have removed; jobs a put should have left
	for _, b := range got {
		if _, found := slices.BinarySearch(want, b); !found {
			kept = append(kept, b)
		}
	}
	for _, b := range want {
		if _, found := slices.BinarySearch(got, b); !found {
			lost = append(lost, b)
		}
	}
	if len(kept) > 0 {
		t.Errorf("%d deletes sent before the close did not run: jobs %v are still there", len(kept), kept)
	}
	if len(lost) > 0 {
		t.Errorf("jobs %v are missing", lost)
	}
}

func closeAfterPipelineBody(job string, i int) string { return fmt.Sprintf("%s-%02d", job, i) }

// pipelineThenClose watches a tube of its own instead of default, puts jobs
// a and b on nc and reads their ids, then sends the pipeline in one write;
// the caller closes nc right after.
func pipelineThenClose(nc net.Conn, i int, reserveFirst bool) error {
	_ = nc.SetDeadline(time.Now().Add(defaultTimeout))
	put := func(job string) string {
		body := closeAfterPipelineBody(job, i)
		return fmt.Sprintf("put 0 0 60 %d\r\n%s\r\n", len(body), body)
	}
	if _, err := io.WriteString(nc, fmt.Sprintf("watch idle-%02d\r\nignore default\r\n", i)+put("a")+put("b")); err != nil {
		return err
	}
	var got []byte
	var tmp [128]byte
	for bytes.Count(got, []byte("\r\n")) < 4 {
		n, err := nc.Read(tmp[:])
		got = append(got, tmp[:n]...)
		if err != nil {
			return fmt.Errorf("reading the first replies: %w (have %q)", err, got)
		}
	}
	var a, b uint64
	if _, err := fmt.Sscanf(string(got), "WATCHING 2\r\nWATCHING 1\r\nINSERTED %d\r\nINSERTED %d\r\n", &a, &b); err != nil {
		return fmt.Errorf("first replies: got %q, want WATCHING 2, WATCHING 1, INSERTED <a>, INSERTED <b>", got)
	}
	pipeline := put("c") + fmt.Sprintf("delete %d\r\n", a)
	if reserveFirst {
		pipeline = "reserve\r\n" + pipeline + fmt.Sprintf("delete %d\r\n", b)
	}
	_, err := io.WriteString(nc, pipeline)
	return err
}
