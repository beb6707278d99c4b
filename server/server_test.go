package server

import (
	"bufio"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/beanpole/beanpole/config"
	"github.com/beanpole/beanpole/internal/logbuf"
	"github.com/rs/zerolog"
)

// started is a server started as main starts it (New, then Run), with its
// log and the calls it said it takes.
type started struct {
	s           *Server
	ran         chan int
	log, stderr logbuf.Buffer
	mu          sync.Mutex
	taken       []Call
}

// start starts the server of the command line args.
func start(t *testing.T, args ...string) *started {
	t.Helper()
	cfg, code, done := config.Parse(args, io.Discard, io.Discard)
	if done {
		t.Fatalf("config.Parse: status %d", code)
	}
	st := &started{ran: make(chan int, 1)}
	st.s, code = New(&cfg, Options{Log: zerolog.New(&st.log), Stderr: &st.stderr, Takes: func(c Call) {
		st.mu.Lock()
		st.taken = append(st.taken, c)
		st.mu.Unlock()
	}})
	if st.s == nil {
		t.Fatalf("New: status %d: %s", code, st.stderr.String())
	}
	go func() { st.ran <- st.s.Run() }()
	return st
}

// stop stops the server by the call and checks that Run returns 0 and
// that the server took the calls want.
func (st *started) stop(t *testing.T, want ...Call) {
	t.Helper()
	st.s.Stop("test")
	select {
	case code := <-st.ran:
		if code != 0 {
			t.Fatalf("Run: status %d: %s", code, st.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after Stop")
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if !slices.Equal(st.taken, want) {
		t.Errorf("calls taken: %v, want %v", st.taken, want)
	}
}

// waitForLog polls the log until it holds msg, failing if Run returns
// first.
func (st *started) waitForLog(t *testing.T, msg string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(st.log.String(), msg); {
		select {
		case code := <-st.ran:
			t.Fatalf("Run returned %d before the log said %q:\n%s", code, msg, st.log.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log never said %q:\n%s", msg, st.log.String())
		}
	}
}

// A single server takes Drain and Stop as method calls: puts are refused
// once drained, and Stop ends Run with status 0 and names what asked for
// it in the log. Without TLS files it takes Drain before it serves, Stop
// once it serves, and no Reload (SIGHUP keeps its default action, as
// upstream's).
func TestDrainAndStopAsCalls(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "beanpole.sock")
	st := start(t, "-l", "unix:"+sock)
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
	st.s.Drain()
	for deadline := time.Now().Add(10 * time.Second); ; {
		got := put(t, conn, r)
		if got == "DRAINING\r\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("put after Drain: %q, want DRAINING", got)
		}
	}
	st.stop(t, CallDrain, CallStop)
	if want := `"signal":"test"`; !strings.Contains(st.log.String(), want) {
		t.Errorf("log lacks %s:\n%s", want, st.log.String())
	}
}

// A cluster node takes Reload from New, Drain and Stop once it is open;
// leading, it drains and stops by the calls too.
func TestClusterNodeDrainsAndStopsAsCalls(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	raft := ln.Addr().String()
	ln.Close()
	st := start(t, "-l", "127.0.0.1", "-p", "0", "--cluster-dir", t.TempDir(),
		"--node-id", "n1", "--raft", raft, "--bootstrap", "n1="+raft)
	st.waitForLog(t, "cluster: leading")
	st.s.Drain()
	st.waitForLog(t, "drain mode (SIGUSR1): puts are refused from now on")
	st.stop(t, CallReload, CallDrain, CallStop, CallStop)
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

// A New that fails part way closes what it had bound: the protocol
// listener is free again when the HTTP address cannot be taken.
func TestFailedNewClosesWhatItBound(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(free.Addr().String())
	free.Close()
	cfg, code, done := config.Parse([]string{"-l", "127.0.0.1", "-p", port, "--http", busy.Addr().String()}, io.Discard, io.Discard)
	if done {
		t.Fatalf("config.Parse: status %d", code)
	}
	var stderr logbuf.Buffer
	if s, code := New(&cfg, Options{Log: zerolog.Nop(), Stderr: &stderr}); s != nil || code != config.ExitListen {
		t.Fatalf("New with its HTTP address taken: server %v, status %d, want none and %d", s, code, config.ExitListen)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		t.Fatalf("the protocol port is still held after New failed: %v", err)
	}
	ln.Close()
}

// The heap profile samples allocations only when /debug/pprof/ can serve
// it or GODEBUG sets its rate.
func TestHeapSampledOnlyForPprof(t *testing.T) {
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	for _, tc := range []struct {
		pprof   bool
		godebug string
		want    int
	}{
		{false, "", 0},
		{false, "madvdontneed=1", 0},
		{true, "", 512 << 10},
		{false, "gctrace=1,memprofilerate=1", 512 << 10},
	} {
		runtime.MemProfileRate = 512 << 10
		sampleHeap(tc.pprof, tc.godebug)
		if runtime.MemProfileRate != tc.want {
			t.Errorf("pprof %v, GODEBUG %q: MemProfileRate %d, want %d", tc.pprof, tc.godebug, runtime.MemProfileRate, tc.want)
		}
	}
}
