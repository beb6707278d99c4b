package e2e

// Flow control as C beanstalkd has it: a connection whose input cannot be
// processed yet (its reserve waits, its replies back up past the
// high-water mark) is not read any more, so the kernel's buffers fill and
// TCP's window holds the client back. Nothing is closed, nothing is lost,
// and the server's memory stays bounded however much the client sends.

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// heldBackStall is how long a write may block before the flood counts as
// held back. Once the server stops reading, the loopback kernel buffers
// fill in milliseconds and every further write blocks for good.
const heldBackStall = 2 * time.Second

// expectFloodHeldBack writes chunk to c until a write blocks for
// heldBackStall, and fails if the server closes the connection instead or
// keeps taking more than it may read plus what the kernel can buffer. It
// returns the bytes written (the last write may have been partial).
func expectFloodHeldBack(t testing.TB, c *conn, chunk []byte) int {
	t.Helper()
	limit := floodReadBound + kernelBuffering(t)
	sent := 0
	for sent <= limit {
		_ = c.nc.SetWriteDeadline(time.Now().Add(heldBackStall))
		k, err := c.nc.Write(chunk)
		sent += k
		if isTimeout(err) {
			_ = c.nc.SetWriteDeadline(time.Time{})
			t.Logf("held back after %d KiB", sent>>10)
			return sent
		}
		if err != nil {
			t.Fatalf("after %d KiB the server closed the connection (%v) instead of not reading it", sent>>10, err)
		}
	}
	t.Fatalf("wrote %d MiB and the server still takes them: more than it may read plus the %d MiB the kernel can buffer",
		sent>>20, kernelBuffering(t)>>20)
	return 0
}

// A client parked in reserve that keeps sending commands is held back by
// TCP instead of being buffered (or closed): the server reads at most one
// chunk past what it had, its memory stays flat, and once the reserve is
// answered every command sent runs, in order.
func TestParkedClientIsHeldBackByTCP(t *testing.T) {
	skipUnlessBeanpole(t, "the bound on what the server reads is beanpole's")
	t.Parallel()
	s := startServer(t)
	c, other := s.dial(t), s.dial(t)
	sent := floodOneParked(t, s.pid(), c, other)

	// Complete a command cut by the last write, then answer the reserve:
	// every command sent must now run, in order.
	go func() {
		if rest := sent % len(listUsed); rest != 0 {
			_, _ = io.WriteString(c.nc, listUsed[rest:])
		}
	}()
	n := (sent + len(listUsed) - 1) / len(listUsed)
	put(t, other, 0, 0, 60, "job", 1)
	expect(t, c, "RESERVED 1 3\r\njob\r\n")
	expectRepeated(t, c, []byte(usingDflt), n, 60*time.Second)
	roundTrip(t, c, defaultTimeout)
}

// floodOneParked parks c in reserve, then floods it with commands until TCP
// holds it back, and checks that the server read at most a chunk past
// what it had, that its RSS stayed flat, and that other still gets its
// round trip. It returns the bytes written.
func floodOneParked(t *testing.T, pid int, c, other *conn) int {
	t.Helper()
	rss0 := procStatusKB(t, pid, "VmRSS")
	mustSend(t, c, "reserve\r\n")
	waitWaiting(t, other, 1)
	read0, ok0 := procReadBytes(t, pid)

	sent := expectFloodHeldBack(t, c, []byte(strings.Repeat(listUsed, 4096)))
	expectFloodReadBounded(t, pid, read0, ok0)
	peak := procStatusKB(t, pid, "VmHWM") - rss0
	t.Logf("server RSS peak +%d kB", peak)
	if limit := int64(32 << 10); !raceSkipsBound(t, "the RSS bound") && peak > limit {
		t.Fatalf("server RSS peaked %d kB above its start (limit %d kB)", peak, limit)
	}
	roundTrip(t, other, defaultTimeout)
	return sent
}

