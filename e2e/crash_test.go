package e2e

// Crash safety of the binlog, black-box:
//
//   - TestBinlogCrash: several connections put, reserve, delete, bury,
//     release and kick-job concurrently; the server is killed with SIGKILL
//     at a random moment and restarted on the same directory, over and
//     over. Every acknowledged reply is a promise checked after the
//     restart: an INSERTED job exists (unless an acknowledged DELETED
//     followed), a DELETED job never comes back, an acknowledged bury,
//     release or kick-job shows in state, priority and counters, and no id
//     is ever handed out twice. Changes sent but not acknowledged may or
//     may not have happened, but only as a prefix: a job's state after the
//     restart is its state after its last acknowledged change or after one
//     of the changes that followed it.
//   - TestBinlogTornTail: the last segment is cut at offsets inside its last
//     records and at random offsets; the server starts, reports the torn
//     tail, and recovers exactly the records before the cut, then goes on
//     appending cleanly.
//   - TestBinlogCorruptRecord: a flipped byte in a record's payload loses
//     that record only and is reported; a flipped byte in a frame header
//     loses the rest of that segment only and is reported.
//
// The torn-tail and corruption tests read the on-disk format documented in
// persist/doc.go (segment header, frames, kind byte and job id) to know
// where records start and what each one says; they skip for C beanstalkd.
//
// BEANPOLE_SOAK=1 runs many more crash rounds (BEANPOLE_SOAK_ROUNDS, default
// 60) and random cut offsets, and adds the -F and -f0 -s 8192 modes.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func crSoak() bool { return os.Getenv("BEANPOLE_SOAK") != "" }

// ---------------------------------------------------------------------------
// The model of what the clients were promised.

// crState is a job as the verification sees it (stats-job after a restart).
type crState struct {
	exists   bool
	state    string // ready, buried
	pri      uint32
	releases int
	buries   int
}

func (s crState) String() string {
	if !s.exists {
		return "absent"
	}
	return fmt.Sprintf("%s pri %d releases %d buries %d", s.state, s.pri, s.releases, s.buries)
}

// crOp is a change a client sent for a job it owned (reserved or buried).
type crOp struct {
	kind  byte // 'd' delete, 'b' bury, 'r' release with delay 0, 'k' kick-job
	pri   uint32
	acked bool
}

func (o crOp) apply(s crState) crState {
	switch o.kind {
	case 'd':
		return crState{}
	case 'b':
		s.state, s.pri, s.buries = "buried", o.pri, s.buries+1
	case 'r':
		s.state, s.pri, s.releases = "ready", o.pri, s.releases+1
	case 'k':
		s.state = "ready"
	}
	return s
}

func (o crOp) String() string {
	ack := "unacked"
	if o.acked {
		ack = "acked"
	}
	return fmt.Sprintf("%c/%d/%s", o.kind, o.pri, ack)
}

type crJob struct {
	body string
	// durable: the put was acknowledged, or the job was seen after a
	// restart. A job first seen by a reserver while its put was not yet
	// acknowledged is not durable until then.
	durable bool
	base    crState // as put, or as seen after the last restart
	ops     []crOp  // changes since base, in the order the server made them
}

// latest is the job's state after every change sent so far.
func (j *crJob) latest() crState {
	s := j.base
	for _, o := range j.ops {
		s = o.apply(s)
	}
	return s
}

// candidates are the states the job may have after a crash: after its last
// acknowledged change, or after any later change (the log is a prefix);
// absent as well if nothing about it was ever acknowledged.
func (j *crJob) candidates() []crState {
	last := -1
	for i, o := range j.ops {
		if o.acked {
			last = i
		}
	}
	var out []crState
	if !j.durable && last < 0 {
		out = append(out, crState{})
	}
	s := j.base
	for i := 0; i <= last; i++ {
		s = j.ops[i].apply(s)
	}
	out = append(out, s)
	for i := last + 1; i < len(j.ops); i++ {
		s = j.ops[i].apply(s)
		out = append(out, s)
	}
	return out
}

func (j *crJob) evidence() bool {
	if j.durable {
		return true
	}
	for _, o := range j.ops {
		if o.acked {
			return true
		}
	}
	return false
}

type crModel struct {
	t    *testing.T
	mu   sync.Mutex
	jobs map[uint64]*crJob
	gone map[uint64]bool // deleted for good: must never be seen again
	ids  map[uint64]bool // every id with durable evidence, ever
	acks int             // acknowledged replies this round
	dels int             // jobs in jobs with a delete sent (until verify)
}

func newCrModel(t *testing.T) *crModel {
	return &crModel{t: t, jobs: map[uint64]*crJob{}, gone: map[uint64]bool{}, ids: map[uint64]bool{}}
}

func crBodyPri(body string) (uint32, bool) {
	f := strings.Fields(body)
	if len(f) < 2 || f[0] != "j" {
		return 0, false
	}
	n, err := strconv.ParseUint(f[1], 10, 32)
	return uint32(n), err == nil
}

