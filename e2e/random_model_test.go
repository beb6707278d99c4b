package e2e

// The linearizable phase of TestRandomizedClientsAgainstModel: connections
// that send only the job-moving commands (put, reserve-with-timeout,
// reserve-job, delete, release, bury, touch, kick, kick-job) and a few
// readers (peek, peek-ready, peek-buried, stats-job, stats-tube) record a
// history, and porcupine checks that some order of its operations, each
// placed between its invocation and its response, is a run of the
// sequential model below.
//
// Tubes. Even rounds use tube default only. Odd rounds use two tubes: each
// connection is given, before the round, a used tube and a watch list of
// one or both, so that a reserve must pick the most urgent job across the
// tubes it watches (where per-tube locking could go wrong); the use and
// watch commands are outside the history.
//
// Pipelining. Each connection writes a batch of 1-5 commands at once and
// reads their replies before the next batch. Every command is its own
// operation: invoked when the batch was written, responded when its reply
// was read, so the operations of one batch overlap in time. The server
// executes a connection's commands in order, but porcupine only knows real
// time, so the model enforces program order itself: an operation carries
// its connection and its position in that connection's order, and the
// state holds, per connection, the position of the next operation allowed
// to take effect; Step refuses any other. (ClientId is only used by
// porcupine's visualization; it is the connection times the batch size plus
// the position in the batch, so that one row never holds two overlapping
// operations.)
//
// Rounds. A history is one round of about 200 operations on a server that
// starts the round with its tubes empty: each connection sends its random
// batches, then releases whatever it still holds; then a drainer kicks
// every buried job and reserves and deletes until TIMED_OUT, and ends with
// stats-tube on each tube, whose counts the model must match (all zero), so
// the model state at the end of a round is empty and the next round starts
// from the empty state too. TTRs are long (no timeouts) and there are no
// delays, no pauses and no closes, so every reply is determined by the
// order of the operations.
//
// Ids. The model takes a put's id from its INSERTED reply and orders ready
// jobs by (pri, id) as beanstalkd does; it assumes nothing about the order
// in which ids become visible (with -b a put is visible only once durable,
// so a higher id can appear before a lower one).

