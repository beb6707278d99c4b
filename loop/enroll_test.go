package loop

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/beanpole/beanpole/codec"
	"github.com/beanpole/beanpole/engine"
	"github.com/beanpole/beanpole/internal/logbuf"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// startLoops runs a server with the given loops, serving a loopback
// listener, and returns it with the listener's address.
func startLoops(t *testing.T, loops int, log zerolog.Logger) (*Server, string) {
	t.Helper()
	srv, err := New(Config{Loops: loops, MaxJobSize: 65535, Version: "test", Log: log}, engine.New(loops))
	if err != nil {
		t.Fatal(err)
	}
	return srv, serve(t, srv)
}

// waitUntil polls cond for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func sum(ns []int64) (n int64) {
	for _, v := range ns {
		n += v
	}
	return n
}

// blockLoop is a task that holds its event loop until released.
type blockLoop struct {
	started chan<- struct{}
	release <-chan struct{}
}

func (b blockLoop) Run(context.Context) error {
	b.started <- struct{}{}
	<-b.release
	return nil
}

// Connections enrolled while every loop is busy (none can run its
// registrations, so none's count of connections moves) are still spread
// evenly: the loop is chosen counting the enrolments on their way to it.
// It used to be loop 0 for all of them.
func TestEnrolmentsWhileLoopsAreBusyAreSpreadEvenly(t *testing.T) {
	srv, addr := startLoops(t, 2, zerolog.Nop())
	for i := range int64(2) { // one connection on each loop: both have a loopState
		dial(t, addr)
		waitUntil(t, "a connection registered", func() bool { return sum(srv.LoopConnections(nil)) == i+1 })
	}

	started, release := make(chan struct{}), make(chan struct{})
	srv.mu.Lock()
	if len(srv.loops) != 2 {
		srv.mu.Unlock()
		t.Fatalf("%d loops served the first 2 connections, want 2", len(srv.loops))
	}
	for el := range srv.loops {
		if err := el.Execute(context.Background(), blockLoop{started, release}); err != nil {
			t.Fatal(err)
		}
	}
	srv.mu.Unlock()
	<-started
	<-started
	const n = 1000
	peers := make([]int, 0, n)
	t.Cleanup(func() {
		for _, fd := range peers {
			unix.Close(fd)
		}
	})
	for range n {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			close(release)
			t.Fatal(err)
		}
		peers = append(peers, fds[1])
		if err := srv.cli.EnrollFD(fds[0], "unix", nil, nil, nil); err != nil {
			close(release)
			t.Fatal(err)
		}
	}
	close(release)
	waitUntil(t, "every connection registered", func() bool { return sum(srv.LoopConnections(nil)) == 2+n })
	if got := srv.LoopConnections(nil); got[0] != 1+n/2 || got[1] != 1+n/2 {
		t.Fatalf("connections per loop %v; want %d each", got, 1+n/2)
	}
}

// A connection its loop cannot register (epoll_ctl fails; here because the
// descriptor is not a socket, in production at fs.epoll.max_user_watches)
// is counted as refused and logged, at most once a second. It used to be
// closed without a trace.
func TestRegistrationFailureIsCountedAndLogged(t *testing.T) {
	var logs logbuf.Buffer
	srv, _ := startLoops(t, 1, zerolog.New(&logs))
	start := time.Now()
	for range 3 {
		fd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		srv.eng.Accepted(0) // as the acceptor counts it
		if err := srv.cli.EnrollFD(fd, "unix", nil, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "3 refused connections", func() bool { return srv.Refused() == 3 })
	var st codec.ServerStats
	srv.Stats(&st)
	if st.CurrentConnections != 0 || st.TotalConnections != 3 {
		t.Fatalf("current-connections %d total-connections %d after 3 failed registrations, want 0 and 3",
			st.CurrentConnections, st.TotalConnections)
	}
	elapsed := time.Since(start)
	const msg = "closing new connections: the event loop cannot register them"
	if got, most := strings.Count(logs.String(), msg), 1+int(elapsed/time.Second); got < 1 || got > most {
		t.Fatalf("%d log lines %q for 3 failures in %v, want 1 to %d; log:\n%s", got, msg, elapsed, most, logs.String())
	}
	if !strings.Contains(logs.String(), "operation not permitted") {
		t.Fatalf("the log line does not give epoll_ctl's error:\n%s", logs.String())
	}
}