func (m *crModel) inserted(w int, id uint64, body string, pri uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.acks++
	if m.gone[id] {
		m.t.Errorf("worker %d: INSERTED %d, but job %d was deleted before: id handed out twice", w, id, id)
		return
	}
	if j := m.jobs[id]; j != nil {
		if j.durable || j.body != body {
			m.t.Errorf("worker %d: INSERTED %d for %q, but id %d already belongs to %q: id handed out twice", w, id, body, id, j.body)
			return
		}
		j.durable = true // a reserver saw it before this reply came
		return
	}
	if m.ids[id] {
		m.t.Errorf("worker %d: INSERTED %d: id handed out twice", w, id)
	}
	m.jobs[id] = &crJob{body: body, durable: true, base: crState{exists: true, state: "ready", pri: pri}}
}

// reserved registers a job a worker just reserved and the change it is
// about to send; it returns the change's index.
func (m *crModel) reserved(w int, id uint64, body string, op crOp) (int, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gone[id] {
		m.t.Errorf("worker %d: RESERVED %d, a job deleted before", w, id)
		return 0, false
	}
	j := m.jobs[id]
	if j == nil {
		pri, ok := crBodyPri(body)
		if !ok {
			m.t.Errorf("worker %d: RESERVED %d with a body no client sent: %q", w, id, body)
			return 0, false
		}
		j = &crJob{body: body, base: crState{exists: true, state: "ready", pri: pri}}
		m.jobs[id] = j
	} else if j.body != body {
		m.t.Errorf("worker %d: RESERVED %d with body %q, want %q", w, id, body, j.body)
		return 0, false
	}
	if s := j.latest(); !s.exists || s.state != "ready" {
		m.t.Errorf("worker %d: RESERVED %d, but the job should be %v (ops %v)", w, id, s, j.ops)
		return 0, false
	}
	if op.kind == 'd' {
		m.dels++
	}
	j.ops = append(j.ops, op)
	return len(j.ops) - 1, true
}

func (m *crModel) addOp(id uint64, op crOp) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	j := m.jobs[id]
	if op.kind == 'd' {
		m.dels++
	}
	j.ops = append(j.ops, op)
	return len(j.ops) - 1
}

func (m *crModel) ack(id uint64, k int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.acks++
	m.jobs[id].ops[k].acked = true
}

// ---------------------------------------------------------------------------
// Workers: raw connections that report errors instead of calling Fatal
// (they run off the test goroutine) and stop when the server dies.

type crClient struct {
	nc net.Conn
	r  *bufio.Reader
}

var errCrProto = errors.New("protocol error (reported)")

func (c *crClient) send(s string) error {
	_ = c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := io.WriteString(c.nc, s)
	return err
}

func (c *crClient) line() (string, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	l, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasSuffix(l, "\r\n") {
		return "", fmt.Errorf("reply line without CRLF: %q", l)
	}
	return l[:len(l)-2], nil
}

func (c *crClient) body(n int) (string, error) {
	b := make([]byte, n+2)
	if _, err := io.ReadFull(c.r, b); err != nil {
		return "", err
	}
	if string(b[n:]) != "\r\n" {
		return "", fmt.Errorf("body not followed by CRLF: %q", b)
	}
	return string(b[:n]), nil
}

func crParseID(line, prefix string) (uint64, bool) {
	s, ok := strings.CutPrefix(line, prefix)
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(s, 10, 64)
	return id, err == nil && strconv.FormatUint(id, 10) == s
}