import (
	"cmp"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// ---------------------------------------------------------------------------
// The sequential model.

// linTubes are the phase's tubes; single-tube rounds use the first only.
var linTubes = []string{"default", "lin-b"}

type linInput struct {
	client int // connection index
	seq    int // position in the connection's program order
	kind   cmdKind
	id     uint64
	pri    uint32
	n      int   // kick bound
	tube   int   // the used tube: put, kick, peek-ready, peek-buried; stats-tube's argument
	watch  uint8 // reserve-with-timeout: the watched tubes, one bit each
}

type linOutput struct {
	word   string
	id     uint64 // INSERTED, RESERVED, FOUND
	n      int    // KICKED count
	state  string // stats-job
	tube   string // stats-job
	pri    uint32 // stats-job
	counts [5]int // stats-tube: urgent, ready, reserved, delayed, buried
}

type linJobState uint8

const (
	linReady linJobState = iota
	linReserved
	linBuried
)

var linStateNames = [...]string{"ready", "reserved", "buried"}

type linJob struct {
	id    uint64
	pri   uint32
	tube  int
	state linJobState
	owner int // reserved: the connection holding it; otherwise 0, so equal states compare equal
}

// linState is the queues of the tubes. Step never modifies a state: it
// clones it first.
type linState struct {
	jobs   []linJob    // sorted by id
	buried [2][]uint64 // per tube of linTubes, the buried list, oldest first
	next   []int       // per connection: the seq of its next operation
}

func (s linState) clone() linState {
	return linState{jobs: slices.Clone(s.jobs), next: slices.Clone(s.next),
		buried: [2][]uint64{slices.Clone(s.buried[0]), slices.Clone(s.buried[1])}}
}

func (s linState) equal(o linState) bool {
	return slices.Equal(s.jobs, o.jobs) && slices.Equal(s.next, o.next) &&
		slices.Equal(s.buried[0], o.buried[0]) && slices.Equal(s.buried[1], o.buried[1])
}

func (s linState) find(id uint64) int {
	i, ok := slices.BinarySearchFunc(s.jobs, id, byID)
	if !ok {
		return -1
	}
	return i
}

func byID(j linJob, id uint64) int { return cmp.Compare(j.id, id) }

// topReady is the index of the ready job a reserve watching the tubes in
// mask takes: the smallest (pri, id), or -1.
func (s linState) topReady(mask uint8) int {
	best := -1
	for i, j := range s.jobs {
		if j.state == linReady && mask&(1<<j.tube) != 0 && (best < 0 || j.pri < s.jobs[best].pri) {
			best = i // jobs are in id order, so the first of a priority wins ties
		}
	}
	return best
}

func (s linState) counts(tube int) [5]int {
	var c [5]int // urgent, ready, reserved, delayed, buried
	for _, j := range s.jobs {
		if j.tube != tube {
			continue
		}
		switch j.state {
		case linReady:
			c[1]++
			if j.pri < 1024 {
				c[0]++
			}
		case linReserved:
			c[2]++
		case linBuried:
			c[4]++
		}
	}
	return c
}

func (s *linState) unbury(j linJob) {
	if i := slices.Index(s.buried[j.tube], j.id); i >= 0 {
		s.buried[j.tube] = slices.Delete(s.buried[j.tube], i, i+1)
	}
}

// linStep is the model's Step: the operation must be its connection's next,
// and its output must be what the queue gives in this state.
func linStep(s linState, in linInput, out linOutput) (bool, linState) {
	if s.next[in.client] != in.seq {
		return false, s
	}
	n := s.clone()
	n.next[in.client]++
	return n.apply(in, out), n
}

// apply performs one operation on a state that is already a private clone.
// The output's word is one replyFits allows for the command.
func (s *linState) apply(in linInput, out linOutput) bool {
	j := s.find(in.id)
	notFound := out.word == "NOT_FOUND"
	switch in.kind {
	case kPut:
		if s.find(out.id) >= 0 {
			return false
		}
		i, _ := slices.BinarySearchFunc(s.jobs, out.id, byID)
		s.jobs = slices.Insert(s.jobs, i, linJob{id: out.id, pri: in.pri, tube: in.tube, state: linReady})
		return true
	case kReserveTimeout:
		top := s.topReady(in.watch)
		if out.word == "TIMED_OUT" || top < 0 {
			return out.word == "TIMED_OUT" && top < 0
		}
		if out.word != "RESERVED" || s.jobs[top].id != out.id {
			return false
		}
		s.jobs[top].state, s.jobs[top].owner = linReserved, in.client
		return true
	case kReserveJob:
		if ok := j >= 0 && s.jobs[j].state != linReserved; notFound || !ok {
			return notFound && !ok
		}
		s.unbury(s.jobs[j])
		s.jobs[j].state, s.jobs[j].owner = linReserved, in.client
		return true
	case kDelete:
		if ok := j >= 0 && (s.jobs[j].state != linReserved || s.jobs[j].owner == in.client); notFound || !ok {
			return notFound && !ok
		}
		s.unbury(s.jobs[j])
		s.jobs = slices.Delete(s.jobs, j, j+1)
		return true
	case kRelease, kBury, kTouch:
		if ok := j >= 0 && s.jobs[j].state == linReserved && s.jobs[j].owner == in.client; notFound || !ok {
			return notFound && !ok
		}
		switch in.kind {
		case kRelease:
			s.jobs[j].state, s.jobs[j].pri, s.jobs[j].owner = linReady, in.pri, 0
		case kBury:
			s.jobs[j].state, s.jobs[j].pri, s.jobs[j].owner = linBuried, in.pri, 0
			s.buried[s.jobs[j].tube] = append(s.buried[s.jobs[j].tube], in.id)
		}
		return true
	case kKick:
		buried := s.buried[in.tube]
		k := min(in.n, len(buried))
		if out.n != k {
			return false
		}
		for _, id := range buried[:k] {
			s.jobs[s.find(id)].state = linReady
		}
		s.buried[in.tube] = buried[k:]
		return true
	case kKickJob:
		if ok := j >= 0 && s.jobs[j].state == linBuried; notFound || !ok {
			return notFound && !ok
		}
		s.unbury(s.jobs[j])
		s.jobs[j].state = linReady
		return true
	case kPeek:
		return notFound == (j < 0)
	case kPeekReady:
		top := s.topReady(1 << in.tube)
		if notFound || top < 0 {
			return notFound && top < 0
		}
		return s.jobs[top].id == out.id
	case kPeekBuried:
		buried := s.buried[in.tube]
		if notFound || len(buried) == 0 {
			return notFound && len(buried) == 0
		}
		return buried[0] == out.id
	case kStatsJob:
		if notFound || j < 0 {
			return notFound && j < 0
		}
		job := s.jobs[j]
		return out.state == linStateNames[job.state] && out.pri == job.pri && out.tube == linTubes[job.tube]
	case kStatsTube:
		return out.counts == s.counts(in.tube)
	}
	return false
}

func linModel(clients int) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return linState{next: make([]int, clients)} },
		Step: func(s, in, out any) (bool, any) {
			return linStep(s.(linState), in.(linInput), out.(linOutput))
		},
		Equal:             func(a, b any) bool { return a.(linState).equal(b.(linState)) },
		DescribeOperation: func(in, out any) string { return describeLinOp(in.(linInput), out.(linOutput)) },
		DescribeState:     func(s any) string { return s.(linState).String() },
	}
}

