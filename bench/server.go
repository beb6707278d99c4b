package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Contender is one server binary under test.
type Contender struct {
	Name string // "beanpole" or "beanstalkd"
	Path string
	// Cluster: run the binary as a group of beanpole nodes (StartCluster)
	// instead of one server: Nodes of them (clusterNodes when 0). Groups,
	// when above 0, is their --groups, and Replicas, when above 0, their
	// --replicas.
	Cluster                 bool
	Nodes, Groups, Replicas int
	// TLS: serve TLS as well (StartTLS); Stunnel: by stunnel in front of
	// the binary (C beanstalkd) rather than by the binary itself.
	TLS, Stunnel bool
	// CPU, when above 0, is the cores each process of the contender (the
	// server, each node of a cluster, stunnel) may use: each runs in a CPU
	// cgroup of its own with that quota (confine).
	CPU float64
}

// Server is a running server process started by the benchmark.
type Server struct {
	Name   string
	Port   int
	Pid    int
	Args   []string
	NoFile uint64 // soft RLIMIT_NOFILE of the running process
	// TLSPort, when not 0, serves the protocol over TLS: beanpole's
	// --tls-listen, or stunnel in front of beanstalkd (in group).
	TLSPort int
	// threadPerConn: the process runs a thread per connection (stunnel),
	// whose CPU leaves the per-thread schedstat figures when the thread
	// exits; CPU reads the whole process's ticks instead.
	threadPerConn bool
	// group are the other nodes of a cluster whose leader this is: they
	// are stopped with it, and their CPU counts as its.
	group  []*Server
	fsyncs *fsyncCounter // counts the fsyncs of a measured window, or nil
	// jobsBefore are the jobs StartCluster's probes put (and deleted),
	// which total-jobs counts beside a run's own.
	jobsBefore int64
	// dataLeads, in a cluster of many groups, is the most data groups
	// one node leads once the leads are spread.
	dataLeads int

	cmd     *exec.Cmd
	stderr  *tailBuf
	done    chan struct{}
	waitErr error
	stopped bool
}

// errNoStart marks a server that exited or never listened; scenarios that
// may legitimately be unsupported (binlog) report it as n/a.
var errNoStart = errors.New("server did not start")

var (
	procMu   sync.Mutex
	procs    = map[*Server]bool{}
	tempDirs = map[string]bool{}
)

// registerTemp remembers a directory to remove at exit.
func registerTemp(dir string) {
	procMu.Lock()
	tempDirs[dir] = true
	procMu.Unlock()
}

func removeTemp(dir string) {
	os.RemoveAll(dir)
	procMu.Lock()
	delete(tempDirs, dir)
	procMu.Unlock()
}

// cleanupAll kills every server still running and removes temp dirs. It is
// safe to call from a signal handler goroutine and more than once.
func cleanupAll() {
	procMu.Lock()
	defer procMu.Unlock()
	for s := range procs {
		s.kill()
	}
	for d := range tempDirs {
		os.RemoveAll(d)
	}
	tempDirs = map[string]bool{}
}

// usedPorts are the server ports handed out by this process: a new server
// never gets a port whose old connections may still linger in TIME_WAIT.
var usedPorts = map[int]bool{}

func reservedPort(p int) bool {
	procMu.Lock()
	defer procMu.Unlock()
	return usedPorts[p]
}

// freePort asks the kernel for an unused loopback port.
func freePort() (int, error) {
	for i := 0; ; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		procMu.Lock()
		fresh := !usedPorts[p]
		usedPorts[p] = true
		procMu.Unlock()
		if fresh || i > 100 {
			return p, nil
		}
	}
}

// StartServer starts ct on a free loopback port with extra flags and waits
// until it accepts connections.
func StartServer(ct Contender, extra []string, pinCPU int, nofile uint64) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{"-l", "127.0.0.1", "-p", strconv.Itoa(port)}, extra...)
	s, err := spawn(ct.Name, ct.Path, args, pinCPU, nofile, ct.CPU)
	if err != nil {
		return nil, err
	}
	s.Port = port
	if err := s.waitListen(port); err != nil {
		return nil, err
	}
	return s, nil
}