// worker runs one client until the server dies (or until). buried are
// buried jobs it owns from the start: only their owner deletes or kicks
// them, so that each job's changes are made by one client at a time.
func (m *crModel) worker(addr string, round, w int, seed uint64, until time.Time, buried []uint64) {
	t := m.t
	nc, err := net.DialTimeout("tcp", addr, defaultTimeout)
	if err != nil {
		return // the server may already be gone
	}
	defer nc.Close()
	c := &crClient{nc: nc, r: bufio.NewReader(nc)}
	rng := rand.New(rand.NewPCG(seed, uint64(w)))
	expectReply := func(want string) (bool, error) {
		l, err := c.line()
		if err != nil {
			return false, err
		}
		if l != want {
			t.Errorf("worker %d: want %q, got %q", w, want, l)
			return false, errCrProto
		}
		return true, nil
	}
	for n := 0; time.Now().Before(until); n++ {
		// Keep a few hundred jobs around, so that every kill finds ready,
		// reserved and buried jobs to lose.
		r, putP := rng.IntN(100), 55
		m.mu.Lock()
		if len(m.jobs)-m.dels > 300 {
			putP = 25
		}
		m.mu.Unlock()
		switch {
		case r < putP:
			pri := uint32(rng.IntN(1000))
			body := fmt.Sprintf("j %d r%d w%d n%d %s", pri, round, w, n, strings.Repeat("p", rng.IntN(64)))
			if c.send(fmt.Sprintf("put %d 0 120 %d\r\n%s\r\n", pri, len(body), body)) != nil {
				return
			}
			l, err := c.line()
			if err != nil {
				return
			}
			id, ok := crParseID(l, "INSERTED ")
			if !ok {
				t.Errorf("worker %d: put: want INSERTED <id>, got %q", w, l)
				return
			}
			m.inserted(w, id, body, pri)
		case r < 80 || len(buried) == 0:
			if c.send("reserve-with-timeout 0\r\n") != nil {
				return
			}
			l, err := c.line()
			if err != nil {
				return
			}
			if l == "TIMED_OUT" {
				continue
			}
			f := strings.Fields(l)
			if len(f) != 3 || f[0] != "RESERVED" {
				t.Errorf("worker %d: reserve-with-timeout 0: got %q", w, l)
				return
			}
			id, err1 := strconv.ParseUint(f[1], 10, 64)
			size, err2 := strconv.Atoi(f[2])
			if err1 != nil || err2 != nil {
				t.Errorf("worker %d: reserve-with-timeout 0: got %q", w, l)
				return
			}
			body, err := c.body(size)
			if err != nil {
				return
			}
			op := crOp{pri: uint32(rng.IntN(1000))}
			var cmd, want string
			switch a := rng.IntN(100); {
			case a < 60:
				op.kind, cmd, want = 'd', fmt.Sprintf("delete %d\r\n", id), "DELETED"
			case a < 80:
				op.kind, cmd, want = 'r', fmt.Sprintf("release %d %d 0\r\n", id, op.pri), "RELEASED"
			default:
				op.kind, cmd, want = 'b', fmt.Sprintf("bury %d %d\r\n", id, op.pri), "BURIED"
			}
			k, ok := m.reserved(w, id, body, op)
			if !ok {
				return
			}
			if c.send(cmd) != nil {
				return
			}
			if ok, _ := expectReply(want); !ok {
				return
			}
			m.ack(id, k)
			if op.kind == 'b' {
				buried = append(buried, id)
			}
		default: // delete or kick one of the jobs this worker buried
			i := rng.IntN(len(buried))
			id := buried[i]
			buried = append(buried[:i], buried[i+1:]...)
			op, cmd, want := crOp{kind: 'd'}, fmt.Sprintf("delete %d\r\n", id), "DELETED"
			if rng.IntN(3) == 0 {
				op, cmd, want = crOp{kind: 'k'}, fmt.Sprintf("kick-job %d\r\n", id), "KICKED"
			}
			k := m.addOp(id, op)
			if c.send(cmd) != nil {
				return
			}
			if ok, _ := expectReply(want); !ok {
				return
			}
			m.ack(id, k)
		}
	}
}

// ---------------------------------------------------------------------------
// Verification after a restart.

// crObserve puts a probe job (its id bounds every id the server knows),
// then peeks every id below it and reads stats-job of the jobs found.
func crObserve(t *testing.T, c *conn) (probe uint64, seen map[uint64]crState, bodies map[uint64]string) {
	t.Helper()
	mustSend(t, c, "put 0 0 120 5\r\nprobe\r\n")
	l := readLine(t, c)
	probe, ok := crParseID(l, "INSERTED ")
	if !ok {
		t.Fatalf("probe put: got %s", show(l))
	}
	seen, bodies = crPeekAll(t, c, probe-1)
	return probe, seen, bodies
}

// crPeekAll peeks ids 1..upto (pipelined) and reads stats-job of the jobs
// found.
func crPeekAll(t *testing.T, c *conn, upto uint64) (seen map[uint64]crState, bodies map[uint64]string) {
	t.Helper()
	seen, bodies = map[uint64]crState{}, map[uint64]string{}
	var found []uint64
	for from := uint64(1); from <= upto; from += 500 {
		to := min(upto+1, from+500)
		var b strings.Builder
		for id := from; id < to; id++ {
			fmt.Fprintf(&b, "peek %d\r\n", id)
		}
		mustSend(t, c, b.String())
		for id := from; id < to; id++ {
			l := readLine(t, c)
			if l == "NOT_FOUND" {
				continue
			}
			var gid uint64
			var n int
			if _, err := fmt.Sscanf(l, "FOUND %d %d", &gid, &n); err != nil || gid != id || l != fmt.Sprintf("FOUND %d %d", id, n) {
				t.Fatalf("peek %d: got %s", id, show(l))
			}
			body := readN(t, c, n+2, defaultTimeout)
			if !strings.HasSuffix(body, "\r\n") {
				t.Fatalf("peek %d: body %s not followed by CRLF", id, show(body))
			}
			bodies[id] = body[:n]
			found = append(found, id)
		}
	}
	for len(found) > 0 {
		n := min(len(found), 200)
		var b strings.Builder
		for _, id := range found[:n] {
			fmt.Fprintf(&b, "stats-job %d\r\n", id)
		}
		mustSend(t, c, b.String())
		for _, id := range found[:n] {
			st := yamlMap(t, readYAML(t, c))
			pri, _ := strconv.ParseUint(st["pri"], 10, 32)
			rel, _ := strconv.Atoi(st["releases"])
			bur, _ := strconv.Atoi(st["buries"])
			seen[id] = crState{exists: true, state: st["state"], pri: uint32(pri), releases: rel, buries: bur}
		}
		found = found[n:]
	}
	return seen, bodies
}