func describeLinOp(in linInput, out linOutput) string {
	c := rcmd{kind: in.kind, id: in.id, pri: in.pri, n: in.n, tube: linTubes[in.tube]}
	var what string
	switch in.kind {
	case kPut:
		what = fmt.Sprintf("put pri %d into %s", in.pri, linTubes[in.tube])
	case kReserveTimeout:
		var watched []string
		for i, name := range linTubes {
			if in.watch&(1<<i) != 0 {
				watched = append(watched, name)
			}
		}
		what = fmt.Sprintf("reserve-with-timeout watching %v", watched)
	case kKick, kPeekReady, kPeekBuried:
		what = c.String() + " in " + linTubes[in.tube]
	default:
		what = c.String()
	}
	res := out.word
	switch {
	case out.id != 0 && out.word != "NOT_FOUND":
		res += " " + strconv.FormatUint(out.id, 10)
	case out.n >= 0 && out.word == "KICKED" && in.kind == kKick:
		res += " " + strconv.Itoa(out.n)
	case in.kind == kStatsJob && out.word == "OK":
		res = fmt.Sprintf("%s pri %d in %s", out.state, out.pri, out.tube)
	case in.kind == kStatsTube:
		res = fmt.Sprintf("urgent/ready/reserved/delayed/buried %v", out.counts)
	}
	return fmt.Sprintf("c%d#%d %s -> %s", in.client, in.seq, what, res)
}

func (s linState) String() string {
	var b strings.Builder
	for _, j := range s.jobs {
		fmt.Fprintf(&b, "%d:%s/%s/pri %d", j.id, linTubes[j.tube], linStateNames[j.state], j.pri)
		if j.state == linReserved {
			fmt.Fprintf(&b, " by c%d", j.owner)
		}
		b.WriteString("; ")
	}
	fmt.Fprintf(&b, "buried list %v; next ops %v", s.buried, s.next)
	return b.String()
}

// ---------------------------------------------------------------------------
// Recording rounds against the server.

const (
	linClients      = 6
	linOpsPerClient = 30
	linMaxBatch     = 5
	linTTR          = 120 // seconds: no reservation times out during a round
)

var linWeights = []weightedKind{
	{kPut, 24}, {kReserveTimeout, 20}, {kDelete, 10}, {kRelease, 9}, {kBury, 6}, {kKick, 4},
	{kKickJob, 3}, {kTouch, 2}, {kReserveJob, 4}, {kPeek, 2}, {kPeekReady, 4}, {kPeekBuried, 3},
	{kStatsJob, 3}, {kStatsTube, 2},
}

var linPriorities = []uint32{0, 1, 2, 1024}

// linRound is the shared record of one round.
type linRound struct {
	mu      sync.Mutex
	num     int
	tubes   int // how many of linTubes the round uses
	start   time.Time
	bodies  map[string][]byte // token -> body of every put sent
	idOf    map[string]uint64 // token -> id, once a reply told it
	tokenOf map[uint64]string
	recent  []uint64
	ops     []porcupine.Operation
	errs    []string
}