// A slow reader is served at its own pace, never reset: one goroutine
// pipelines 200 peeks of a 60,000-byte job and then 5 MiB of cheap
// commands (more than the input cap, so the old close-on-flood would have
// struck), another reads 64 KiB every 10 ms. Every reply arrives, in
// order, and the server's memory stays bounded.
// It runs in every binlog mode: peeks have no records, but with -b the
// put before them waits for its own.
func TestSlowReaderIsServedNotReset(t *testing.T) {
	skipUnlessBeanpole(t, "the memory bound is beanpole's")
	t.Parallel()
	for _, mode := range []struct {
		name  string
		flags []string
	}{
		{"no-binlog", nil},
		{"f0", []string{"-f0"}},
		{"f50", []string{"-f50"}},
		{"F", []string{"-F"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			flags := mode.flags
			if flags != nil {
				flags = append([]string{"-b", t.TempDir()}, flags...)
			}
			slowReaderIsServed(t, startServer(t, flags...))
		})
	}
}

func slowReaderIsServed(t *testing.T, s *server) {
	pid := s.pid()
	c, other := s.dial(t), s.dial(t)
	body := pattern(60000)
	put(t, c, 0, 0, 60, string(body), 1)
	rss0 := procStatusKB(t, pid, "VmRSS")

	const peeks = 200
	cheap := (5 << 20) / len(listUsed)
	go func() {
		_ = c.nc.SetWriteDeadline(time.Now().Add(2 * time.Minute))
		_, _ = io.WriteString(c.nc, strings.Repeat("peek 1\r\n", peeks))
		_, _ = io.WriteString(c.nc, strings.Repeat(listUsed, cheap))
	}()

	one := "FOUND 1 60000\r\n" + string(body) + "\r\n"
	want := strings.Repeat(one, peeks) + strings.Repeat(usingDflt, cheap)
	got := make([]byte, 0, len(want))
	buf := make([]byte, 64<<10)
	deadline := time.Now().Add(2 * time.Minute)
	for len(got) < len(want) {
		_ = c.nc.SetReadDeadline(deadline)
		k, err := c.nc.Read(buf)
		got = append(got, buf[:k]...)
		if err != nil {
			t.Fatalf("after %d of %d bytes: %v", len(got), len(want), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !bytes.Equal(got, []byte(want)) {
		t.Fatalf("the replies differ from what was asked for%s", diffMsg(want, string(got)))
	}
	peak := procStatusKB(t, pid, "VmHWM") - rss0
	t.Logf("%d bytes read slowly; server RSS peak +%d kB", len(got), peak)
	if limit := int64(64 << 10); !raceSkipsBound(t, "the RSS bound") && peak > limit {
		t.Fatalf("server RSS peaked %d kB above its start (limit %d kB)", peak, limit)
	}
	roundTrip(t, other, defaultTimeout)
	roundTrip(t, c, defaultTimeout)
}

// Producers that pipeline big puts are served, never reset, whatever the
// binlog mode: 10 connections each write 100 puts of 64 KiB in one go (or
// 8 of 1 MiB) and read their replies only afterwards. Every put is
// answered INSERTED, in order, and every job is there.
func TestPipeliningProducersAreNotReset(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		flags      []string
		size, puts int
	}{
		{"no-binlog", nil, 65535, 100},
		{"f0", []string{"-f0"}, 65535, 100},
		{"f50", []string{"-f50"}, 65535, 100},
		{"F", []string{"-F"}, 65535, 100},
		{"f0-1MiB", []string{"-f0", "-z", "1100000"}, 1 << 20, 8},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			flags := tc.flags
			if flags != nil {
				flags = append([]string{"-b", t.TempDir()}, flags...)
			} else if tc.size > 65535 {
				flags = []string{"-z", "1100000"}
			}
			s := startServer(t, flags...)
			const conns = 10
			body := strings.Repeat("p", tc.size)
			cmd := "put 0 0 60 " + itoa(tc.size) + "\r\n" + body + "\r\n"
			errs := make(chan error, conns)
			for range conns {
				c := s.dial(t)
				go func() {
					_ = c.nc.SetWriteDeadline(time.Now().Add(time.Minute))
					_, err := io.WriteString(c.nc, strings.Repeat(cmd, tc.puts))
					errs <- err
				}()
				var last uint64
				for i := range tc.puts {
					line := readLineWithin(t, c, time.Minute)
					id, ok := strings.CutPrefix(line, "INSERTED ")
					n, err := strconv.ParseUint(id, 10, 64)
					if !ok || err != nil || n <= last {
						t.Fatalf("put %d: %s, want INSERTED with an id above %d", i+1, show(line), last)
					}
					last = n
				}
			}
			for range conns {
				if err := <-errs; err != nil {
					t.Fatalf("writing the puts: %v", err)
				}
			}
			if st := stats(t, s.dial(t)); st["current-jobs-ready"] != itoa(conns*tc.puts) {
				t.Fatalf("current-jobs-ready %s, want %d", st["current-jobs-ready"], conns*tc.puts)
			}
		})
	}
}

