package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// perfPath is the perf binary when present: it counts the servers' fsync
// and fdatasync calls (tracepoints syscalls:sys_enter_*), which nothing
// in /proc does.
var perfPath, _ = exec.LookPath("perf")

// fsyncCounter counts the fsync and fdatasync calls of a set of processes
// (all their threads, also those started later) during one window, with
// "perf stat" started with its events disabled and driven through its
// control pipe.
type fsyncCounter struct {
	cmd      *exec.Cmd
	ctl, ack *os.File // perf's control pipe and the read end of its answers
	out      bytes.Buffer
	enabled  bool
	finished bool
	n        int64
	err      error
}

// startFsyncCounter attaches perf to pids and waits until it answers on
// its control pipe, so that a later enable is not lost.
func startFsyncCounter(pids []int) (*fsyncCounter, error) {
	if perfPath == "" {
		return nil, errors.New("no perf binary")
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	ackR, ackW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, err
	}
	ps := make([]string, len(pids))
	for i, p := range pids {
		ps[i] = strconv.Itoa(p)
	}
	f := &fsyncCounter{ctl: ctlW, ack: ackR}
	// fds 3 and 4 in perf: ExtraFiles[0] and [1].
	f.cmd = exec.Command(perfPath, "stat", "-x,", "-D", "-1", "--control", "fd:3,4",
		"-e", "syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync", "-p", strings.Join(ps, ","))
	f.cmd.ExtraFiles = []*os.File{ctlR, ackW}
	f.cmd.Stdout, f.cmd.Stderr = &f.out, &f.out
	f.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = f.cmd.Start()
	ctlR.Close()
	ackW.Close()
	if err != nil {
		ctlW.Close()
		ackR.Close()
		return nil, err
	}
	acked := make(chan error, 1)
	go func() {
		_, err := bufio.NewReader(ackR).ReadString('\n')
		acked <- err
		_, _ = io.Copy(io.Discard, ackR) // the answers to enable
	}()
	if _, err = ctlW.WriteString("ping\n"); err == nil {
		select {
		case err = <-acked:
		case <-time.After(10 * time.Second):
			err = errors.New("no answer within 10s")
		}
	}
	if err != nil {
		f.close()
		return nil, fmt.Errorf("perf stat: %v: %s", err, strings.TrimSpace(f.out.String()))
	}
	return f, nil
}

// enable starts counting, once: it reports whether this call did. It
// does not wait (it runs in the epoll loop).
func (f *fsyncCounter) enable() bool {
	if f == nil || f.enabled {
		return false
	}
	f.enabled = true
	_, _ = f.ctl.WriteString("enable\n")
	return true
}

// finish ends the count: perf prints its totals when interrupted.
func (f *fsyncCounter) finish() {
	if f != nil && f.enabled && !f.finished {
		f.finished = true
		_ = f.cmd.Process.Signal(syscall.SIGINT)
	}
}

// count returns the calls counted between enable and finish; ok is false
// without a count.
func (f *fsyncCounter) count() (n int64, ok bool) {
	if f == nil || !f.finished {
		return 0, false
	}
	if f.cmd.ProcessState == nil {
		_ = f.cmd.Wait() // perf ends by the SIGINT it got
		f.n, f.err = parsePerfCounts(f.out.String())
		if f.err != nil {
			fmt.Fprintf(os.Stderr, "bench: counting fsyncs: %v: %s\n", f.err, oneLine(f.out.String()))
		}
	}
	return f.n, f.err == nil
}

func (f *fsyncCounter) close() {
	if f == nil {
		return
	}
	f.ctl.Close()
	f.ack.Close()
	if f.cmd.ProcessState == nil {
		_ = syscall.Kill(-f.cmd.Process.Pid, syscall.SIGKILL)
		_ = f.cmd.Wait()
	}
}

// parsePerfCounts sums the counts of perf stat -x, output (lines
// "COUNT,UNIT,EVENT,...", among perf's own messages).
func parsePerfCounts(out string) (int64, error) {
	var total int64
	seen := 0
	for _, ln := range strings.Split(out, "\n") {
		f := strings.Split(ln, ",")
		if len(f) < 3 || !strings.HasPrefix(f[2], "syscalls:sys_enter_") {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q is not a count", f[2], f[0])
		}
		total += n
		seen++
	}
	if seen != 2 {
		return 0, errors.New("no fsync counts in perf's output")
	}
	return total, nil
}

var warned = map[string]bool{}

// warnOnce prints a warning the first time it is given.
func warnOnce(format string, args ...any) {
	if s := fmt.Sprintf(format, args...); !warned[s] {
		warned[s] = true
		fmt.Fprint(os.Stderr, s)
	}
}