// spawn starts path with args as the process of a Server: in its own
// process group, killed if this process dies, pinned to pinCPU (>= 0),
// with the open-file limit nofile, and, when cores is above 0, in a CPU
// cgroup of its own limited to cores (confine).
func spawn(name, path string, args []string, pinCPU int, nofile uint64, cores float64) (*Server, error) {
	prog, argv := path, args
	if pinCPU >= 0 && tasksetPath != "" {
		prog = tasksetPath
		argv = append([]string{"-c", strconv.Itoa(pinCPU), path}, args...)
	}
	cmd := exec.Command(prog, argv...)
	tb := &tailBuf{max: 8192}
	cmd.Stdout = tb
	cmd.Stderr = tb
	cmd.Env = os.Environ()
	// Own process group (a terminal ^C reaches only us; we kill the server),
	// and SIGKILL if we die. The main goroutine is locked to the main
	// thread, which lives as long as the process, so Pdeathsig is reliable.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	s := &Server{Name: name, Args: args, cmd: cmd, stderr: tb, done: make(chan struct{})}
	procMu.Lock()
	err := cmd.Start()
	if err == nil {
		procs[s] = true
	}
	procMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("%s: start %s: %w", name, path, err)
	}
	s.Pid = cmd.Process.Pid
	uncgroup := func() {}
	if cores > 0 {
		if uncgroup, err = confine(s.Pid, cores); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			procMu.Lock()
			delete(procs, s)
			procMu.Unlock()
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	go func() {
		s.waitErr = cmd.Wait()
		uncgroup()
		close(s.done)
	}()
	// Belt and braces: the child inherits our raised limit, but set it
	// explicitly too (C beanstalkd never raises it itself).
	if nofile > 0 {
		lim := unix.Rlimit{Cur: nofile, Max: nofile}
		_ = unix.Prlimit(s.Pid, unix.RLIMIT_NOFILE, &lim, nil)
	}
	if pinCPU >= 0 && tasksetPath == "" {
		pinPid(s.Pid, pinCPU)
	}
	return s, nil
}

// waitListen waits until s accepts connections on 127.0.0.1:port; if it
// exits or does not listen within 10 s, it is stopped and the error wraps
// errNoStart.
func (s *Server) waitListen(port int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-s.done:
			s.Stop()
			return fmt.Errorf("%w: %s %s exited (%v): %s", errNoStart, s.Name, strings.Join(s.Args, " "), s.waitErr, s.stderr.String())
		default:
		}
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 200*time.Millisecond)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("%w: %s did not listen on 127.0.0.1:%d within 10s: %s", errNoStart, s.Name, port, s.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.NoFile = readNofile(s.Pid)
	return nil
}

// clusterNodes is the size of the group StartCluster starts unless the
// contender names another.
const clusterNodes = 3