func (lr *linRound) failed() bool {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return len(lr.errs) > 0
}

// linClient is one connection of the phase, kept across rounds.
type linClient struct {
	idx   int
	c     *conn
	srv   *server
	rng   *rand.Rand
	seq   int
	held  []uint64
	used  int   // index in linTubes
	watch uint8 // watched tubes, one bit each
	log   []string
}

func (cl *linClient) fail(lr *linRound, format string, args ...any) {
	msg := fmt.Sprintf("round %d, connection c%d: %s%s\n  its last commands and replies:\n    %s",
		lr.num, cl.idx, fmt.Sprintf(format, args...), serverExit(cl.srv), strings.Join(cl.log, "\n    "))
	lr.mu.Lock()
	lr.errs = append(lr.errs, msg)
	lr.mu.Unlock()
}

func serverExit(s *server) string {
	select {
	case <-s.exited:
		return fmt.Sprintf(" (the server has exited: %v)", s.waitErr)
	default:
		return ""
	}
}

func (cl *linClient) note(line string) {
	cl.log = append(cl.log, line)
	if len(cl.log) > 30 {
		cl.log = cl.log[len(cl.log)-30:]
	}
}

// play sends the connection's random batches for one round, then releases
// what it still holds.
func (cl *linClient) play(lr *linRound) {
	for left := linOpsPerClient; left > 0 && !lr.failed(); {
		var cmds []*rcmd
		for range min(left, 1+cl.rng.IntN(linMaxBatch)) {
			cmds = append(cmds, cl.randomCommand(lr))
		}
		if !cl.exchange(lr, cmds) {
			return
		}
		left -= len(cmds)
	}
	for len(cl.held) > 0 && !lr.failed() {
		var cmds []*rcmd
		for _, id := range cl.held[:min(len(cl.held), linMaxBatch)] {
			cmds = append(cmds, &rcmd{kind: kRelease, id: id, pri: linPriorities[cl.rng.IntN(len(linPriorities))]})
		}
		if !cl.exchange(lr, cmds) {
			return
		}
	}
}

func (cl *linClient) randomCommand(lr *linRound) *rcmd {
	rng := cl.rng
	c := &rcmd{kind: drawKind(rng, linWeights), pri: linPriorities[rng.IntN(len(linPriorities))]}
	switch c.kind {
	case kPut:
		c.ttr = linTTR
		lr.mu.Lock()
		c.body = makeBody(rng, fmt.Sprintf("L%d.", lr.num), len(lr.bodies))
		tok, _ := bodyToken(c.body)
		lr.bodies[tok] = c.body
		lr.mu.Unlock()
	case kReserveTimeout:
		if rng.IntN(20) == 0 {
			c.n = 1 // a waiting reserve, served by a later put or release
		}
	case kKick:
		c.n = 1 + rng.IntN(3)
	case kStatsTube:
		c.tube = linTubes[rng.IntN(lr.tubes)]
	case kDelete, kRelease, kBury, kTouch, kReserveJob, kKickJob, kPeek, kStatsJob:
		c.id = cl.pickID(lr)
	}
	return c
}

// pickID names mostly a job this connection holds, else one seen this
// round, now and then one that does not exist.
func (cl *linClient) pickID(lr *linRound) uint64 {
	if len(cl.held) > 0 && cl.rng.IntN(5) < 3 {
		return cl.held[cl.rng.IntN(len(cl.held))]
	}
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if len(lr.recent) == 0 || cl.rng.IntN(20) == 0 {
		return rFakeBase
	}
	return lr.recent[cl.rng.IntN(len(lr.recent))]
}