// verify checks the restarted server against the model and then makes the
// model match what was seen (every uncertain change is settled).
func (m *crModel) verify(t *testing.T, c *conn, round int) (live int) {
	t.Helper()
	probe, seen, bodies := crObserve(t, c)
	m.mu.Lock()
	defer m.mu.Unlock()
	for id := range m.ids {
		if id >= probe {
			t.Errorf("round %d: the server hands out id %d, but id %d was already acknowledged or seen", round, probe, id)
		}
	}
	ids := make([]uint64, 0, len(m.jobs))
	for id := range m.jobs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	for _, id := range ids {
		j := m.jobs[id]
		if id >= probe {
			// The server does not know this id: its put was lost, which
			// is fine only if nothing about it was ever acknowledged.
			if j.evidence() {
				t.Errorf("round %d: job %d (%q, ops %v) was acknowledged, but the next id is %d", round, id, j.body, j.ops, probe)
			}
			delete(m.jobs, id)
			continue
		}
		obs := seen[id]
		if obs.exists && bodies[id] != j.body {
			t.Errorf("round %d: job %d has body %q, want %q", round, id, bodies[id], j.body)
		}
		cands := j.candidates()
		okState := false
		for _, s := range cands {
			if s == obs {
				okState = true
			}
		}
		if !okState {
			what := "acknowledged"
			if !obs.exists {
				what = "lost"
			}
			t.Errorf("round %d: job %d %s: after restart it is %v; allowed: %v (base %v, ops %v, put acked %v)",
				round, id, what, obs, cands, j.base, j.ops, j.durable)
		}
		switch {
		case obs.exists:
			j.base, j.ops, j.durable = obs, nil, true
			m.ids[id] = true
		case j.evidence():
			m.gone[id] = true
			m.ids[id] = true
			delete(m.jobs, id)
		default:
			delete(m.jobs, id) // never durable: the id may be handed out again
		}
	}
	for id := range m.gone {
		if seen[id].exists {
			t.Errorf("round %d: deleted job %d came back: %v %q", round, id, seen[id], bodies[id])
		}
	}
	// Jobs nobody heard of: puts that were durable but not acknowledged.
	for id, obs := range seen {
		if m.jobs[id] != nil || m.gone[id] {
			continue
		}
		if _, ok := crBodyPri(bodies[id]); !ok {
			t.Errorf("round %d: job %d has a body no client sent: %q", round, id, bodies[id])
			continue
		}
		m.jobs[id] = &crJob{body: bodies[id], durable: true, base: obs}
		m.ids[id] = true
	}
	// Nothing is hidden beyond the ids peeked.
	st := stats(t, c)
	total := 0
	for _, k := range []string{"current-jobs-ready", "current-jobs-reserved", "current-jobs-delayed", "current-jobs-buried"} {
		n, _ := strconv.Atoi(st[k])
		total += n
	}
	if total != len(seen)+1 {
		t.Errorf("round %d: stats count %d jobs, peek found %d plus the probe", round, total, len(seen))
	}
	mustSend(t, c, fmt.Sprintf("delete %d\r\n", probe))
	expect(t, c, "DELETED\r\n")
	m.gone[probe], m.ids[probe] = true, true
	m.dels = 0
	return len(seen)
}

// crRun: rounds of concurrent load, kill -9 at a random moment, restart,
// verify.
func crRun(t *testing.T, rounds int, flags []string) {
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %d rounds, flags %v", seed, rounds, flags)
	rng := rand.New(rand.NewPCG(seed, 0))
	m := newCrModel(t)
	s := blStart(t, dir, flags...)
	totalAcks := 0
	const workers = 4
	for round := 1; round <= rounds && !t.Failed(); round++ {
		// Hand the buried jobs left by earlier rounds to the workers.
		owned := make([][]uint64, workers)
		m.mu.Lock()
		m.acks = 0
		i := 0
		for id, j := range m.jobs {
			if st := j.latest(); st.exists && st.state == "buried" {
				owned[i%workers] = append(owned[i%workers], id)
				i++
			}
		}
		m.mu.Unlock()
		var wg sync.WaitGroup
		until := time.Now().Add(20 * time.Second) // a safety net: the kill stops them
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m.worker(s.addr, round, w, seed+uint64(round)*1000, until, owned[w])
			}()
		}
		time.Sleep(time.Duration(150+rng.IntN(500)) * time.Millisecond)
		s.stop() // SIGKILL mid-flight
		wg.Wait()
		m.mu.Lock()
		acks := m.acks
		m.mu.Unlock()
		totalAcks += acks
		s = blStart(t, dir, flags...)
		c := s.dial(t)
		live := m.verify(t, c, round)
		c.nc.Close()
		t.Logf("round %d: %d acknowledged replies, %d jobs after restart", round, acks, live)
	}
	if !t.Failed() && totalAcks < 5*rounds {
		t.Errorf("only %d replies acknowledged over %d rounds: the test exercised too little", totalAcks, rounds)
	}
}