// StartCluster starts ct as a group of ct.Nodes (or clusterNodes) nodes on
// loopback, each with --cluster-dir in dir and its own client, raft and
// HTTP ports, and with ct.Groups, --groups (and ct.Replicas' --replicas)
// and a token for /cluster/groups. It returns a
// node with the other nodes in its group once the cluster serves: the
// leader, whose /readyz answers 200, or, with groups, the first node once
// every node's /readyz does and the leads have stayed spread, with the
// same leaders in the same terms, for leadsSettle (leadsSpread); and
// either way once a put to a tube of every data group has succeeded
// through every node (probeGroups). A node that does not start makes the
// cluster n/a (errNoStart); one that dies, or no leader, is a failure.
func StartCluster(ct Contender, dir string, pinCPU int, nofile uint64) (*Server, error) {
	count := ct.Nodes
	if count == 0 {
		count = clusterNodes
	}
	var raft, web, boot []string
	for i := range count {
		rp, err := freePort()
		if err != nil {
			return nil, err
		}
		hp, err := freePort()
		if err != nil {
			return nil, err
		}
		raft = append(raft, "127.0.0.1:"+strconv.Itoa(rp))
		web = append(web, "127.0.0.1:"+strconv.Itoa(hp))
		boot = append(boot, fmt.Sprintf("n%d=%s", i+1, raft[i]))
	}
	var groupFlags []string
	token := "bench-" + strconv.Itoa(os.Getpid())
	if ct.Groups > 0 {
		tf := filepath.Join(dir, "token")
		if err := os.WriteFile(tf, []byte(token+"\n"), 0o600); err != nil {
			return nil, err
		}
		groupFlags = []string{"--groups", strconv.Itoa(ct.Groups), "--http-token-file", tf}
		if ct.Replicas > 0 {
			groupFlags = append(groupFlags, "--replicas", strconv.Itoa(ct.Replicas))
		}
	}
	var nodes []*Server
	stopAll := func() {
		for _, n := range nodes {
			n.Stop()
		}
	}
	for i := range count {
		id := fmt.Sprintf("n%d", i+1)
		n, err := StartServer(ct, append([]string{"--cluster-dir", filepath.Join(dir, id), "--node-id", id,
			"--raft", raft[i], "--bootstrap", strings.Join(boot, ","), "--http", web[i]}, groupFlags...), pinCPU, nofile)
		if err != nil {
			stopAll()
			return nil, err
		}
		nodes = append(nodes, n)
	}
	hc := &http.Client{Timeout: time.Second}
	ready := func(i int) bool {
		resp, err := hc.Get("http://" + web[i] + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	var leads string // the spread leads seen first, and when
	var leadsAt time.Time
	// serving is the node to return once the cluster serves, or -1.
	serving := func() int {
		for i := range nodes {
			if ct.Groups == 0 && ready(i) {
				return i
			}
			if ct.Groups > 0 && !ready(i) {
				return -1
			}
		}
		if ct.Groups == 0 {
			return -1
		}
		switch l := leadsSpread(hc, web, token, nodes[0]); {
		case l != leads:
			leads, leadsAt = l, time.Now()
		case l != "" && time.Since(leadsAt) >= leadsSettle:
			return 0
		}
		return -1
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, n := range nodes {
			if err := n.Died(); err != nil {
				stopAll()
				return nil, err
			}
		}
		if i := serving(); i >= 0 {
			n := nodes[i]
			n.group = append(append([]*Server(nil), nodes[:i]...), nodes[i+1:]...)
			if err := n.probeGroups(max(ct.Groups, 1), deadline); err != nil {
				n.Stop()
				return nil, fmt.Errorf("the %s cluster: %w", ct.Name, err)
			}
			return n, nil
		}
		if time.Now().After(deadline) {
			stopAll()
			return nil, fmt.Errorf("no node of the %s cluster led within 30s", ct.Name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leadsSettle is how long the leads of a cluster of many groups must stay
// spread, unchanged, before a run: longer than an election under load
// and than two of the nodes' looks at the leads (every 1 s), so that a
// lead that was about to move (a transfer, an election that a loaded node
// started) has moved.
const leadsSettle = 2 * time.Second

// leadsSpread returns the leaders and terms of the groups when the nodes
// whose HTTP addresses are web agree on them (/cluster/groups, with the
// token) and they lead the data groups as evenly as the nodes' own rule
// wants (docs/cluster.md, "A host of groups"): none leads two more than
// another, so no lead moves while a run holds reservations. Otherwise it
// returns "". With --replicas a node names the leader of a group it does
// not host (state "elsewhere") but not its term: every node must name the
// same leader, and the group's members the same term. It records in
// n.dataLeads the most data groups one node leads.
func leadsSpread(hc *http.Client, web []string, token string, n *Server) string {
	var leaders []string
	var terms []uint64 // 0 until a member of the group names one
	for k, addr := range web {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/cluster/groups", nil)
		if err != nil {
			return ""
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		if err != nil {
			return ""
		}
		var gs []struct {
			Leader string `json:"leader"`
			State  string `json:"state"`
			Term   uint64 `json:"term"`
		}
		err = json.NewDecoder(resp.Body).Decode(&gs)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return ""
		}
		if k == 0 {
			leaders, terms = make([]string, len(gs)), make([]uint64, len(gs))
		} else if len(gs) != len(leaders) {
			return ""
		}
		for g, st := range gs {
			if st.Leader == "" || k > 0 && st.Leader != leaders[g] {
				return ""
			}
			leaders[g] = st.Leader
			if st.State == "elsewhere" {
				continue
			}
			if terms[g] != 0 && st.Term != terms[g] {
				return ""
			}
			terms[g] = st.Term
		}
	}
	var b strings.Builder
	for g, id := range leaders {
		if terms[g] == 0 {
			return "" // no member answered for the group
		}
		fmt.Fprintf(&b, "%s@%d ", id, terms[g])
	}
	// The rule spreads the data groups' leads; group 0 holds no jobs.
	data := map[string]int{}
	for i := range web {
		data[fmt.Sprintf("n%d", i+1)] = 0
	}
	for g, id := range leaders {
		if g > 0 {
			data[id]++
		}
	}
	lo, hi := len(leaders), 0
	for _, k := range data {
		lo, hi = min(lo, k), max(hi, k)
	}
	n.dataLeads = hi
	if len(data) != len(web) || hi-lo >= 2 {
		return ""
	}
	return b.String()
}

// probeGroups waits until a put to a tube of each of the cluster's groups
// data groups succeeds through every node (each node's router, or a
// follower's forwarding, has a leader to send it to), deleting each job
// again, or until deadline (at least 10 s from now). It records in
// s.jobsBefore the jobs the cluster then counts.
func (s *Server) probeGroups(groups int, deadline time.Time) error {
	deadline = later(deadline, time.Now().Add(10*time.Second))
	for _, port := range s.ports() {
		for g := range groups {
			tube := tubeInGroup("bench.probe", g, groups)
			for {
				err := probePut(port, tube)
				if err == nil {
					break
				}
				if err := s.Died(); err != nil {
					return err
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("a put to tube %s through 127.0.0.1:%d: %w", tube, port, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	x, err := DialCtrl(s.Port)
	if err != nil {
		return err
	}
	defer x.Close()
	st, err := x.Stats()
	if err != nil {
		return err
	}
	if s.jobsBefore, err = statInt(st, "total-jobs"); err != nil {
		return err
	}
	if n, err := statInt(st, "current-jobs-ready"); err != nil || n != 0 {
		return fmt.Errorf("%d jobs left ready after the probes (%v)", n, err)
	}
	return nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// probePut puts a job into tube through 127.0.0.1:port and deletes it.
func probePut(port int, tube string) error {
	x, err := DialCtrl(port)
	if err != nil {
		return err
	}
	defer x.Close()
	if r, err := x.Cmd("use " + tube); err != nil || r.Kind != KUsing {
		return fmt.Errorf("use: %q, %v", r.Line, err)
	}
	r, err := x.Cmd("put 0 0 120 5\r\nprobe")
	if err != nil || r.Kind != KInserted {
		return fmt.Errorf("put: %q, %v", r.Line, err)
	}
	if r, err = x.Cmd(fmt.Sprintf("delete %d", r.ID)); err != nil || r.Kind != KDeleted {
		return fmt.Errorf("delete: %q, %v", r.Line, err)
	}
	return nil
}

// ports are the client ports of the server and its group (a cluster's
// nodes).
func (s *Server) ports() []int {
	ps := []int{s.Port}
	for _, n := range s.group {
		ps = append(ps, n.Port)
	}
	return ps
}

// pids are the server's process ids: its own and its group's.
func (s *Server) pids() []int {
	ps := []int{s.Pid}
	for _, n := range s.group {
		ps = append(ps, n.Pid)
	}
	return ps
}

// kill sends SIGKILL to the server's process group; procMu must be held.
func (s *Server) kill() {
	if s.stopped {
		return
	}
	s.stopped = true
	_ = syscall.Kill(-s.Pid, syscall.SIGKILL)
	_ = s.cmd.Process.Kill()
}

// Stop kills the server and waits for it. With BEANPOLE_CPUPROFILE set
// (the server then profiles itself until a graceful stop) it asks with
// SIGTERM first, so the profile gets written.
func (s *Server) Stop() {
	for _, n := range s.group {
		n.Stop()
	}
	if os.Getenv("BEANPOLE_CPUPROFILE") != "" && s.Alive() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
		}
	}
	procMu.Lock()
	s.kill()
	delete(procs, s)
	procMu.Unlock()
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
	}
}

// Alive reports whether the process is still running.
func (s *Server) Alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Died returns an error if the server (or a node of its group) exited on
// its own.
func (s *Server) Died() error {
	for _, n := range s.group {
		if err := n.Died(); err != nil {
			return err
		}
	}
	if s.Alive() {
		return nil
	}
	return fmt.Errorf("%s exited during the run (%v): %s", s.Name, s.waitErr, s.stderr.String())
}

// logTail is the last lines each process of s (a cluster's nodes) wrote,
// for a failed run's report: a cluster that closed a client says why.
func (s *Server) logTail(lines int) string {
	var b strings.Builder
	for _, n := range append([]*Server{s}, s.group...) {
		l := strings.Split(n.stderr.String(), "\n")
		fmt.Fprintf(&b, "\n  %s (pid %d): %s", n.Name, n.Pid, strings.Join(l[max(0, len(l)-lines):], "\n    "))
	}
	return b.String()
}

// RSS returns the resident set size in bytes (VmRSS).
func (s *Server) RSS() (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(s.Pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, ln := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(ln, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb * 1024, err
			}
		}
	}
	return 0, errors.New("no VmRSS")
}

// RSSAll returns the resident set size in bytes of the server and its
// group (for stunnel in front of beanstalkd: the two processes).
func (s *Server) RSSAll() (int64, error) {
	t, err := s.RSS()
	for _, n := range s.group {
		r, e := n.RSS()
		t += r
		err = errors.Join(err, e)
	}
	return t, err
}

// CPU returns the CPU seconds the server (with its group) has used.
func (s *Server) CPU() float64 {
	t := procCPU(s.Pid)
	if s.threadPerConn {
		t = procStatCPU(s.Pid)
	}
	for _, n := range s.group {
		t += n.CPU()
	}
	return t
}

// procCPU returns the CPU seconds a process has used: the sum of its
// threads' on-CPU nanoseconds from /proc/PID/task/*/schedstat (precise even
// over a few milliseconds), or utime+stime from /proc/PID/stat (10 ms ticks,
// includes exited threads) when schedstat is unavailable.
func procCPU(pid int) float64 {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	if ents, err := os.ReadDir(dir); err == nil {
		var ns uint64
		ok := true
		for _, e := range ents {
			b, err := os.ReadFile(dir + e.Name() + "/schedstat")
			if err != nil {
				continue // thread exited meanwhile
			}
			f := strings.Fields(string(b))
			if len(f) < 1 {
				ok = false
				break
			}
			v, err := strconv.ParseUint(f[0], 10, 64)
			if err != nil {
				ok = false
				break
			}
			ns += v
		}
		if ok && ns > 0 {
			return float64(ns) / 1e9
		}
	}
	return procStatCPU(pid)
}

// procStatCPU reads utime+stime of a process from /proc/PID/stat.
func procStatCPU(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / clkTck
}

// clkTck is USER_HZ, 100 on every Linux architecture Go supports.
const clkTck = 100

func readNofile(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits")
	if err != nil {
		return 0
	}
	for _, ln := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(ln, "Max open files") {
			f := strings.Fields(ln[len("Max open files"):])
			if len(f) >= 1 {
				v, _ := strconv.ParseUint(f[0], 10, 64)
				return v
			}
		}
	}
	return 0
}

// tailBuf keeps the last max bytes written to it.
type tailBuf struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuf) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuf) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.b))
	if s == "" {
		return "(no output)"
	}
	return s
}

// serverVersion runs "path -v" and returns its first line.
func serverVersion(path string) string {
	cmd := exec.Command(path, "-v")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		return "unknown (" + err.Error() + ")"
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	s := strings.TrimSpace(out.String())
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if s == "" {
		s = "unknown"
	}
	return s
}