// exchange writes a batch at once and records one operation per reply.
func (cl *linClient) exchange(lr *linRound, cmds []*rcmd) bool {
	var out strings.Builder
	for _, c := range cmds {
		out.WriteString(c.wire())
		cl.note("-> " + c.String())
	}
	sent := time.Now()
	_ = cl.c.nc.SetWriteDeadline(sent.Add(rPatience))
	if _, err := cl.c.nc.Write([]byte(out.String())); err != nil {
		cl.fail(lr, "write: %v", err)
		return false
	}
	for i, c := range cmds {
		r, err := readReply(cl.c, c.replyDue(sent))
		if err != nil {
			cl.fail(lr, "no reply to %s: %v", c, err)
			return false
		}
		cl.note("<- " + r.line)
		o, err := linOutputOf(c, &r)
		if err == nil {
			err = lr.checkIdentity(c, &r)
		}
		if err != nil {
			cl.fail(lr, "%s got %s: %v", c, r.line, err)
			return false
		}
		cl.track(c, o)
		lr.record(porcupine.Operation{
			ClientId: cl.idx*linMaxBatch + i,
			Input:    cl.input(c),
			Call:     int64(sent.Sub(lr.start)),
			Output:   o,
			Return:   int64(r.at.Sub(lr.start)),
		})
		cl.seq++
	}
	return true
}

// input is the model's view of a command: for the commands that act on a
// tube, the tube, and for a reserve, the watch list.
func (cl *linClient) input(c *rcmd) linInput {
	in := linInput{client: cl.idx, seq: cl.seq, kind: c.kind, id: c.id, pri: c.pri, n: c.n, tube: cl.used, watch: cl.watch}
	if c.kind == kStatsTube {
		in.tube = slices.Index(linTubes, c.tube)
	}
	return in
}

// configure sets the connection's used tube and watch list for a round.
// These commands are not part of the history: they touch no job.
func (cl *linClient) configure(used int, watch uint8) error {
	var cmds []*rcmd
	if used != cl.used {
		cmds = append(cmds, &rcmd{kind: kUse, tube: linTubes[used]})
	}
	for i, name := range linTubes { // watch before ignoring, so the list is never empty
		if watch&(1<<i) != 0 && cl.watch&(1<<i) == 0 {
			cmds = append(cmds, &rcmd{kind: kWatch, tube: name})
		}
	}
	for i, name := range linTubes {
		if watch&(1<<i) == 0 && cl.watch&(1<<i) != 0 {
			cmds = append(cmds, &rcmd{kind: kIgnore, tube: name})
		}
	}
	var out strings.Builder
	for _, c := range cmds {
		out.WriteString(c.wire())
	}
	if _, err := io.WriteString(cl.c.nc, out.String()); err != nil {
		return err
	}
	for _, c := range cmds {
		r, err := readReply(cl.c, time.Now().Add(rPatience))
		if err != nil {
			return fmt.Errorf("%s: %v", c, err)
		}
		if !replyFits(c, &r) || r.word == "NOT_IGNORED" || c.kind == kUse && r.name != c.tube {
			return fmt.Errorf("%s got %s", c, r.line)
		}
	}
	cl.used, cl.watch = used, watch
	return nil
}

// track keeps the set of jobs the connection holds, to choose ids and to
// release them at the end of the round. Any answer to a delete, release or
// bury ends the hold (a NOT_FOUND too: then the server says it held
// nothing, which the model judges), so that the round always ends.
func (cl *linClient) track(c *rcmd, o linOutput) {
	switch {
	case o.word == "RESERVED":
		cl.held = append(cl.held, o.id)
	case relinquishes(c.kind) || c.kind == kTouch && o.word == "NOT_FOUND":
		if i := slices.Index(cl.held, c.id); i >= 0 {
			cl.held = slices.Delete(cl.held, i, i+1)
		}
	}
}

func (lr *linRound) record(op porcupine.Operation) {
	lr.mu.Lock()
	lr.ops = append(lr.ops, op)
	lr.mu.Unlock()
}

