package server

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/beanpole/beanpole/config"
	"github.com/rs/zerolog"
)

// lockedBuffer is a log a test reads while the server writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A server started as main starts it (New, Run) takes Drain and then Stop
// as method calls: puts are refused once drained, and Stop ends Run with
// status 0 and names what asked for it in the log. A single server
// without TLS files takes Drain before it serves, Stop once it serves, and
// no Reload (SIGHUP keeps its default action, as upstream's).
func TestDrainAndStopAsCalls(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "beanpole.sock")
	cfg, code, done := config.Parse([]string{"-l", "unix:" + sock}, io.Discard, io.Discard)
	if done {
		t.Fatalf("config.Parse: status %d", code)
	}
	var log, stderr lockedBuffer
	var takenMu sync.Mutex
	var taken []Call
	s, code := New(&cfg, Options{Log: zerolog.New(&log), Stderr: &stderr, Takes: func(c Call) {
		takenMu.Lock()
		taken = append(taken, c)
		takenMu.Unlock()
	}})
	if s == nil {
		t.Fatalf("New: status %d: %s", code, stderr.String())
	}
	ran := make(chan int, 1)
	go func() { ran <- s.Run() }()

	// New has bound the socket: the connection waits to be served.
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	if got := put(t, conn, r); got != "INSERTED 1\r\n" {
		t.Fatalf("put: %q", got)
	}
	s.Drain()
	for deadline := time.Now().Add(10 * time.Second); ; {
		got := put(t, conn, r)
		if got == "DRAINING\r\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("put after Drain: %q, want DRAINING", got)
		}
	}
	s.Stop("test")
	select {
	case code := <-ran:
		if code != 0 {
			t.Fatalf("Run: status %d: %s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after Stop")
	}
	if want := `"signal":"test"`; !bytes.Contains([]byte(log.String()), []byte(want)) {
		t.Errorf("log lacks %s:\n%s", want, log.String())
	}
	takenMu.Lock()
	defer takenMu.Unlock()
	if want := []Call{CallDrain, CallStop}; !slices.Equal(taken, want) {
		t.Errorf("calls taken: %v, want %v", taken, want)
	}
}

// put puts a one-byte job and returns the reply line.
func put(t *testing.T, conn net.Conn, r *bufio.Reader) string {
	t.Helper()
	if _, err := conn.Write([]byte("put 0 0 10 1\r\nx\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return line
}