// Concurrent clients, kill -9 at random moments, restart on the same dir:
// every acknowledged reply holds after the restart (see the file comment).
func TestBinlogCrash(t *testing.T) {
	skipLegacy(t, "upstream loses zero-delay releases, re-buries and reuses ids after a restart")
	t.Parallel()
	rounds := 5
	// Small segments make rotation, reclaiming and compaction rewrites
	// race with the load too.
	modes := map[string][]string{"f0": {"-f0"}, "f50": nil, "f50-s8192": {"-s", "8192"}}
	if crSoak() {
		rounds = 60
		if n, err := strconv.Atoi(os.Getenv("BEANPOLE_SOAK_ROUNDS")); err == nil && n > 0 {
			rounds = n
		}
		modes["F"] = []string{"-F"}
		modes["f0-s8192"] = []string{"-f0", "-s", "8192"}
	}
	for name, flags := range modes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			crRun(t, rounds, flags)
		})
	}
}

// ---------------------------------------------------------------------------
// Reading the on-disk format (persist/doc.go) for the damage tests.

const (
	crSegSize     = "2048" // -s for the damage tests: several segments hold data
	crSegHeader   = 32
	crFrameHeader = 20
)

type crFrame struct {
	seg      int
	off, end int64 // the frame's bytes in its segment
	kind     byte  // 1 full, 2 delete, 3 bury, 4 kick, 5 release, 6 id mark
	id       uint64
	pri      uint32
	state    byte // full records: 1 ready, 2 reserved, 3 delayed, 4 buried
}

// crParseSegment walks a segment's frames up to the zeros that end its
// data, checking only what the test needs.
func crParseSegment(t *testing.T, seg int, b []byte) []crFrame {
	t.Helper()
	if len(b) < crSegHeader || string(b[:8]) != "BPBINLOG" {
		t.Fatalf("binlog.%d: no BPBINLOG header (%d bytes)", seg, len(b))
	}
	var out []crFrame
	off := int64(crSegHeader)
	for off+crFrameHeader <= int64(len(b)) {
		h := b[off : off+crFrameHeader]
		if len(strings.Trim(string(h), "\x00")) == 0 {
			break
		}
		n := int64(binary.LittleEndian.Uint32(h))
		end := off + crFrameHeader + n
		if n < 9 || end > int64(len(b)) {
			t.Fatalf("binlog.%d offset %d: frame length %d does not fit", seg, off, n)
		}
		p := b[off+crFrameHeader : end]
		f := crFrame{seg: seg, off: off, end: end, kind: p[0], id: binary.LittleEndian.Uint64(p[1:9])}
		switch f.kind {
		case 1:
			f.pri, f.state = binary.LittleEndian.Uint32(p[9:13]), p[13]
		case 3, 5:
			f.pri = binary.LittleEndian.Uint32(p[9:13])
		}
		out = append(out, f)
		off = end
	}
	if rest := b[off:]; len(strings.Trim(string(rest), "\x00")) != 0 {
		t.Fatalf("binlog.%d: non-zero bytes after the last frame at %d", seg, off)
	}
	return out
}

// crTailFrames counts the complete frames of the last segment holding data
// (0 if it cannot be read cleanly right now).
func crTailFrames(t *testing.T, dir string) int {
	t.Helper()
	segs := blNonEmptySegments(t, dir)
	if len(segs) == 0 {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(dir, "binlog."+itoa(segs[len(segs)-1])))
	if err != nil || len(b) < crSegHeader {
		return 0
	}
	n := 0
	for off := int64(crSegHeader); off+crFrameHeader <= int64(len(b)); n++ {
		size := int64(binary.LittleEndian.Uint32(b[off:]))
		if size == 0 {
			break
		}
		off += crFrameHeader + size
	}
	return n
}

// crJobState is what the log says of a live job.
type crJobState struct {
	state string
	pri   uint32
}

// crReplay folds frames into the live jobs, as recovery should.
func crReplay(frames []crFrame) map[uint64]crJobState {
	jobs := map[uint64]crJobState{}
	for _, f := range frames {
		j, live := jobs[f.id]
		switch f.kind {
		case 1:
			st := map[byte]string{1: "ready", 2: "ready", 3: "delayed", 4: "buried"}[f.state]
			jobs[f.id] = crJobState{st, f.pri}
		case 2:
			delete(jobs, f.id)
		case 3:
			if live {
				jobs[f.id] = crJobState{"buried", f.pri}
			}
		case 4:
			if live {
				j.state = "ready"
				jobs[f.id] = j
			}
		case 5:
			if live {
				jobs[f.id] = crJobState{"ready", f.pri} // the workload releases with delay 0
			}
		}
	}
	return jobs
}