// linOutputOf checks a reply's form and turns it into the model's output.
func linOutputOf(c *rcmd, r *rreply) (linOutput, error) {
	if !replyFits(c, r) || c.kind == kReserveTimeout && r.word == "DEADLINE_SOON" {
		return linOutput{}, fmt.Errorf("not a reply to this command (out of order?)")
	}
	o := linOutput{word: r.word, id: r.id, n: r.n}
	if r.word != "OK" {
		return o, nil
	}
	y, err := parseYAMLDict(r.body)
	if err != nil {
		return o, err
	}
	switch c.kind {
	case kStatsJob:
		pri, err := strconv.ParseUint(y["pri"], 10, 32)
		if err != nil || y["id"] != strconv.FormatUint(c.id, 10) {
			return o, fmt.Errorf("bad stats-job body %s", show(string(r.body)))
		}
		o.state, o.pri, o.tube = y["state"], uint32(pri), unquote(y["tube"])
	case kStatsTube:
		for i, k := range []string{"urgent", "ready", "reserved", "delayed", "buried"} {
			if o.counts[i], err = strconv.Atoi(y["current-jobs-"+k]); err != nil {
				return o, fmt.Errorf("bad stats-tube body %s", show(string(r.body)))
			}
		}
	}
	return o, nil
}

// checkIdentity checks that ids and put bodies correspond one to one and
// that every job body returned is exactly the one put.
func (lr *linRound) checkIdentity(c *rcmd, r *rreply) error {
	var tok string
	switch {
	case c.kind == kPut:
		tok, _ = bodyToken(c.body)
	case r.word == "RESERVED" || r.word == "FOUND":
		tok, _ = bodyToken(r.body)
	default:
		return nil
	}
	lr.mu.Lock()
	defer lr.mu.Unlock()
	body, ok := lr.bodies[tok]
	if !ok || c.kind != kPut && string(body) != string(r.body) {
		return fmt.Errorf("job %d has body %q, which no put of this round sent", r.id, r.body)
	}
	if id, ok := lr.idOf[tok]; ok && id != r.id {
		return fmt.Errorf("the put of %q has ids %d and %d", tok, id, r.id)
	}
	if t, ok := lr.tokenOf[r.id]; ok && t != tok {
		return fmt.Errorf("id %d belongs to the puts of %q and %q", r.id, t, tok)
	}
	if _, ok := lr.idOf[tok]; !ok {
		lr.idOf[tok], lr.tokenOf[r.id] = r.id, tok
		lr.recent = append(lr.recent, r.id)
	}
	return nil
}

// drain empties the tubes after the connections are done: kick every
// buried job, reserve and delete until TIMED_OUT, and read each tube's
// counts. It watches every tube and uses each in turn to kick it.
func (cl *linClient) drain(lr *linRound) {
	for i := range linTubes {
		if err := cl.configure(i, 1<<len(linTubes)-1); err != nil {
			cl.fail(lr, "setting up the drain: %v", err)
			return
		}
		if !cl.exchange(lr, []*rcmd{{kind: kKick, n: 1 << 20}}) {
			return
		}
	}
	for range 10000 {
		if !cl.exchange(lr, []*rcmd{{kind: kReserveTimeout}}) {
			return
		}
		if len(cl.held) == 0 {
			break
		}
		if !cl.exchange(lr, []*rcmd{{kind: kDelete, id: cl.held[0]}}) {
			return
		}
	}
	for _, name := range linTubes {
		if !cl.exchange(lr, []*rcmd{{kind: kStatsTube, tube: name}}) {
			return
		}
	}
}

// ---------------------------------------------------------------------------
// Running the phase and checking each round.

func runLinearizabilityPhase(t *testing.T, s *server, m randomMode, seed uint64, d time.Duration) {
	deadline := time.Now().Add(d)
	clients := make([]*linClient, linClients+1) // the last one drains
	for i := range clients {
		clients[i] = &linClient{idx: i, c: s.dial(t), srv: s, rng: rand.New(rand.NewPCG(seed, 1<<32+uint64(i))), watch: 1}
	}
	rng := rand.New(rand.NewPCG(seed, 1<<33))
	rounds, ops := 0, 0
	for rounds == 0 || time.Now().Before(deadline) {
		lr := runLinRound(t, rng, clients, rounds)
		if len(lr.errs) > 0 {
			t.Fatalf("linearizability round %d: %s", rounds, strings.Join(lr.errs, "\n\n"))
		}
		checkLinRound(t, lr)
		rounds++
		ops += len(lr.ops)
	}
	t.Logf("mode %s: %d rounds, %d operations: every round linearizable", m.name, rounds, ops)
}