// A thousand connections each parked in reserve and flooding the server
// with commands, never reading (the way to pin memory that the issue about
// flow control found: 1,000 such clients took RSS to 3.5 GB). Each is read
// at most once past its reserve, so the server holds at most one read
// (256 KiB) of input per connection, and all waiting connections together
// hold no more than the input budget: past it, the connection that would
// cross it is closed. Another client's round trip stays fast throughout.
func TestThousandParkedFloodersStayBounded(t *testing.T) {
	skipUnlessBeanpole(t, "the bound on what the server reads is beanpole's")
	const conns = 1000
	t.Run("1 GiB budget", func(t *testing.T) {
		// Each holds at most one read: 256 KiB, plus its connection state.
		t.Setenv("BEANPOLE_INPUT_BUDGET_MB", "1024")
		grown, closed := floodParked(t, conns)
		if limit := int64(conns * (256 + 16)); !raceSkipsBound(t, "the RSS bound") && grown > limit {
			t.Fatalf("server RSS grew %d kB with %d parked flooders (limit %d kB)", grown, conns, limit)
		}
		if closed != 0 {
			t.Fatalf("%d of %d parked flooders closed within a 1 GiB input budget", closed, conns)
		}
	})
	t.Run("16 MiB budget", func(t *testing.T) {
		t.Setenv("BEANPOLE_INPUT_BUDGET_MB", "16")
		grown, closed := floodParked(t, conns)
		if limit := int64(16<<10 + conns*16); !raceSkipsBound(t, "the RSS bound") && grown > limit {
			t.Fatalf("server RSS grew %d kB with %d parked flooders and a 16 MiB input budget (limit %d kB)", grown, conns, limit)
		}
		if closed == 0 {
			t.Fatalf("all %d parked flooders kept with a 16 MiB input budget", conns)
		}
	})
}

// floodParked parks conns connections in reserve, each followed by 512 KiB
// of commands written until TCP holds it back, and reports how much the
// server's RSS grew (kB) and how many of them it closed.
func floodParked(t *testing.T, conns int) (grown int64, closed int) {
	s := startServer(t)
	pid := s.pid()
	other := s.dial(t)
	rss0 := procStatusKB(t, pid, "VmRSS")
	flood := []byte("reserve\r\n" + strings.Repeat(listUsed, (512<<10)/len(listUsed)))
	cs := make([]*conn, conns)
	for i := range cs {
		cs[i] = s.dial(t)
	}
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Write until TCP holds the client back; the rest is dropped.
			_ = c.nc.SetWriteDeadline(time.Now().Add(3 * time.Second))
			_, _ = c.nc.Write(flood)
		}()
	}
	wg.Wait()
	// Which did the server close? Those whose read ends (EOF or reset):
	// a parked reserve sends nothing. How many is read from the server,
	// not from how long the others stay silent: once every flooder it kept
	// is parked in reserve, and as many reads have ended as it closed.
	var n atomic.Int64
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b [1]byte
			if _, err := c.nc.Read(b[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
				n.Add(1)
			}
		}()
	}
	waitFor(t, 30*time.Second, "every flooder parked in reserve or closed, and seen closed", func() bool {
		st := stats(t, other)
		kept, _ := strconv.Atoi(st["current-connections"])
		kept-- // other
		closed = conns - kept
		return st["current-waiting"] == itoa(kept) && n.Load() == int64(closed)
	})
	for _, c := range cs { // the reads still waiting
		_ = c.nc.SetReadDeadline(time.Now())
	}
	wg.Wait()
	if got := int(n.Load()); got != closed {
		t.Fatalf("%d flooders' connections ended; the server counts %d closed", got, closed)
	}
	rtt := roundTrip(t, other, defaultTimeout)
	grown = procStatusKB(t, pid, "VmRSS") - rss0
	t.Logf("%d parked flooders (%d closed): server RSS +%d kB (%d B a connection); another client's round trip %v",
		conns, closed, grown, grown<<10/int64(conns), rtt)
	return grown, closed
}