func crMaxID(frames []crFrame) uint64 {
	var m uint64
	for _, f := range frames {
		m = max(m, f.id)
	}
	return m
}

// crLog is a binlog directory captured after kill -9.
type crLog struct {
	files  map[string][]byte // binlog.N → contents
	segs   []int             // N of the segments holding data, in order
	frames map[int][]crFrame // by N
	bodies map[uint64]string // every body put, by id
	maxID  uint64            // highest id put
}

func (l *crLog) all() []crFrame {
	var out []crFrame
	for _, n := range l.segs {
		out = append(out, l.frames[n]...)
	}
	return out
}

// crMakeLog runs a varied workload (puts, deletes, bury, kick, release with
// a new priority) over several small segments (-s crSegSize), checks that the files say
// what the server says, and kills the server.
func crMakeLog(t *testing.T) *crLog {
	t.Helper()
	dir := t.TempDir()
	s := blStart(t, dir, "-s", crSegSize)
	c := s.dial(t)
	l := &crLog{files: map[string][]byte{}, frames: map[int][]crFrame{}, bodies: map[uint64]string{}}
	id := uint64(0)
	putN := func(n int) {
		for i := 0; i < n; i++ {
			id++
			body := fmt.Sprintf("body-%03d-%s", id, strings.Repeat("q", 20+int(id%30)))
			l.bodies[id] = body
			put(t, c, int(id*7%19), 0, 120, body, id)
		}
	}
	del := func(ids ...uint64) {
		for _, d := range ids {
			mustSend(t, c, fmt.Sprintf("delete %d\r\n", d))
			expect(t, c, "DELETED\r\n")
		}
	}
	reserve := func() uint64 {
		mustSend(t, c, "reserve-with-timeout 0\r\n")
		line := readLine(t, c)
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "RESERVED" {
			t.Fatalf("reserve: %s", show(line))
		}
		rid, _ := strconv.ParseUint(f[1], 10, 64)
		expect(t, c, l.bodies[rid]+"\r\n")
		return rid
	}
	cmd := func(send, want string) { mustSend(t, c, send); expect(t, c, want) }

	putN(40)
	del(5, 10, 15, 20, 25, 30, 35, 40)
	cmd(fmt.Sprintf("bury %d 100\r\n", reserve()), "BURIED\r\n")
	cmd(fmt.Sprintf("release %d 200 0\r\n", reserve()), "RELEASED\r\n")
	putN(5)
	del(42)
	cmd(fmt.Sprintf("bury %d 7\r\n", reserve()), "BURIED\r\n")
	cmd("kick 1\r\n", "KICKED 1\r\n")
	putN(1)
	cmd(fmt.Sprintf("release %d 3 0\r\n", reserve()), "RELEASED\r\n")
	putN(1)
	del(44)
	cmd(fmt.Sprintf("bury %d 11\r\n", reserve()), "BURIED\r\n")
	putN(1)
	// Go on with a mix of changes until the last segment holds enough
	// records to cut into. Acknowledged records are in the file already
	// (written before the reply), so it can be read while the server runs.
	for i := 0; crTailFrames(t, dir) < 10; i++ {
		if i == 200 {
			t.Fatalf("the last segment never got 10 records; files %v", blSegments(t, dir))
		}
		switch i % 5 {
		case 0, 3:
			putN(1)
		case 1:
			cmd(fmt.Sprintf("release %d %d 0\r\n", reserve(), i), "RELEASED\r\n")
		case 2:
			del(id)
		case 4:
			cmd(fmt.Sprintf("bury %d %d\r\n", reserve(), i), "BURIED\r\n")
			cmd("kick 1\r\n", "KICKED 1\r\n")
		}
	}
	l.maxID = id

	// What the server holds now, to check the parser against.
	seen, _ := crPeekAll(t, c, l.maxID)
	s.stop()

	for _, n := range blSegments(t, dir) {
		name := "binlog." + itoa(n)
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		l.files[name] = b
		if len(strings.Trim(string(b), "\x00")) > 0 {
			l.segs = append(l.segs, n)
			l.frames[n] = crParseSegment(t, n, b)
		}
	}
	if len(l.segs) < 3 {
		t.Fatalf("want data in at least 3 segments with -s %s, have %v", crSegSize, l.segs)
	}
	want := crReplay(l.all())
	if len(want) != len(seen) {
		t.Fatalf("the files hold %d live jobs, the server had %d", len(want), len(seen))
	}
	for jid, js := range want {
		if o := seen[jid]; !o.exists || o.state != js.state || o.pri != js.pri {
			t.Fatalf("job %d: the files say %v, the server had %v", jid, js, o)
		}
	}
	return l
}