// runLinRound records one round: odd rounds give each connection a random
// used tube and watch list over two tubes, even ones keep all on default.
func runLinRound(t *testing.T, rng *rand.Rand, clients []*linClient, num int) *linRound {
	t.Helper()
	lr := &linRound{num: num, tubes: 1 + num%2, bodies: map[string][]byte{},
		idOf: map[string]uint64{}, tokenOf: map[uint64]string{}}
	for _, cl := range clients[:linClients] {
		used, watch := 0, uint8(1)
		if lr.tubes == 2 {
			used, watch = rng.IntN(2), uint8(1+rng.IntN(3))
		}
		if err := cl.configure(used, watch); err != nil {
			t.Fatalf("round %d: setting up connection c%d: %v", num, cl.idx, err)
		}
		cl.seq, cl.held = 0, nil
	}
	lr.start = time.Now()
	var wg sync.WaitGroup
	for _, cl := range clients[:linClients] {
		wg.Go(func() { cl.play(lr) })
	}
	wg.Wait()
	if !lr.failed() {
		drainer := clients[linClients]
		drainer.seq, drainer.held = 0, nil
		drainer.drain(lr)
	}
	return lr
}

// checkLinRound runs porcupine on a round's history. On a violation it
// writes porcupine's visualization to the test's artifact directory (kept
// with go test -artifacts) and reports the longest linearizable prefix and
// the operation each connection could not take next.
func checkLinRound(t *testing.T, lr *linRound) {
	t.Helper()
	model := linModel(linClients + 1)
	res, info := porcupine.CheckOperationsVerbose(model, lr.ops, 60*time.Second)
	switch res {
	case porcupine.Ok:
		return
	case porcupine.Unknown:
		t.Logf("round %d: porcupine gave up after 60s on %d operations (not counted as a failure)", lr.num, len(lr.ops))
		return
	}
	dir := t.ArtifactDir()
	path := filepath.Join(dir, fmt.Sprintf("round-%d.html", lr.num))
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		path = "(visualization failed: " + err.Error() + ")"
	}
	history := filepath.Join(dir, fmt.Sprintf("round-%d.txt", lr.num))
	if err := os.WriteFile(history, []byte(describeHistory(model, lr.ops)), 0o644); err != nil {
		history = "(history not written: " + err.Error() + ")"
	}
	t.Fatalf("round %d is not linearizable (%d operations); visualization %s, history %s (kept with go test -artifacts)\n%s",
		lr.num, len(lr.ops), path, history, explainNonLinearizable(model, lr.ops, info))
}

// describeHistory lists a round's operations by invocation time, one a line.
func describeHistory(model porcupine.Model, ops []porcupine.Operation) string {
	sorted := slices.Clone(ops)
	slices.SortStableFunc(sorted, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	var b strings.Builder
	for _, op := range sorted {
		fmt.Fprintf(&b, "%9.3fms %9.3fms  %s\n", float64(op.Call)/1e6, float64(op.Return)/1e6, model.DescribeOperation(op.Input, op.Output))
	}
	return b.String()
}

// explainNonLinearizable replays the longest partial linearization porcupine
// found and lists, for each connection, the next operation that no order
// could take from there.
func explainNonLinearizable(model porcupine.Model, ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	var longest []porcupine.Operation
	for _, partition := range info.PartialLinearizationsOperations() {
		for _, lin := range partition {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
	}
	var b strings.Builder
	state := model.Init()
	fmt.Fprintf(&b, "longest linearizable prefix (%d operations), last steps:\n", len(longest))
	for i, op := range longest {
		_, state = model.Step(state, op.Input, op.Output)
		if i >= len(longest)-15 {
			fmt.Fprintf(&b, "  %s\n", model.DescribeOperation(op.Input, op.Output))
		}
	}
	st := state.(linState)
	fmt.Fprintf(&b, "state then: %s\nnext operation of each connection (none fits):\n", st)
	for _, op := range ops {
		in := op.Input.(linInput)
		if in.seq == st.next[in.client] {
			fmt.Fprintf(&b, "  %s   [invoked %.3fms, answered %.3fms into the round]\n",
				model.DescribeOperation(op.Input, op.Output), float64(op.Call)/1e6, float64(op.Return)/1e6)
		}
	}
	return b.String()
}
