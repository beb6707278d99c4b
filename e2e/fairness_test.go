package e2e

import (
	"bytes"
	"io"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"
)

// One connection pipelining a long run of commands does not hold up the
// other connections of its event loop: a loop does a bounded amount of
// one connection's work per pass, then serves the others before it comes
// back for the rest. Here a single loop (GOMAXPROCS=1) serves a client
// that sends 20,000 commands in one write and another that measures round
// trips meanwhile; those stay short (it used to wait for the whole run,
// 65 ms at the median), and the first still gets every reply, in order.
func TestPipelinedRunDoesNotStallOtherClients(t *testing.T) {
	skipUnlessBeanpole(t, "the event loops are beanpole's")
	t.Setenv("GOMAXPROCS", "1") // one event loop serves both clients
	const n = 20000
	for _, tc := range []struct {
		name            string
		command, answer func(i int) string
	}{
		{"watch", func(i int) string { return "watch t" + strconv.Itoa(i) + "\r\n" },
			func(i int) string { return "WATCHING " + strconv.Itoa(i+2) + "\r\n" }},
		{"put", func(int) string { return "put 0 0 60 1\r\nx\r\n" },
			func(i int) string { return "INSERTED " + strconv.Itoa(i+1) + "\r\n" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t)
			busy, other := s.dial(t), s.dial(t)
			mustSend(t, other, "use x\r\n")
			expect(t, other, "USING x\r\n")

			var script, want bytes.Buffer
			for i := range n {
				script.WriteString(tc.command(i))
				want.WriteString(tc.answer(i))
			}
			got := make([]byte, want.Len())
			done := make(chan error, 2)
			go func() {
				_, err := busy.nc.Write(script.Bytes())
				if err != nil {
					done <- err
				}
			}()
			go func() {
				_ = busy.nc.SetReadDeadline(time.Now().Add(60 * time.Second))
				_, err := io.ReadFull(busy.nc, got)
				done <- err
			}()

			var rtts []time.Duration
			start := time.Now()
		measure:
			for {
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("pipelining %d %s commands: %v", n, tc.name, err)
					}
					break measure
				default:
				}
				t0 := time.Now()
				mustSend(t, other, "use x\r\n")
				expect(t, other, "USING x\r\n")
				rtts = append(rtts, time.Since(t0))
			}
			took := time.Since(start)
			if !bytes.Equal(got, want.Bytes()) {
				i := firstDiff(got, want.Bytes())
				t.Fatalf("the pipelined replies differ from byte %d: got %q, want %q", i,
					got[i:min(len(got), i+40)], want.Bytes()[i:min(want.Len(), i+40)])
			}
			slices.Sort(rtts)
			p50, p90 := rtts[len(rtts)/2], rtts[len(rtts)*9/10]
			t.Logf("%d %s commands answered in %v; meanwhile %d round trips of the other client, p50 %v, p90 %v, max %v",
				n, tc.name, took, len(rtts), p50, p90, rtts[len(rtts)-1])
			// Loose bounds for a loaded machine; the run itself lasts from
			// tens of milliseconds (put) to seconds (watch, each one scanning
			// the growing watch list).
			if !raceSkipsBound(t, "round-trip latency") && (p50 > 10*time.Millisecond || p90 > 50*time.Millisecond) {
				t.Fatalf("round trips of another client on the loop: p50 %v, p90 %v while one client's %d %s commands ran; want < 10ms, < 50ms",
					p50, p90, n, tc.name)
			}
		})
	}
}

// A client that pipelines a long run of commands and half-closes gets
// every reply, then the close, even though the run is served a slice at a
// time with its reads paused in between.
func TestHalfCloseAfterLongRunGetsEveryReply(t *testing.T) {
	skipUnlessBeanpole(t, "the event loops are beanpole's")
	t.Parallel()
	s := startServer(t)
	c := s.dial(t)
	const n = 50000
	go func() {
		_, _ = c.nc.Write(bytes.Repeat([]byte("list-tube-used\r\n"), n))
		_ = c.nc.(*net.TCPConn).CloseWrite()
	}()
	want := bytes.Repeat([]byte("USING default\r\n"), n)
	got := make([]byte, len(want))
	_ = c.nc.SetReadDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.ReadFull(c.nc, got); err != nil {
		t.Fatalf("reading %d replies: %v", n, err)
	}
	if !bytes.Equal(got, want) {
		i := firstDiff(got, want)
		t.Fatalf("the replies differ from byte %d: got %q, want %q", i, got[i:min(len(got), i+40)], want[i:min(len(want), i+40)])
	}
	expectClosed(t, c)
}

// firstDiff is the offset of the first byte where a and b differ.
func firstDiff(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}
