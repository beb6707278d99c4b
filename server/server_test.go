package server

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
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
	if want := `"signal":"test"`; !strings.Contains(log.String(), want) {
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

// A cluster node started as main starts it takes Reload from New, Drain
// and Stop once it is open; leading, it drains and stops by the calls too.
func TestClusterNodeDrainsAndStopsAsCalls(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	raft := ln.Addr().String()
	ln.Close()
	cfg, code, done := config.Parse([]string{"-l", "127.0.0.1", "-p", "0", "--cluster-dir", t.TempDir(),
		"--node-id", "n1", "--raft", raft, "--bootstrap", "n1=" + raft}, io.Discard, io.Discard)
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
	waitForLog(t, &log, "cluster: leading", ran)
	s.Drain()
	waitForLog(t, &log, "drain mode (SIGUSR1): puts are refused from now on", ran)
	s.Stop("test")
	select {
	case code := <-ran:
		if code != 0 {
			t.Fatalf("Run: status %d: %s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after Stop")
	}
	takenMu.Lock()
	defer takenMu.Unlock()
	if want := []Call{CallReload, CallDrain, CallStop, CallStop}; !slices.Equal(taken, want) {
		t.Errorf("calls taken: %v, want %v", taken, want)
	}
}

// waitForLog polls the log until it holds msg, failing if Run returns
// first.
func waitForLog(t *testing.T, log *lockedBuffer, msg string, ran <-chan int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(log.String(), msg); {
		select {
		case code := <-ran:
			t.Fatalf("Run returned %d before the log said %q:\n%s", code, msg, log.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log never said %q:\n%s", msg, log.String())
		}
	}
}