// crWriteDir writes the captured files to a new directory, with edit
// applied to each file's contents.
func crWriteDir(t *testing.T, l *crLog, edit func(name string, b []byte) []byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, b := range l.files {
		b = edit(name, append([]byte(nil), b...))
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// crCheckJobs checks that exactly the jobs of want exist among ids
// 1..maxID, with their bodies, states and priorities.
func crCheckJobs(t *testing.T, c *conn, bodies map[uint64]string, want map[uint64]crJobState, maxID uint64) {
	t.Helper()
	var b strings.Builder
	for id := uint64(1); id <= maxID; id++ {
		fmt.Fprintf(&b, "peek %d\r\n", id)
	}
	mustSend(t, c, b.String())
	var found []uint64
	for id := uint64(1); id <= maxID; id++ {
		if _, live := want[id]; !live {
			if got := readLine(t, c); got != "NOT_FOUND" {
				t.Fatalf("peek %d: want NOT_FOUND (not in the surviving records), got %s", id, show(got))
			}
			continue
		}
		expect(t, c, fmt.Sprintf("FOUND %d %d\r\n%s\r\n", id, len(bodies[id]), bodies[id]))
		found = append(found, id)
	}
	for _, id := range found {
		js := want[id]
		st := statsJob(t, c, id)
		if st["state"] != js.state || st["pri"] != strconv.FormatUint(uint64(js.pri), 10) {
			t.Fatalf("job %d: state %s pri %s, want %s pri %d", id, st["state"], st["pri"], js.state, js.pri)
		}
	}
	st := stats(t, c)
	total := 0
	for _, k := range []string{"current-jobs-ready", "current-jobs-reserved", "current-jobs-delayed", "current-jobs-buried"} {
		n, _ := strconv.Atoi(st[k])
		total += n
	}
	if total != len(want) {
		t.Fatalf("stats count %d jobs, want %d", total, len(want))
	}
}

// crWaitLog waits until the server's output contains sub.
func crWaitLog(t *testing.T, s *server, sub string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.out.String(), sub) {
		if time.Now().After(deadline) {
			t.Fatalf("the server did not log %q; its output:\n%s", sub, s.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var crDamageWords = []string{"torn tail", "corrupt record", "unreadable data", "bad segment header", "missing records"}

// crNoDamageLogged fails if the server reported damage.
func crNoDamageLogged(t *testing.T, s *server) {
	t.Helper()
	time.Sleep(50 * time.Millisecond) // the log writer flushes every 10 ms
	out := s.out.String()
	for _, w := range crDamageWords {
		if strings.Contains(out, w) {
			t.Fatalf("the server reported %q on a clean log:\n%s", w, out)
		}
	}
}

// crCheckRecovered starts a server on dir, checks that it logs each of
// logWant and holds exactly want, puts one more job (its id above idFloor),
// kills it and checks the result again on a fresh start, which must report
// no damage if the first one only had a torn tail to repair.
func crCheckRecovered(t *testing.T, l *crLog, dir string, want map[uint64]crJobState, idFloor uint64, logWant ...string) {
	t.Helper()
	s := blStart(t, dir, "-s", crSegSize)
	for _, w := range logWant {
		crWaitLog(t, s, w)
	}
	c := s.dial(t)
	crCheckJobs(t, c, l.bodies, want, l.maxID)
	mustSend(t, c, "put 0 0 120 4\r\nnext\r\n")
	line := readLine(t, c)
	next, ok := crParseID(line, "INSERTED ")
	if !ok || next <= idFloor {
		t.Fatalf("put after recovery: got %s, want INSERTED <id> with id > %d", show(line), idFloor)
	}
	// An id at or below l.maxID can only be one whose record the test cut
	// off: never durable, so it may be handed out again.
	bodies := map[uint64]string{next: "next"}
	want2 := map[uint64]crJobState{next: {"ready", 0}}
	for id, js := range want {
		if id != next {
			want2[id], bodies[id] = js, l.bodies[id]
		}
	}
	s.stop()
	s = blStart(t, dir, "-s", crSegSize)
	c = s.dial(t)
	crCheckJobs(t, c, bodies, want2, max(l.maxID, next))
	if len(logWant) == 0 || logWant[0] == "torn tail" {
		crNoDamageLogged(t, s)
	}
}

// The last segment cut short at offsets inside its last records and at
// random offsets: the server starts, cuts the torn record off with a
// warning, holds exactly the jobs of the records before the cut, and goes
// on writing a log that reads back cleanly.
func TestBinlogTornTail(t *testing.T) {
	skipLegacy(t, "beanpole's binlog format")
	t.Parallel()
	l := crMakeLog(t)
	last := l.segs[len(l.segs)-1]
	lastName := "binlog." + itoa(last)
	fl := l.frames[last]
	dataEnd := fl[len(fl)-1].end
	// A segment is preallocated with zeros, so its data ends after its last
	// non-zero byte: that end must fall inside the last frame the test wrote.
	b := l.files[lastName]
	lastNonZero := int64(len(strings.TrimRight(string(b), "\x00")))
	if lastNonZero > dataEnd || lastNonZero < fl[len(fl)-1].off {
		t.Fatalf("%s: last non-zero byte at %d, frames end at %d", lastName, lastNonZero-1, dataEnd)
	}
	var earlier []crFrame
	for _, n := range l.segs[:len(l.segs)-1] {
		earlier = append(earlier, l.frames[n]...)
	}

	cuts := map[int64]bool{}
	for i := max(0, len(fl)-3); i < len(fl); i++ {
		f := fl[i]
		cuts[f.off+1] = true                                           // inside the frame header
		cuts[f.off+crFrameHeader+(f.end-f.off-crFrameHeader)/2] = true // inside the payload
		cuts[f.end-1] = true                                           // one byte short
	}
	cuts[fl[len(fl)-2].end] = true // a clean boundary: nothing torn
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	random := 3
	if crSoak() {
		random = 40
	}
	for i := 0; i < random; i++ {
		cuts[rng.Int64N(dataEnd+1)] = true
	}
	t.Logf("seed %d; %s: %d frames, data ends at %d; segments with data %v", seed, lastName, len(fl), dataEnd, l.segs)
	var offs []int64
	for o := range cuts {
		offs = append(offs, o)
	}
	sort.Slice(offs, func(a, b int) bool { return offs[a] < offs[b] })

	for _, cut := range offs {
		t.Run(fmt.Sprintf("cut_%s_at_%d", lastName, cut), func(t *testing.T) {
			t.Parallel()
			kept := append([]crFrame(nil), earlier...)
			torn := false
			for _, f := range fl {
				if f.end <= cut {
					kept = append(kept, f)
				} else if f.off < cut {
					// Part of this frame is left: torn, unless what is
					// left is only zeros (then it reads as the end).
					torn = len(strings.Trim(string(b[f.off:cut]), "\x00")) > 0
				}
			}
			if cut > 0 && cut < crSegHeader {
				torn = true // a partial segment header
			}
			dir := crWriteDir(t, l, func(name string, data []byte) []byte {
				if name == lastName {
					return data[:cut]
				}
				return data
			})
			var logWant []string
			if torn {
				logWant = []string{"torn tail"}
			}
			crCheckRecovered(t, l, dir, crReplay(kept), crMaxID(kept), logWant...)
		})
	}
}

// Damage in the middle of the log. A flipped byte in a record's payload
// (a put's body): only that record is lost, the rest is read and the damage
// reported. A flipped byte in a frame header of an earlier segment: the
// rest of that segment cannot be located and is lost, later segments are
// read, the damage is reported, and no id is handed out twice.
func TestBinlogCorruptRecord(t *testing.T) {
	skipLegacy(t, "beanpole's binlog format")
	t.Parallel()
	l := crMakeLog(t)
	first := l.segs[0]
	ff := l.frames[first]
	// A put in the middle of the first segment.
	var victim crFrame
	for i := len(ff) / 2; i < len(ff)-1; i++ {
		if ff[i].kind == 1 {
			victim = ff[i]
			break
		}
	}
	if victim.kind != 1 {
		t.Fatalf("no full record in the middle of binlog.%d: %v", first, ff)
	}
	name := "binlog." + itoa(first)

	t.Run("payload", func(t *testing.T) {
		t.Parallel()
		var kept []crFrame
		for _, f := range l.all() {
			if f != victim {
				kept = append(kept, f)
			}
		}
		dir := crWriteDir(t, l, func(n string, b []byte) []byte {
			if n == name {
				b[victim.end-2] ^= 0x20 // a byte of the body
			}
			return b
		})
		want := crReplay(kept)
		if _, live := want[victim.id]; live {
			t.Fatalf("job %d should be lost with its only full record", victim.id)
		}
		crCheckRecovered(t, l, dir, want, l.maxID, "corrupt record",
			fmt.Sprintf("%s offset %d", name, victim.off), fmt.Sprintf("jobs [%d]", victim.id))
	})

	t.Run("frame header", func(t *testing.T) {
		t.Parallel()
		var kept []crFrame
		for _, f := range l.all() {
			if f.seg == first && f.off >= victim.off {
				continue
			}
			kept = append(kept, f)
		}
		dir := crWriteDir(t, l, func(n string, b []byte) []byte {
			if n == name {
				b[victim.off+6] ^= 0x01 // a byte of the LSN
			}
			return b
		})
		// Ids of records lost this way were acknowledged: the id marks of
		// later segments keep them from being handed out again.
		crCheckRecovered(t, l, dir, crReplay(kept), l.maxID, "unreadable data", fmt.Sprintf("%s offset %d", name, victim.off))
	})
}
