// Command floor is the loopback floor for the round-trip scenario: a gnet
// server that answers put, reserve and delete with the least work that still
// satisfies the benchmark's checks: one mutex-guarded FIFO of jobs, no tubes,
// priorities, reservations or timers.
//
// It is a measuring stick, not a server: run the benchmark with
// `-beanstalkd bin/floor -only roundtrip` and the ratio column shows how
// close beanpole gets to what gnet and the kernel allow on this machine.
// It only understands the roundtrip, pipeline and idle scenarios' commands.
// For idle it is gnet's own accept path against beanpole's: gnet's main
// reactor accepting for the event loops, or with -reuseport one listener
// per loop.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"
)

var (
	totalJobs atomic.Uint64
	conns     atomic.Int64 // open connections, for stats' current-connections
	mu        sync.Mutex
	queue     []job
)

type job struct {
	id   uint64
	body []byte
}

type floor struct {
	gnet.BuiltinEventEngine
}

// OnOpen gives each connection a reply buffer of its own, reused for every
// batch, so the floor allocates only the job bodies it must keep.
func (*floor) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	conns.Add(1)
	c.SetContext(&replies{})
	return nil, gnet.None
}

func (*floor) OnClose(gnet.Conn, error) gnet.Action {
	conns.Add(-1)
	return gnet.None
}

type replies struct{ buf []byte }

func (*floor) OnTraffic(c gnet.Conn) gnet.Action {
	r := c.Context().(*replies)
	out := r.buf[:0]
	for {
		buf, _ := c.Peek(-1)
		eol := bytes.Index(buf, []byte("\r\n"))
		if eol < 0 {
			break
		}
		line := buf[:eol]
		used := eol + 2
		switch {
		case bytes.HasPrefix(line, []byte("put ")):
			sp := bytes.LastIndexByte(line, ' ')
			n, err := strconv.Atoi(string(line[sp+1:]))
			if err != nil {
				return gnet.Close
			}
			if len(buf) < used+n+2 {
				goto flush // wait for the rest of the body
			}
			j := job{id: totalJobs.Add(1), body: bytes.Clone(buf[used : used+n])}
			used += n + 2
			mu.Lock()
			queue = append(queue, j)
			mu.Unlock()
			out = strconv.AppendUint(append(out, "INSERTED "...), j.id, 10)
			out = append(out, "\r\n"...)
		case bytes.Equal(line, []byte("reserve")):
			mu.Lock()
			if len(queue) == 0 {
				mu.Unlock()
				return gnet.Close // the scenarios never reserve from an empty queue
			}
			j := queue[0]
			queue = queue[1:]
			mu.Unlock()
			out = strconv.AppendUint(append(out, "RESERVED "...), j.id, 10)
			out = strconv.AppendInt(append(out, ' '), int64(len(j.body)), 10)
			out = append(append(append(out, "\r\n"...), j.body...), "\r\n"...)
		case bytes.HasPrefix(line, []byte("delete ")):
			out = append(out, "DELETED\r\n"...)
		case bytes.Equal(line, []byte("list-tube-used")):
			out = append(out, "USING default\r\n"...)
		case bytes.Equal(line, []byte("stats")):
			mu.Lock()
			ready := len(queue)
			mu.Unlock()
			y := fmt.Appendf(nil, "---\ncurrent-jobs-ready: %d\ncurrent-jobs-reserved: 0\ncurrent-connections: %d\ntotal-jobs: %d\npid: %d\n", ready, conns.Load(), totalJobs.Load(), os.Getpid())
			out = fmt.Appendf(out, "OK %d\r\n%s\r\n", len(y), y)
		default:
			out = append(out, "UNKNOWN_COMMAND\r\n"...)
		}
		_, _ = c.Discard(used)
	}
flush:
	if len(out) > 0 {
		_, _ = c.Write(out) // written or copied by gnet: out can be reused
	}
	r.buf = out
	return gnet.None
}

func main() {
	addr := flag.String("l", "0.0.0.0", "listen address")
	port := flag.Int("p", 11300, "port")
	version := flag.Bool("v", false, "print the version")
	reusePort := flag.Bool("reuseport", false, "accept on one SO_REUSEPORT listener per event loop instead of gnet's main reactor")
	flag.Int("z", 65535, "ignored")
	flag.Parse()
	if *version {
		fmt.Println("floor 0")
		return
	}
	err := gnet.Run(&floor{}, fmt.Sprintf("tcp4://%s:%d", *addr, *port),
		gnet.WithMulticore(true), gnet.WithNumEventLoop(runtime.GOMAXPROCS(0)), gnet.WithReuseAddr(true),
		gnet.WithReusePort(*reusePort))
	if err != nil && err != context.Canceled {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
