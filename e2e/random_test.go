package e2e

// A randomized test of the whole server against what its history allows.
//
// Each mode (no binlog, -b with -f 0, -b with -f 50) runs two phases, each on
// its own fresh server:
//
//   - invariants (this file): a dozen connections (mixed, consumers that
//     often pipeline a worker's step, producers) send random pipelined
//     batches of every command over four tubes, end their connections in
//     every way (quit, half-close, abrupt close, a reserve left parked), and
//     every reply is checked when it arrives against what the history so far
//     allows: its form, per-connection state (use/watch/ignore), job bodies,
//     that no job is held by two connections at once, that a deleted job is
//     never seen again and an acknowledged one never vanishes, that paused
//     tubes and watch lists are respected. At the end the server is quiescent
//     and every job it holds, its stats counters and its emptiness after a
//     drain are reconciled with the history.
//   - linearizable (random_model_test.go): connections restricted to one or
//     two tubes and the job-moving commands record short histories that
//     porcupine checks against a sequential model of beanstalkd's queues.
//
// A failure names the mode, the broken rule and the offending connection's
// last commands and replies (or, for a non-linearizable round, the longest
// linearizable prefix and each connection's next operation, plus porcupine's
// visualization, kept with go test -artifacts). To run one mode:
// -run 'TestRandomizedClientsAgainstModel/binlog-f0'.
//
// Environment:
//
//	BEANPOLE_RANDOM_SEED=N      the seed of the connections' random streams
//	                            (logged by every run; the interleaving of the
//	                            connections is the scheduler's, so a replay
//	                            sends the same kinds of batches, not the same
//	                            history)
//	BEANPOLE_RANDOM_DURATION=D  the wall time of the test (e.g. 30m, with a
//	                            go test -timeout above it) instead of about
//	                            10 s; the three modes run side by side, each
//	                            for D, split between its two phases
//
// No assertion depends on timing tighter than rSlack around a TTR, a pause or
// a reserve timeout, and none on how fast the server is: a reply is late only
// after rPatience.

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	// rSlack is the margin allowed around every server-side timer (TTR,
	// pause, reserve timeout) when deciding whether it could have fired.
	rSlack = 250 * time.Millisecond
	// rPatience is how long a reply that is due may take before it counts
	// as lost. Generous: the server may be a -race build on a loaded machine.
	rPatience = 20 * time.Second
	// rParkPatience is how long a plain reserve may wait before the worker
	// gives up on it and closes its connection (nothing guarantees a job).
	rParkPatience = time.Second
	// rDefaultDuration is each mode's wall time without BEANPOLE_RANDOM_DURATION.
	rDefaultDuration = 10 * time.Second
)

type randomMode struct {
	name   string
	binlog bool
	fsync  string // -f argument with -b
}

var randomModes = []randomMode{
	{"nobinlog", false, ""},
	{"binlog-f0", true, "0"},
	{"binlog-f50", true, "50"},
}

func (m randomMode) flags(t *testing.T) []string {
	if !m.binlog {
		return nil
	}
	return []string{"-b", t.TempDir(), "-f", m.fsync}
}

func TestRandomizedClientsAgainstModel(t *testing.T) {
	t.Parallel()
	seed, perMode := randomSettings(t)
	t.Logf("seed %d (replay with BEANPOLE_RANDOM_SEED=%d); %v per mode, the modes side by side", seed, seed, perMode)
	for i, m := range randomModes {
		modeSeed := seed + uint64(i)*1_000_003
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			linTime := perMode * 2 / 5
			t.Run("linearizable", func(t *testing.T) {
				runLinearizabilityPhase(t, startServer(t, m.flags(t)...), m, modeSeed, linTime)
			})
			t.Run("invariants", func(t *testing.T) {
				runInvariantPhase(t, startServer(t, m.flags(t)...), m, modeSeed, perMode-linTime)
			})
		})
	}
}

// randomSettings reads the seed and the per-mode duration from the
// environment; the seed defaults to the clock, so that every run explores
// new batches, and is always logged.
func randomSettings(t *testing.T) (seed uint64, perMode time.Duration) {
	seed = uint64(time.Now().UnixNano())
	if v := os.Getenv("BEANPOLE_RANDOM_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("BEANPOLE_RANDOM_SEED=%q: %v", v, err)
		}
		seed = n
	}
	perMode = rDefaultDuration
	if testing.Short() {
		perMode = 6 * time.Second
	}
	if v := os.Getenv("BEANPOLE_RANDOM_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("BEANPOLE_RANDOM_DURATION=%q: want a positive Go duration", v)
		}
		perMode = d
	}
	return seed, perMode
}

// ---------------------------------------------------------------------------
// Commands and replies on the wire.

type cmdKind int

const (
	kPut cmdKind = iota
	kReserve
	kReserveTimeout
	kReserveJob
	kRelease
	kBury
	kTouch
	kDelete
	kKick
	kKickJob
	kPeek
	kPeekReady
	kPeekDelayed
	kPeekBuried
	kStatsJob
	kStatsTube
	kStats
	kUse
	kWatch
	kIgnore
	kPauseTube
	kListTubeUsed
	kListTubesWatched
	kListTubes
	numCmdKinds
)

// cmdVerbs and cmdCounters give each kind's wire verb and the global stats
// counter that counts it ("": none is exposed).
var cmdVerbs = [numCmdKinds]string{
	"put", "reserve", "reserve-with-timeout", "reserve-job", "release", "bury", "touch", "delete",
	"kick", "kick-job", "peek", "peek-ready", "peek-delayed", "peek-buried", "stats-job",
	"stats-tube", "stats", "use", "watch", "ignore", "pause-tube", "list-tube-used",
	"list-tubes-watched", "list-tubes",
}

var cmdCounters = [numCmdKinds]string{
	"cmd-put", "cmd-reserve", "cmd-reserve-with-timeout", "", "cmd-release", "cmd-bury", "cmd-touch", "cmd-delete",
	"cmd-kick", "", "cmd-peek", "cmd-peek-ready", "cmd-peek-delayed", "cmd-peek-buried", "cmd-stats-job",
	"cmd-stats-tube", "cmd-stats", "cmd-use", "cmd-watch", "cmd-ignore", "cmd-pause-tube", "cmd-list-tube-used",
	"cmd-list-tubes-watched", "cmd-list-tubes",
}

// rcmd is one command of a batch. Only the fields its kind uses are set.
type rcmd struct {
	kind  cmdKind
	id    uint64 // job operand
	pri   uint32 // put, release, bury
	delay int    // put, release, pause-tube: seconds
	ttr   int    // put
	n     int    // kick bound; reserve-with-timeout seconds
	tube  string // stats-tube, use, watch, ignore, pause-tube
	body  []byte // put
	put   *rput  // put, invariant phase: its record
	pause *rpause
}

func (c *rcmd) wire() string {
	v := cmdVerbs[c.kind]
	switch c.kind {
	case kPut:
		return fmt.Sprintf("put %d %d %d %d\r\n%s\r\n", c.pri, c.delay, c.ttr, len(c.body), c.body)
	case kReserveTimeout, kKick:
		return fmt.Sprintf("%s %d\r\n", v, c.n)
	case kReserveJob, kTouch, kDelete, kKickJob, kPeek, kStatsJob:
		return fmt.Sprintf("%s %d\r\n", v, c.id)
	case kRelease:
		return fmt.Sprintf("release %d %d %d\r\n", c.id, c.pri, c.delay)
	case kBury:
		return fmt.Sprintf("bury %d %d\r\n", c.id, c.pri)
	case kStatsTube, kUse, kWatch, kIgnore:
		return v + " " + c.tube + "\r\n"
	case kPauseTube:
		return fmt.Sprintf("pause-tube %s %d\r\n", c.tube, c.delay)
	}
	return v + "\r\n"
}

// replyDue is when the reply to a command sent at sent is overdue: after
// rPatience, plus a reserve-with-timeout's own timeout.
func (c *rcmd) replyDue(sent time.Time) time.Time {
	if c.kind == kReserveTimeout {
		sent = sent.Add(time.Duration(c.n) * time.Second)
	}
	return sent.Add(rPatience)
}

// String is the command line without its CRLF, a put's body shown by token.
func (c *rcmd) String() string {
	if c.kind == kPut {
		tok, _ := bodyToken(c.body)
		return fmt.Sprintf("put %d %d %d %d (body %s...)", c.pri, c.delay, c.ttr, len(c.body), tok)
	}
	return strings.TrimSuffix(c.wire(), "\r\n")
}

// rreply is one parsed reply.
type rreply struct {
	line  string // the reply line without CRLF
	word  string // its first word
	id    uint64 // INSERTED, RESERVED, FOUND, BURIED <id>
	n     int    // KICKED, WATCHING count; -1 when absent
	name  string // USING
	body  []byte // RESERVED, FOUND: the job body; OK: the YAML
	at    time.Time
	hasID bool
}

// replyWords with no argument: every one-word reply of the protocol.
var replyWords = map[string]bool{
	"TIMED_OUT": true, "DEADLINE_SOON": true, "NOT_FOUND": true, "DELETED": true, "RELEASED": true,
	"TOUCHED": true, "PAUSED": true, "NOT_IGNORED": true, "BURIED": true, "KICKED": true,
	"OUT_OF_MEMORY": true, "INTERNAL_ERROR": true, "BAD_FORMAT": true, "UNKNOWN_COMMAND": true,
	"EXPECTED_CRLF": true, "JOB_TOO_BIG": true, "DRAINING": true,
}

// readReply reads one complete reply (line and any body) by deadline and
// checks its framing. It does not know which command it answers.
func readReply(c *conn, deadline time.Time) (rreply, error) {
	line, err := c.lineBy(deadline)
	if err != nil {
		return rreply{}, err
	}
	r := rreply{line: line, n: -1}
	f := strings.Split(line, " ")
	r.word = f[0]
	malformed := fmt.Errorf("malformed reply line %q", line)
	switch {
	case len(f) == 1 && replyWords[r.word]:
	case len(f) == 3 && (r.word == "RESERVED" || r.word == "FOUND"):
		var n int
		if r.id, err = canonicalUint(f[1]); err != nil {
			return r, malformed
		}
		r.hasID = true
		if n, err = canonicalInt(f[2]); err != nil {
			return r, malformed
		}
		if r.body, err = c.chunkBy(n, deadline); err != nil {
			return r, err
		}
	case len(f) == 2 && r.word == "OK":
		n, err := canonicalInt(f[1])
		if err != nil {
			return r, malformed
		}
		if r.body, err = c.chunkBy(n, deadline); err != nil {
			return r, err
		}
	case len(f) == 2 && (r.word == "INSERTED" || r.word == "BURIED"):
		if r.id, err = canonicalUint(f[1]); err != nil {
			return r, malformed
		}
		r.hasID = true
	case len(f) == 2 && (r.word == "KICKED" || r.word == "WATCHING"):
		if r.n, err = canonicalInt(f[1]); err != nil {
			return r, malformed
		}
	case len(f) == 2 && r.word == "USING" && f[1] != "":
		r.name = f[1]
	default:
		return r, malformed
	}
	r.at = time.Now()
	return r, nil
}

// replyFits reports whether r is a reply the protocol allows for c (TIMED_OUT
// to a plain reserve is judged by the caller: only a half-close allows it).
func replyFits(c *rcmd, r *rreply) bool {
	w := r.word
	switch c.kind {
	case kPut:
		return w == "INSERTED"
	case kReserve, kReserveTimeout:
		return w == "RESERVED" || w == "DEADLINE_SOON" || w == "TIMED_OUT"
	case kReserveJob:
		return w == "RESERVED" && r.id == c.id || w == "NOT_FOUND"
	case kRelease:
		return w == "RELEASED" || w == "NOT_FOUND"
	case kBury:
		return w == "BURIED" && !r.hasID || w == "NOT_FOUND"
	case kTouch:
		return w == "TOUCHED" || w == "NOT_FOUND"
	case kDelete:
		return w == "DELETED" || w == "NOT_FOUND"
	case kKick:
		return w == "KICKED" && r.n >= 0 && r.n <= c.n
	case kKickJob:
		return w == "KICKED" && r.n < 0 || w == "NOT_FOUND"
	case kPeek:
		return w == "FOUND" && r.id == c.id || w == "NOT_FOUND"
	case kPeekReady, kPeekDelayed, kPeekBuried:
		return w == "FOUND" || w == "NOT_FOUND"
	case kStatsJob, kStatsTube:
		return w == "OK" || w == "NOT_FOUND"
	case kStats, kListTubesWatched, kListTubes:
		return w == "OK"
	case kUse, kListTubeUsed:
		return w == "USING"
	case kWatch:
		return w == "WATCHING"
	case kIgnore:
		return w == "WATCHING" || w == "NOT_IGNORED"
	case kPauseTube:
		return w == "PAUSED" || w == "NOT_FOUND"
	}
	return false
}

// canonicalUint parses a decimal without sign or leading zeros, as the
// server writes them.
func canonicalUint(s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || strconv.FormatUint(v, 10) != s {
		return 0, fmt.Errorf("not a canonical number: %q", s)
	}
	return v, nil
}

func canonicalInt(s string) (int, error) {
	v, err := canonicalUint(s)
	if err != nil || v > 1<<30 {
		return 0, fmt.Errorf("not a canonical count: %q", s)
	}
	return int(v), nil
}

// lineBy returns the next reply line without its CRLF, reading until deadline.
func (c *conn) lineBy(deadline time.Time) (string, error) {
	for {
		if i := bytes.Index(c.buf, []byte("\r\n")); i >= 0 {
			line := string(c.buf[:i])
			c.buf = c.buf[i+2:]
			return line, nil
		}
		if err := c.fill(deadline); err != nil {
			return "", err
		}
	}
}

// chunkBy returns the next n bytes, which must be followed by CRLF.
func (c *conn) chunkBy(n int, deadline time.Time) ([]byte, error) {
	for len(c.buf) < n+2 {
		if err := c.fill(deadline); err != nil {
			return nil, err
		}
	}
	if string(c.buf[n:n+2]) != "\r\n" {
		return nil, fmt.Errorf("a %d-byte chunk is not followed by CRLF: %s", n, show(string(c.buf[:n+2])))
	}
	b := slices.Clone(c.buf[:n])
	c.buf = c.buf[n+2:]
	return b, nil
}

// parseYAMLDict parses a stats-style body ("---\nkey: value\n...").
func parseYAMLDict(body []byte) (map[string]string, error) {
	s, ok := strings.CutPrefix(string(body), "---\n")
	if !ok || !strings.HasSuffix(s, "\n") {
		return nil, fmt.Errorf("not a YAML dictionary: %s", show(string(body)))
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			return nil, fmt.Errorf("bad YAML line %q", line)
		}
		m[k] = v
	}
	return m, nil
}

// parseYAMLList parses a list-tubes style body ("---\n- a\n- b\n").
func parseYAMLList(body []byte) ([]string, error) {
	s, ok := strings.CutPrefix(string(body), "---\n")
	if !ok || !strings.HasSuffix(s, "\n") {
		return nil, fmt.Errorf("not a YAML list: %s", show(string(body)))
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		v, ok := strings.CutPrefix(line, "- ")
		if !ok {
			return nil, fmt.Errorf("bad YAML list line %q", line)
		}
		out = append(out, unquote(v))
	}
	return out, nil
}

// makeBody returns a job body that starts with its put's unique token
// ("<tag><seq>;") followed by a few random bytes, CR and LF among them, so
// that every body names the put it came from.
func makeBody(rng *rand.Rand, tag string, seq int) []byte {
	b := []byte(fmt.Sprintf("%s%d;", tag, seq))
	for range rng.IntN(24) {
		switch rng.IntN(6) {
		case 0:
			b = append(b, "\r\n"...)
		case 1:
			b = append(b, byte(rng.IntN(256)))
		default:
			b = append(b, byte('a'+rng.IntN(26)))
		}
	}
	return b
}

// bodyToken returns the token a body starts with.
func bodyToken(body []byte) (string, bool) {
	i := bytes.IndexByte(body, ';')
	if i < 0 {
		return "", false
	}
	return string(body[:i+1]), true
}

// tokenSeq parses the sequence number of a token made by makeBody with tag.
func tokenSeq(tok, tag string) (int, bool) {
	s, ok := strings.CutPrefix(strings.TrimSuffix(tok, ";"), tag)
	if !ok {
		return 0, false
	}
	n, err := canonicalInt(s)
	return n, err == nil
}

// weightedKind draws a command kind from a weight table.
type weightedKind struct {
	kind   cmdKind
	weight int
}

func drawKind(rng *rand.Rand, table []weightedKind) cmdKind {
	table = legacySafe(table)
	total := 0
	for _, w := range table {
		total += w.weight
	}
	x := rng.IntN(total)
	for _, w := range table {
		if x < w.weight {
			return w.kind
		}
		x -= w.weight
	}
	panic("unreachable")
}

// legacySafe leaves the peek commands out against C beanstalkd 1.12, whose
// peek sends a copy of the job whose body pointer still points into the
// original (job_copy does not reset it): a job deleted, and its memory
// reused, while the reply waits in the output buffer is sent as garbage.
func legacySafe(table []weightedKind) []weightedKind {
	if !target.legacy {
		return table
	}
	return slices.DeleteFunc(slices.Clone(table), func(w weightedKind) bool {
		return w.kind == kPeek || w.kind == kPeekReady || w.kind == kPeekDelayed || w.kind == kPeekBuried
	})
}

// ---------------------------------------------------------------------------
// The invariant phase: the history as the test sees it.

// rTubes are the invariant phase's tubes; rNoTube is never created by anyone.
var rTubes = []string{"default", "rt-a", "rt-b", "rt-c"}

const rNoTube = "rt-nosuch"

// rFakeBase: ids from here on can never exist (far more than any run puts),
// and every command naming one must get NOT_FOUND.
const rFakeBase = 1 << 40

// rput is one put command the test sent.
type rput struct {
	seq  int
	body []byte
	tube string
	pri  uint32
	ttr  int
	sent time.Time
	// acked: its INSERTED was read.
	acked bool
	job   *rjob // nil until some reply has told its id
}

// rjob is what the history says about one job id.
type rjob struct {
	id   uint64
	put  *rput
	pris map[uint32]bool // every priority it may have: put, releases, buries
	// knownAt is the earliest time a reply proved the job existed.
	knownAt time.Time
	// firstDeleteSent is when a delete naming it was first sent (zero: never).
	firstDeleteSent time.Time
	// deletedAt is when the first DELETED for it was read (zero: never).
	deletedAt time.Time
	// pendingDeletes counts deletes sent and not (yet) answered; those left
	// at the end were never answered and may or may not have deleted it.
	pendingDeletes int
	holds          []*rhold
}

// rhold is one reservation of a job by a connection, as an interval of
// server time: it began somewhere in [sent, got] and ended no earlier than
// minEnd (a relinquishing command sent, the connection ending, or the TTR
// possibly running out). Two holds of one job must be orderable one after
// the other.
type rhold struct {
	connNo int
	sent   time.Time
	got    time.Time
	minEnd time.Time
	ttr    time.Duration
}

// expiryBound is the earliest moment the server may time the hold out: the
// TTR counts from the reservation, which the server made after sent.
func (h *rhold) expiryBound() time.Time { return h.sent.Add(h.ttr - rSlack) }

// rpause is one pause-tube command.
type rpause struct {
	tube  string
	sent  time.Time
	got   time.Time // zero: no PAUSED read (yet)
	delay time.Duration
}

// rworld is the shared history of the invariant phase. Everything in it is
// guarded by mu; each check runs under mu with the reply that triggered it.
type rworld struct {
	mu     sync.Mutex
	srv    *server
	mode   randomMode
	start  time.Time
	puts   []*rput
	jobs   map[uint64]*rjob
	recent []uint64 // ids learned lately, for commands that name a job
	// population is INSERTED replies minus DELETED ones: roughly how many
	// jobs the server holds, kept near rPopulationCap.
	population int
	pauses     map[string][]*rpause
	sent       [numCmdKinds]int
	replied    [numCmdKinds]int
	words      map[string]int // replies by first word, for the log
	dials      int
	violations []string
	stop       atomic.Bool
}

func (w *rworld) since(at time.Time) string {
	return fmt.Sprintf("%.3fs", at.Sub(w.start).Seconds())
}

// violate records a broken invariant with the worker's recent transcript
// and stops the phase.
func (w *rworld) violate(wk *rworker, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if wk != nil {
		msg = fmt.Sprintf("connection #%d (worker %d): %s\n  its last commands and replies:\n%s",
			wk.connNo, wk.idx, msg, wk.transcript())
	}
	if len(w.violations) < 20 {
		w.violations = append(w.violations, msg)
	}
	w.stop.Store(true)
}

// learn binds a put to the id a reply gave it, checking that ids and puts
// correspond one to one.
func (w *rworld) learn(wk *rworker, p *rput, id uint64, how string) *rjob {
	if id >= rFakeBase {
		w.violate(wk, "%s: id %d cannot exist", how, id)
		return nil
	}
	if j := w.jobs[id]; j != nil && j.put != p {
		w.violate(wk, "%s: id %d is the put of body %q and also of body %q", how, id, j.put.body, p.body)
		return nil
	}
	if p.job != nil && p.job.id != id {
		w.violate(wk, "%s: the put of body %q has id %d and also id %d", how, p.body, p.job.id, id)
		return nil
	}
	if p.job == nil {
		p.job = &rjob{id: id, put: p, pris: map[uint32]bool{p.pri: true}}
		w.jobs[id] = p.job
		w.recent = append(w.recent, id)
		if len(w.recent) > 64 {
			w.recent = w.recent[1:]
		}
	}
	return p.job
}

// jobOfBody maps a RESERVED or FOUND reply to its put by the body's token
// and checks the body is exactly the one put.
func (w *rworld) jobOfBody(wk *rworker, c *rcmd, r *rreply) *rjob {
	tok, _ := bodyToken(r.body)
	seq, ok := tokenSeq(tok, "c")
	if !ok || seq >= len(w.puts) || w.puts[seq].sent.IsZero() {
		w.violate(wk, "%s got %s with a body no put sent: %q", c, r.line, r.body)
		return nil
	}
	p := w.puts[seq]
	if !bytes.Equal(p.body, r.body) {
		w.violate(wk, "%s got %s with body %q; the put sent %q", c, r.line, r.body, p.body)
		return nil
	}
	return w.learn(wk, p, r.id, c.String()+" -> "+r.line)
}

// jobNamed returns the job a command names, or nil (and a violation) when a
// success reply names an id that cannot exist.
func (w *rworld) jobNamed(wk *rworker, c *rcmd, r *rreply) *rjob {
	j := w.jobs[c.id]
	if j == nil {
		w.violate(wk, "%s got %s, but no job %d was ever put", c, r.line, c.id)
	}
	return j
}

// sawAlive records a reply that shows the job exists, and checks it was not
// deleted before the command was even sent.
func (w *rworld) sawAlive(wk *rworker, b *rbatch, c *rcmd, r *rreply, j *rjob) {
	if !j.deletedAt.IsZero() && b.sent.After(j.deletedAt) {
		w.violate(wk, "job %d was DELETED (reply read at %s), yet %s sent at %s got %s",
			j.id, w.since(j.deletedAt), c, w.since(b.sent), r.line)
	}
	if j.knownAt.IsZero() || r.at.Before(j.knownAt) {
		j.knownAt = r.at
	}
}

// sawMissing checks a NOT_FOUND from peek or stats-job: a job known to exist
// before the command was sent, for which no delete had been sent by the
// time the reply was read, must still exist.
func (w *rworld) sawMissing(wk *rworker, b *rbatch, c *rcmd, r *rreply) {
	j := w.jobs[c.id]
	if j == nil || j.knownAt.IsZero() || !j.knownAt.Before(b.sent) {
		return
	}
	if j.firstDeleteSent.IsZero() || j.firstDeleteSent.After(r.at) {
		w.violate(wk, "job %d existed at %s and no delete for it was sent before %s, yet %s got NOT_FOUND",
			j.id, w.since(j.knownAt), w.since(r.at), c)
	}
}

// notHeldByOthers checks that no other connection certainly held j for the
// whole of the command's interval (a DELETED or KICKED needs it not reserved).
func (w *rworld) notHeldByOthers(wk *rworker, b *rbatch, c *rcmd, r *rreply, j *rjob) {
	for _, h := range j.holds {
		if h.connNo != wk.connNo && h.got.Before(b.sent) && h.minEnd.After(r.at) {
			w.violate(wk, "%s got %s while connection #%d held job %d (RESERVED read at %s, not let go before %s)",
				c, r.line, h.connNo, j.id, w.since(h.got), w.since(h.minEnd))
		}
	}
}

// recordSends notes a batch in the history just before it is written.
func (w *rworld) recordSends(wk *rworker, b *rbatch) {
	for _, c := range b.cmds {
		w.sent[c.kind]++
		j := w.jobs[c.id]
		switch c.kind {
		case kPut:
			c.put.sent = b.sent
		case kDelete:
			if j != nil {
				j.pendingDeletes++
				if j.firstDeleteSent.IsZero() {
					j.firstDeleteSent = b.sent
				}
			}
		case kRelease, kBury:
			if j != nil {
				j.pris[c.pri] = true
			}
		case kPauseTube:
			c.pause = &rpause{tube: c.tube, sent: b.sent, delay: time.Duration(c.delay) * time.Second}
			w.pauses[c.tube] = append(w.pauses[c.tube], c.pause)
		}
		if h := wk.held[c.id]; h != nil && relinquishes(c.kind) && b.sent.Before(h.minEnd) {
			h.minEnd = b.sent
		}
	}
}

func relinquishes(k cmdKind) bool { return k == kDelete || k == kRelease || k == kBury }

// connEnding notes that a connection may be closed by the server from now
// on: every job it holds may be released from now on.
func (w *rworld) connEnding(wk *rworker, at time.Time) {
	wk.endingAt = at
	for _, h := range wk.held {
		if at.Before(h.minEnd) {
			h.minEnd = at
		}
	}
}

// onReply checks one reply against the command it answers and the history,
// and records what it teaches.
func (w *rworld) onReply(wk *rworker, b *rbatch, i int, r *rreply) {
	c := b.cmds[i]
	w.replied[c.kind]++
	w.words[r.word]++
	if !replyFits(c, r) || c.kind == kReserve && r.word == "TIMED_OUT" && !b.halfClosed() {
		w.violate(wk, "%s got %s, which is not a reply to that command (a reply out of order?)", c, r.line)
		return
	}
	switch c.kind {
	case kPut:
		if j := w.learn(wk, c.put, r.id, c.String()+" -> "+r.line); j != nil {
			c.put.acked = true
			w.population++
			if j.knownAt.IsZero() || r.at.Before(j.knownAt) {
				j.knownAt = r.at
			}
		}
	case kReserve, kReserveTimeout, kReserveJob:
		w.onReserveReply(wk, b, i, r)
	case kRelease, kBury, kTouch:
		w.onHolderReply(wk, b, c, r)
	case kDelete:
		w.onDeleteReply(wk, b, c, r)
	case kKickJob:
		if r.word == "KICKED" {
			if j := w.jobNamed(wk, c, r); j != nil {
				w.sawAlive(wk, b, c, r, j)
				w.notHeldByOthers(wk, b, c, r, j)
			}
		}
	case kPeek, kPeekReady, kPeekDelayed, kPeekBuried:
		w.onPeekReply(wk, b, c, r)
	case kStatsJob:
		w.onStatsJobReply(wk, b, c, r)
	case kStatsTube, kPauseTube:
		w.onTubeStatsReply(wk, c, r)
	case kStats:
		if _, err := parseYAMLDict(r.body); err != nil {
			w.violate(wk, "stats: %v", err)
		}
	case kUse, kWatch, kIgnore, kListTubeUsed, kListTubesWatched, kListTubes:
		w.onTubeListReply(wk, c, r)
	}
}

func (w *rworld) onReserveReply(wk *rworker, b *rbatch, i int, r *rreply) {
	c := b.cmds[i]
	switch r.word {
	case "RESERVED":
		j := w.jobOfBody(wk, c, r)
		if j == nil {
			return
		}
		if c.kind != kReserveJob {
			w.checkReservable(wk, b, c, r, j)
		}
		w.sawAlive(wk, b, c, r, j)
		w.addHold(wk, b, i, r, j)
	case "DEADLINE_SOON":
		w.checkDeadlineSoon(wk, c, r)
	case "TIMED_OUT":
		waited := r.at.Sub(b.sent)
		if c.kind == kReserveTimeout && !b.halfClosed() && waited < time.Duration(c.n)*time.Second-rSlack {
			w.violate(wk, "%s got TIMED_OUT after only %v", c, waited)
		}
	}
}

// checkReservable: a reserve may only take a job from a watched tube that is
// not certainly paused.
func (w *rworld) checkReservable(wk *rworker, b *rbatch, c *rcmd, r *rreply, j *rjob) {
	tube := j.put.tube
	if !slices.Contains(wk.watch, tube) {
		w.violate(wk, "%s got job %d of tube %s, which it does not watch (watching %v)", c, j.id, tube, wk.watch)
	}
	if p := w.pausedThroughout(tube, b.sent, r.at); p != nil {
		w.violate(wk, "%s (sent %s, answered %s) got job %d of tube %s, paused for %v by a pause-tube sent at %s and answered at %s",
			c, w.since(b.sent), w.since(r.at), j.id, tube, p.delay, w.since(p.sent), w.since(p.got))
	}
}

// pausedThroughout returns a pause that certainly covered [from, to] in
// tube: answered before from, not expired by to, and not possibly overridden
// by another pause-tube of the tube processed after it.
func (w *rworld) pausedThroughout(tube string, from, to time.Time) *rpause {
	ps := w.pauses[tube]
	for _, p := range ps {
		if p.got.IsZero() || p.got.After(from) || !to.Before(p.sent.Add(p.delay-rSlack)) {
			continue
		}
		overridden := false
		for _, q := range ps {
			if q != p && !q.sent.After(to) && (q.got.IsZero() || !q.got.Before(p.sent)) {
				overridden = true
			}
		}
		if !overridden {
			return p
		}
	}
	return nil
}

// checkDeadlineSoon: DEADLINE_SOON needs a job this connection holds whose
// TTR's last second may have begun.
func (w *rworld) checkDeadlineSoon(wk *rworker, c *rcmd, r *rreply) {
	for _, h := range wk.held {
		if !r.at.Before(h.sent.Add(h.ttr - time.Second - rSlack)) {
			return
		}
	}
	w.violate(wk, "%s got DEADLINE_SOON, but no job this connection holds is near its TTR (holding %v)", c, wk.heldIDs())
}

// addHold records a reservation and checks it against the job's other holds.
func (w *rworld) addHold(wk *rworker, b *rbatch, i int, r *rreply, j *rjob) {
	ttr := time.Duration(j.put.ttr) * time.Second
	h := &rhold{connNo: wk.connNo, sent: b.sent, got: r.at, ttr: ttr}
	h.minEnd = h.expiryBound()
	// A relinquishing command later in the same batch may have been
	// processed as soon as the reserve was.
	for _, later := range b.cmds[i+1:] {
		if later.id == j.id && relinquishes(later.kind) && b.sent.Before(h.minEnd) {
			h.minEnd = b.sent
		}
	}
	if !wk.endingAt.IsZero() && wk.endingAt.Before(h.minEnd) {
		h.minEnd = wk.endingAt
	}
	for _, o := range j.holds {
		if o.minEnd.After(h.got) && h.minEnd.After(o.got) {
			w.violate(wk, "job %d RESERVED to connection #%d (reserve sent %s, read %s) while connection #%d held it "+
				"(reserve sent %s, read %s, not let go before %s, ttr %v)",
				j.id, wk.connNo, w.since(h.sent), w.since(h.got), o.connNo, w.since(o.sent), w.since(o.got), w.since(o.minEnd), o.ttr)
		}
	}
	j.holds = append(j.holds, h)
	wk.held[j.id] = h
}

// onHolderReply checks release, bury and touch: only the holder succeeds,
// and the holder fails only once its TTR may have run out.
func (w *rworld) onHolderReply(wk *rworker, b *rbatch, c *rcmd, r *rreply) {
	h := wk.held[c.id]
	if r.word == "NOT_FOUND" {
		w.holderLost(wk, c, r, h)
		return
	}
	j := w.jobNamed(wk, c, r)
	if j == nil {
		return
	}
	if h == nil {
		w.violate(wk, "%s got %s, but this connection does not hold job %d", c, r.line, c.id)
	}
	w.sawAlive(wk, b, c, r, j)
	if c.kind != kTouch {
		delete(wk.held, c.id)
	}
}

// holderLost handles a NOT_FOUND to a command about a job the connection
// holds (h non-nil): legal only once the TTR may have expired.
func (w *rworld) holderLost(wk *rworker, c *rcmd, r *rreply, h *rhold) {
	if h == nil {
		return
	}
	if r.at.Before(h.expiryBound()) {
		w.violate(wk, "%s got NOT_FOUND, but this connection reserved job %d at %s with ttr %v, so it still holds it at %s",
			c, c.id, w.since(h.sent), h.ttr, w.since(r.at))
	}
	delete(wk.held, c.id)
}

func (w *rworld) onDeleteReply(wk *rworker, b *rbatch, c *rcmd, r *rreply) {
	j := w.jobs[c.id]
	if j != nil {
		j.pendingDeletes--
	}
	if r.word == "NOT_FOUND" {
		w.holderLost(wk, c, r, wk.held[c.id])
		return
	}
	if j = w.jobNamed(wk, c, r); j == nil {
		return
	}
	if !j.deletedAt.IsZero() {
		w.violate(wk, "%s got DELETED, but job %d was already DELETED (read at %s)", c, j.id, w.since(j.deletedAt))
	}
	w.sawAlive(wk, b, c, r, j)
	w.notHeldByOthers(wk, b, c, r, j)
	if j.deletedAt.IsZero() || r.at.Before(j.deletedAt) {
		j.deletedAt = r.at
	}
	w.population--
	delete(wk.held, c.id)
}

func (w *rworld) onPeekReply(wk *rworker, b *rbatch, c *rcmd, r *rreply) {
	if r.word == "NOT_FOUND" {
		if c.kind == kPeek {
			w.sawMissing(wk, b, c, r)
		}
		return
	}
	j := w.jobOfBody(wk, c, r)
	if j == nil {
		return
	}
	if c.kind != kPeek && j.put.tube != wk.used {
		w.violate(wk, "%s got job %d of tube %s, but the connection uses %s", c, j.id, j.put.tube, wk.used)
	}
	w.sawAlive(wk, b, c, r, j)
	wk.lastFound = j.id
}

func (w *rworld) onStatsJobReply(wk *rworker, b *rbatch, c *rcmd, r *rreply) {
	if r.word == "NOT_FOUND" {
		w.sawMissing(wk, b, c, r)
		return
	}
	j := w.jobNamed(wk, c, r)
	if j == nil {
		return
	}
	y, err := parseYAMLDict(r.body)
	if err != nil {
		w.violate(wk, "%s: %v", c, err)
		return
	}
	if problem := statsJobMismatch(y, j); problem != "" {
		w.violate(wk, "%s: %s in %s", c, problem, show(string(r.body)))
	}
	w.sawAlive(wk, b, c, r, j)
}

// statsJobMismatch compares a stats-job body with what the history knows of
// the job: id, tube, ttr, a priority it was given, a valid state.
func statsJobMismatch(y map[string]string, j *rjob) string {
	pri, err := strconv.ParseUint(y["pri"], 10, 32)
	switch {
	case y["id"] != strconv.FormatUint(j.id, 10):
		return "wrong id"
	case unquote(y["tube"]) != j.put.tube:
		return "tube is not " + j.put.tube
	case y["ttr"] != strconv.Itoa(j.put.ttr):
		return "ttr is not " + strconv.Itoa(j.put.ttr)
	case err != nil || !j.pris[uint32(pri)]:
		return fmt.Sprintf("pri is none of those it was given (%v)", sortedKeys(j.pris))
	case !slices.Contains([]string{"ready", "reserved", "delayed", "buried"}, y["state"]):
		return "bad state"
	}
	return ""
}

func (w *rworld) onTubeStatsReply(wk *rworker, c *rcmd, r *rreply) {
	if c.tube == rNoTube {
		if r.word != "NOT_FOUND" {
			w.violate(wk, "%s got %s, but nobody ever created tube %s", c, r.line, rNoTube)
		}
		return
	}
	switch r.word {
	case "NOT_FOUND":
		w.violate(wk, "%s got NOT_FOUND, but the control connection keeps tube %s alive", c, c.tube)
	case "PAUSED":
		c.pause.got = r.at
	case "OK":
		y, err := parseYAMLDict(r.body)
		if err != nil || unquote(y["name"]) != c.tube {
			w.violate(wk, "%s got the stats of another tube or bad YAML (%v): %s", c, err, show(string(r.body)))
		}
	}
}

// onTubeListReply checks the replies that depend only on the connection's
// own use and watch commands, which makes them the sharpest check that
// replies come in command order.
func (w *rworld) onTubeListReply(wk *rworker, c *rcmd, r *rreply) {
	switch c.kind {
	case kUse:
		if r.name != c.tube {
			w.violate(wk, "%s got %s", c, r.line)
		}
		wk.used = c.tube
	case kListTubeUsed:
		if r.name != wk.used {
			w.violate(wk, "%s got %s, but the connection uses %s", c, r.line, wk.used)
		}
	case kWatch:
		if !slices.Contains(wk.watch, c.tube) {
			wk.watch = append(wk.watch, c.tube)
		}
		if r.n != len(wk.watch) {
			w.violate(wk, "%s got %s, but the connection watches %v", c, r.line, wk.watch)
		}
	case kIgnore:
		want := fmt.Sprintf("WATCHING %d", len(wk.watch))
		if i := slices.Index(wk.watch, c.tube); i >= 0 {
			if len(wk.watch) == 1 {
				want = "NOT_IGNORED"
			} else {
				wk.watch = slices.Delete(wk.watch, i, i+1)
				want = fmt.Sprintf("WATCHING %d", len(wk.watch))
			}
		}
		if r.line != want {
			w.violate(wk, "%s got %s, want %s (watching %v)", c, r.line, want, wk.watch)
		}
	case kListTubesWatched, kListTubes:
		want := wk.watch
		if c.kind == kListTubes {
			want = rTubes // the control connection watches them all; nobody creates another
		}
		got, err := parseYAMLList(r.body)
		if err != nil || !sameSet(got, want) {
			w.violate(wk, "%s got %v (%v), want %v", c, got, err, want)
		}
	}
}

func sameSet(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	sort.Strings(x)
	sort.Strings(y)
	return slices.Equal(x, y)
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	var ks []K
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// ---------------------------------------------------------------------------
// The invariant phase: the connections.

// ending says how a connection ends after a batch.
type ending int

const (
	endNone      ending = iota // keep going
	endQuit                    // append quit, read every reply, then EOF
	endHalfClose               // shutdown(SHUT_WR) after the batch, read until EOF
	endAbrupt                  // close right after writing, reading nothing
	endClose                   // read every reply, then close
)

type rbatch struct {
	cmds   []*rcmd
	sent   time.Time
	ending ending
}

func (b *rbatch) halfClosed() bool { return b.ending == endHalfClose }

// rworker drives one connection slot: a connection, and a new one each time
// the previous ended.
type rworker struct {
	w      *rworld
	idx    int
	rng    *rand.Rand
	c      *conn
	connNo int
	used   string
	watch  []string
	held   map[uint64]*rhold
	// endingAt is set once the connection may be closed by the server.
	endingAt time.Time
	// lastFound is the job a peek found last, a candidate to delete.
	lastFound uint64
	log       []string
}

func (wk *rworker) note(format string, args ...any) {
	wk.log = append(wk.log, fmt.Sprintf("    %s ", wk.w.since(time.Now()))+fmt.Sprintf(format, args...))
	if len(wk.log) > 40 {
		wk.log = wk.log[len(wk.log)-40:]
	}
}

func (wk *rworker) transcript() string { return strings.Join(wk.log, "\n") }

func (wk *rworker) heldIDs() []uint64 {
	ids := make([]uint64, 0, len(wk.held))
	for id := range wk.held {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// run sends batches until the deadline or a violation, then ends its
// connection in a random way.
func (wk *rworker) run(deadline time.Time) {
	for time.Now().Before(deadline) && !wk.w.stop.Load() {
		if wk.c == nil && !wk.dial() {
			return
		}
		wk.runBatch(wk.randomBatch(wk.randomEnding()))
	}
	if wk.c != nil {
		end := []ending{endQuit, endHalfClose, endAbrupt, endClose}[wk.rng.IntN(4)]
		wk.runBatch(&rbatch{ending: end})
	}
}

func (wk *rworker) dial() bool {
	nc, err := net.DialTimeout(wk.w.srv.network, wk.w.srv.addr, rPatience)
	wk.w.mu.Lock()
	defer wk.w.mu.Unlock()
	if err != nil {
		wk.w.violate(wk, "dial: %v", err)
		return false
	}
	wk.w.dials++
	wk.connNo = wk.w.dials
	wk.c = &conn{nc: nc}
	wk.used, wk.watch = "default", []string{"default"}
	wk.held = map[uint64]*rhold{}
	wk.endingAt = time.Time{}
	wk.lastFound = 0
	wk.note("connected as #%d", wk.connNo)
	return true
}

func (wk *rworker) randomEnding() ending {
	switch x := wk.rng.IntN(200); {
	case x < 3:
		return endQuit
	case x < 6:
		return endHalfClose
	case x < 9:
		return endAbrupt
	}
	return endNone
}

var chaosWeights = []weightedKind{
	{kPut, 18}, {kReserveTimeout, 14}, {kReserve, 1}, {kReserveJob, 4}, {kRelease, 8}, {kBury, 4},
	{kTouch, 3}, {kDelete, 10}, {kKick, 3}, {kKickJob, 3}, {kPeek, 3}, {kPeekReady, 2},
	{kPeekDelayed, 1}, {kPeekBuried, 2}, {kStatsJob, 3}, {kStatsTube, 2}, {kStats, 1},
	{kUse, 3}, {kWatch, 3}, {kIgnore, 3}, {kPauseTube, 1}, {kListTubeUsed, 1},
	{kListTubesWatched, 1}, {kListTubes, 1},
}

// consumerWeights favour reserves and deletes, so that tubes run empty and
// reserves wait until a put or a release on another connection hands them
// a job (the path of a parked reserve); producerWeights favour puts and
// seldom change tube, so that waiting consumers are fed.
var consumerWeights = []weightedKind{
	{kPut, 6}, {kReserveTimeout, 30}, {kReserve, 4}, {kReserveJob, 2}, {kRelease, 6}, {kBury, 2},
	{kTouch, 2}, {kDelete, 20}, {kKick, 4}, {kKickJob, 1}, {kPeek, 1}, {kPeekReady, 1},
	{kPeekDelayed, 1}, {kPeekBuried, 1}, {kStatsJob, 1}, {kStatsTube, 1}, {kStats, 1},
	{kUse, 1}, {kWatch, 3}, {kIgnore, 1}, {kPauseTube, 1}, {kListTubeUsed, 1},
	{kListTubesWatched, 1}, {kListTubes, 1},
}

var producerWeights = []weightedKind{
	{kPut, 60}, {kReserveTimeout, 2}, {kReserve, 1}, {kReserveJob, 1}, {kRelease, 1}, {kBury, 1},
	{kTouch, 1}, {kDelete, 3}, {kKick, 2}, {kKickJob, 1}, {kPeek, 1}, {kPeekReady, 1},
	{kPeekDelayed, 1}, {kPeekBuried, 1}, {kStatsJob, 1}, {kStatsTube, 1}, {kStats, 1},
	{kUse, 1}, {kWatch, 1}, {kIgnore, 1}, {kPauseTube, 1}, {kListTubeUsed, 1},
	{kListTubesWatched, 1}, {kListTubes, 1},
}

// Workers have roles by index: mixed, consumer, producer, consumer, ...
func (wk *rworker) isConsumer() bool { return wk.idx%2 == 1 }
func (wk *rworker) isProducer() bool { return wk.idx%4 == 2 }

func (wk *rworker) weights() []weightedKind {
	switch {
	case wk.isConsumer():
		return consumerWeights
	case wk.isProducer():
		return producerWeights
	}
	return chaosWeights
}

var rPriorities = []uint32{0, 1, 2, 100, 1023, 1024, 5000, 1<<32 - 1}

// randomBatch draws 1-5 commands. Puts go to the tube the connection will
// be using when the server reaches them, so the batch's own use commands
// are followed. A consumer's batch is often a worker's step instead.
func (wk *rworker) randomBatch(end ending) *rbatch {
	b := &rbatch{ending: end}
	if held := wk.heldIDs(); wk.isConsumer() && len(held) > 0 && wk.rng.IntN(4) != 0 {
		b.cmds = wk.workerStep(held[wk.rng.IntN(len(held))])
		return b
	}
	used := wk.used
	for range 1 + wk.rng.IntN(5) {
		c := wk.randomCommand(used)
		if c.kind == kUse {
			used = c.tube
		}
		b.cmds = append(b.cmds, c)
	}
	return b
}

// workerStep is a worker's loop pipelined: finish a held job (delete,
// release or bury) and reserve the next, which often waits until another
// connection's put or release hands it a job (with -b, from the binlog
// writer's acknowledgement rather than from a connection's loop).
func (wk *rworker) workerStep(id uint64) []*rcmd {
	finish := &rcmd{kind: kDelete, id: id}
	switch wk.rng.IntN(10) {
	case 0, 1:
		finish = &rcmd{kind: kRelease, id: id, pri: rPriorities[wk.rng.IntN(len(rPriorities))]}
	case 2:
		finish = &rcmd{kind: kBury, id: id}
	}
	next := &rcmd{kind: kReserveTimeout, n: 1}
	if wk.rng.IntN(3) == 0 {
		next = &rcmd{kind: kReserve}
	}
	return []*rcmd{finish, next}
}

func (wk *rworker) randomCommand(used string) *rcmd {
	rng := wk.rng
	c := &rcmd{kind: drawKind(rng, wk.weights())}
	if c.kind == kPut && wk.overpopulated() {
		// Find a job to delete instead, so that tubes still run empty.
		c.kind = drawKind(rng, findJobWeights)
	}
	switch c.kind {
	case kPut:
		// Mostly short TTRs, so that reservations time out; now and then a
		// long one, so that only a close can give the job back before the
		// end (a server that forgot to would never settle).
		c.pri, c.ttr = rPriorities[rng.IntN(len(rPriorities))], []int{1, 2, 3, 100}[rng.IntN(4)]
		if rng.IntN(5) == 0 {
			c.delay = 1
		}
		wk.w.mu.Lock()
		c.put = &rput{seq: len(wk.w.puts), tube: used, pri: c.pri, ttr: c.ttr}
		c.put.body = makeBody(rng, "c", c.put.seq)
		wk.w.puts = append(wk.w.puts, c.put)
		wk.w.mu.Unlock()
		c.body = c.put.body
	case kReserveTimeout:
		if rng.IntN(3) == 0 {
			c.n = 1
		}
	case kRelease, kBury:
		c.id, c.pri = wk.pickID(), rPriorities[rng.IntN(len(rPriorities))]
		if c.kind == kRelease && rng.IntN(3) == 0 {
			c.delay = 1
		}
	case kReserveJob, kTouch, kDelete, kKickJob, kPeek, kStatsJob:
		c.id = wk.pickID()
	case kKick:
		c.n = rng.IntN(6)
	case kUse, kWatch, kIgnore:
		c.tube = rTubes[rng.IntN(len(rTubes))]
	case kStatsTube, kPauseTube:
		c.tube = rTubes[rng.IntN(len(rTubes))]
		if rng.IntN(8) == 0 {
			c.tube = rNoTube
		}
		c.delay = rng.IntN(2)
	}
	return c
}

// findJobWeights replace a put while the tubes hold many jobs.
var findJobWeights = []weightedKind{{kPeekReady, 1}, {kPeekBuried, 1}, {kPeekDelayed, 1}, {kDelete, 1}, {kKick, 1}}

// rPopulationCap: above this many jobs, puts give way to finding and
// deleting jobs, so that the population stays small and reserves often
// find the tubes empty and wait.
const rPopulationCap = 100

func (wk *rworker) overpopulated() bool {
	wk.w.mu.Lock()
	defer wk.w.mu.Unlock()
	return wk.w.population > rPopulationCap
}

// pickID names a job: mostly one this connection holds, one a peek found
// or one seen lately, sometimes one that cannot exist.
func (wk *rworker) pickID() uint64 {
	if wk.rng.IntN(10) == 0 {
		return rFakeBase + wk.rng.Uint64N(1000)
	}
	if wk.lastFound != 0 && wk.rng.IntN(3) == 0 {
		return wk.lastFound
	}
	if held := wk.heldIDs(); len(held) > 0 && wk.rng.IntN(2) == 0 {
		return held[wk.rng.IntN(len(held))]
	}
	wk.w.mu.Lock()
	defer wk.w.mu.Unlock()
	if len(wk.w.recent) == 0 {
		return rFakeBase
	}
	return wk.w.recent[wk.rng.IntN(len(wk.w.recent))]
}

// runBatch writes a batch in one write, ends the connection if the batch
// says so, and checks every reply in order.
func (wk *rworker) runBatch(b *rbatch) {
	var out strings.Builder
	for _, c := range b.cmds {
		out.WriteString(c.wire())
	}
	if b.ending == endQuit {
		out.WriteString("quit\r\n")
	}
	w := wk.w
	w.mu.Lock()
	b.sent = time.Now()
	w.recordSends(wk, b)
	if b.ending == endQuit || b.ending == endAbrupt {
		w.connEnding(wk, b.sent)
	}
	for _, c := range b.cmds {
		wk.note("-> %s", c)
	}
	w.mu.Unlock()
	_ = wk.c.nc.SetWriteDeadline(time.Now().Add(rPatience))
	if _, err := io.WriteString(wk.c.nc, out.String()); err != nil {
		wk.fail("writing a batch: %v", err)
		return
	}
	switch b.ending {
	case endAbrupt:
		wk.note("closed abruptly")
		wk.closeConn()
		return
	case endHalfClose:
		w.mu.Lock()
		w.connEnding(wk, time.Now())
		w.mu.Unlock()
		wk.note("half-closed")
		if err := wk.c.nc.(*net.TCPConn).CloseWrite(); err != nil {
			wk.fail("half-close: %v", err)
			return
		}
	}
	wk.collect(b)
}

// collect reads and checks the replies of a batch, then, for a batch that
// ends the connection, the EOF.
func (wk *rworker) collect(b *rbatch) {
	for i, c := range b.cmds {
		deadline := c.replyDue(b.sent)
		if c.kind == kReserve && !b.halfClosed() {
			deadline = time.Now().Add(rParkPatience)
		}
		r, err := readReply(wk.c, deadline)
		if err != nil {
			wk.replyMissing(b, i, err)
			return
		}
		wk.w.mu.Lock()
		wk.note("<- %s", r.line)
		wk.w.onReply(wk, b, i, &r)
		wk.w.mu.Unlock()
	}
	switch b.ending {
	case endQuit, endHalfClose:
		wk.expectEOF(b.ending)
	case endClose:
		wk.w.mu.Lock()
		wk.w.connEnding(wk, time.Now())
		wk.w.mu.Unlock()
		wk.closeConn()
	}
}

// replyMissing handles a reply that did not come: a parked plain reserve
// (the worker gives up on the connection), or a lost reply (a violation).
// A connection that quits or half-closes is answered everything it sent
// first, as by C beanstalkd: a reserve still waiting at a half-close gets
// TIMED_OUT, and the commands after it are run too.
func (wk *rworker) replyMissing(b *rbatch, i int, err error) {
	w := wk.w
	c := b.cmds[i]
	switch {
	case isTimeout(err) && c.kind == kReserve && !b.halfClosed():
		w.mu.Lock()
		w.connEnding(wk, time.Now())
		wk.note("(%s still waiting after %v: closing)", c, rParkPatience)
		w.mu.Unlock()
	case (b.ending == endQuit || b.halfClosed()) && !isTimeout(err):
		wk.fail("the connection ended (%v) before the reply to %s, sent before the %s%s", err, c, endingName(b.ending), wk.serverState())
	default:
		wk.fail("no reply to %s (sent at %s): %v%s", c, w.since(b.sent), err, wk.serverState())
	}
	wk.closeConn()
}

func endingName(e ending) string {
	return map[ending]string{endQuit: "quit", endHalfClose: "half-close", endAbrupt: "close", endClose: "close"}[e]
}

// expectEOF reads after the last reply of a quit or half-closed connection:
// the server must close it without sending anything more.
func (wk *rworker) expectEOF(end ending) {
	deadline := time.Now().Add(rPatience)
	for len(wk.c.buf) == 0 {
		err := wk.c.fill(deadline)
		if err == nil {
			continue
		}
		if isTimeout(err) {
			wk.fail("the server did not close the connection within %v of its %s", rPatience, endingName(end))
			return
		}
		break
	}
	if len(wk.c.buf) > 0 {
		wk.fail("bytes after the last reply before a %s: %s", endingName(end), show(string(wk.c.buf)))
		return
	}
	wk.closeConn()
}

func (wk *rworker) fail(format string, args ...any) {
	wk.w.mu.Lock()
	wk.w.violate(wk, format, args...)
	wk.w.mu.Unlock()
	wk.closeConn()
}

// serverState says whether the server process is still running.
func (wk *rworker) serverState() string {
	select {
	case <-wk.w.srv.exited:
		return fmt.Sprintf(" (the server has exited: %v)", wk.w.srv.waitErr)
	default:
		return ""
	}
}

// closeConn closes the socket after noting that the connection ended, so
// that no reservation of another connection is judged before this one's
// jobs are known to be free.
func (wk *rworker) closeConn() {
	if wk.c == nil {
		return
	}
	wk.w.mu.Lock()
	if wk.endingAt.IsZero() {
		wk.w.connEnding(wk, time.Now())
	}
	wk.w.mu.Unlock()
	wk.c.nc.Close()
	wk.c = nil
}

// ---------------------------------------------------------------------------
// The invariant phase: running it and reconciling the end state.

const rWorkers = 12

func runInvariantPhase(t *testing.T, s *server, m randomMode, seed uint64, d time.Duration) {
	w := &rworld{srv: s, mode: m, start: time.Now(), jobs: map[uint64]*rjob{},
		pauses: map[string][]*rpause{}, words: map[string]int{}}
	ctl := w.dialControl(t)
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := range rWorkers {
		wk := &rworker{w: w, idx: i, rng: rand.New(rand.NewPCG(seed, uint64(i)))}
		wg.Go(func() { wk.run(deadline) })
	}
	wg.Wait()
	w.failOnViolations(t)
	w.reconcile(t, ctl)
	w.failOnViolations(t)
	t.Logf("mode %s: %d connections, %d commands sent (%d puts); replies: %v",
		m.name, w.dials, sum(w.sent[:]), w.sent[kPut], w.words)
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

func (w *rworld) failOnViolations(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.violations) > 0 {
		t.Fatalf("mode %s: %d violation(s); the first:\n%s", w.mode.name, len(w.violations), strings.Join(w.violations, "\n\n"))
	}
}

// dialControl opens the control connection. It watches every tube for the
// whole phase, so that no tube (and no pause) is ever freed.
func (w *rworld) dialControl(t *testing.T) *conn {
	ctl := w.srv.dial(t)
	w.dials++
	for _, tube := range rTubes[1:] {
		w.ctlDo(t, ctl, &rcmd{kind: kWatch, tube: tube})
	}
	return ctl
}

// ctlDo sends one command on the control connection.
func (w *rworld) ctlDo(t *testing.T, ctl *conn, c *rcmd) rreply {
	t.Helper()
	return w.ctlPipeline(t, ctl, []*rcmd{c})[0]
}

func (w *rworld) ctlStats(t *testing.T, ctl *conn) map[string]string {
	t.Helper()
	y, err := parseYAMLDict(w.ctlDo(t, ctl, &rcmd{kind: kStats}).body)
	if err != nil {
		t.Fatal(err)
	}
	return y
}

// rLive is a job found on the server at the end.
type rLive struct {
	id    uint64
	state string
	tube  string
	pri   uint64
	body  []byte
}

// reconcile runs once every worker connection is gone: it waits until the
// server has let go of them and of every delay, then checks every job it
// holds, its stats, and that a drain empties it.
func (w *rworld) reconcile(t *testing.T, ctl *conn) {
	snap := w.waitQuiescent(t, ctl)
	live := w.enumerateLive(t, ctl)
	t.Logf("mode %s: %d jobs left at the end", w.mode.name, len(live))
	w.checkLiveAgainstHistory(t, live)
	w.checkStatsAgainstHistory(t, snap, live)
	w.drainAndCheckEmpty(t, ctl, live)
}

// rSnapshot is a stats reply with the command counts of the history when
// it was asked for (its own stats command counted as sent, not answered).
type rSnapshot struct {
	stats         map[string]string
	sent, replied [numCmdKinds]int
}

// waitQuiescent polls stats until only the control connection is left and
// no job is reserved or delayed, and returns that stats snapshot.
func (w *rworld) waitQuiescent(t *testing.T, ctl *conn) rSnapshot {
	t.Helper()
	deadline := time.Now().Add(rPatience)
	var settled map[string]string // the last snapshot that looked quiescent
	for {
		var snap rSnapshot
		w.mu.Lock()
		snap.sent, snap.replied = w.sent, w.replied
		w.mu.Unlock()
		snap.sent[kStats]++
		st := w.ctlStats(t, ctl)
		snap.stats = st
		if st["current-connections"] == "1" && st["current-jobs-reserved"] == "0" && st["current-jobs-delayed"] == "0" {
			// stats sums per-loop counters one after the other, so a
			// connection closing at that moment can be seen gone while
			// the job it held is between reserved and ready: only the
			// same job counts twice in a row are the server at rest.
			if settled != nil && sameJobCounts(settled, st) {
				return snap
			}
			settled = st
		} else {
			settled = nil
		}
		if time.Now().After(deadline) {
			t.Fatalf("after every worker connection closed, the server did not settle within %v: connections %s, reserved %s, delayed %s",
				rPatience, st["current-connections"], st["current-jobs-reserved"], st["current-jobs-delayed"])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sameJobCounts: two stats replies give the same job counts.
func sameJobCounts(a, b map[string]string) bool {
	for _, k := range []string{"current-jobs-urgent", "current-jobs-ready", "current-jobs-reserved", "current-jobs-delayed", "current-jobs-buried"} {
		if a[k] != b[k] {
			return false
		}
	}
	return true
}

// ctlPipeline sends commands on the control connection in pipelined
// chunks, counts them like the workers' commands, and returns the replies,
// each checked to fit its command.
func (w *rworld) ctlPipeline(t *testing.T, ctl *conn, cmds []*rcmd) []rreply {
	t.Helper()
	const chunk = 400
	var replies []rreply
	for first := 0; first < len(cmds); first += chunk {
		part := cmds[first:min(first+chunk, len(cmds))]
		var out strings.Builder
		for _, c := range part {
			out.WriteString(c.wire())
		}
		w.mu.Lock()
		for _, c := range part {
			w.sent[c.kind]++
		}
		w.mu.Unlock()
		mustSend(t, ctl, out.String())
		for _, c := range part {
			r, err := readReply(ctl, time.Now().Add(rPatience))
			if err != nil {
				t.Fatalf("control connection: %s: %v", c, err)
			}
			if !replyFits(c, &r) {
				t.Fatalf("control connection: %s got %s", c, r.line)
			}
			w.mu.Lock()
			w.replied[c.kind]++
			w.mu.Unlock()
			replies = append(replies, r)
		}
	}
	return replies
}

// enumerateLive asks for every id a put could have been given (ids start at
// 1 on a fresh server and each put takes at most one) with stats-job and
// peek, pipelined.
func (w *rworld) enumerateLive(t *testing.T, ctl *conn) map[uint64]*rLive {
	t.Helper()
	var cmds []*rcmd
	for id := uint64(1); id <= uint64(w.sent[kPut]); id++ {
		cmds = append(cmds, &rcmd{kind: kStatsJob, id: id}, &rcmd{kind: kPeek, id: id})
	}
	replies := w.ctlPipeline(t, ctl, cmds)
	live := map[uint64]*rLive{}
	for i := 0; i < len(replies); i += 2 {
		if j := liveJob(t, cmds[i].id, replies[i], replies[i+1]); j != nil {
			live[j.id] = j
		}
	}
	return live
}

// liveJob turns the stats-job and peek replies about one id into the job
// found, or nil when both say NOT_FOUND.
func liveJob(t *testing.T, id uint64, sj, pk rreply) *rLive {
	t.Helper()
	if sj.word == "NOT_FOUND" && pk.word == "NOT_FOUND" {
		return nil
	}
	if sj.word != "OK" || pk.word != "FOUND" {
		t.Fatalf("job %d at rest: stats-job got %s, peek got %s", id, sj.line, pk.line)
	}
	y, err := parseYAMLDict(sj.body)
	if err != nil {
		t.Fatalf("stats-job %d: %v", id, err)
	}
	pri, _ := strconv.ParseUint(y["pri"], 10, 32)
	return &rLive{id: id, state: y["state"], tube: unquote(y["tube"]), pri: pri, body: pk.body}
}

// checkLiveAgainstHistory: every job on the server came from a put that
// was sent and was not certainly deleted; every job known to exist and not
// possibly deleted is on the server.
func (w *rworld) checkLiveAgainstHistory(t *testing.T, live map[uint64]*rLive) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range sortedKeys(live) {
		l := live[id]
		r := &rreply{line: fmt.Sprintf("FOUND %d %d", id, len(l.body)), id: id, body: l.body, at: time.Now()}
		j := w.jobOfBody(nil, &rcmd{kind: kPeek, id: id}, r)
		switch {
		case j == nil:
		case !j.deletedAt.IsZero():
			w.violate(nil, "job %d is on the server at the end, but a delete of it got DELETED at %s", id, w.since(j.deletedAt))
		case l.tube != j.put.tube:
			w.violate(nil, "job %d is in tube %s at the end, but was put into %s", id, l.tube, j.put.tube)
		case l.state != "ready" && l.state != "buried":
			w.violate(nil, "job %d is %s at the end, with no connection and no delay left", id, l.state)
		}
	}
	for id, j := range w.jobs {
		mustExist := !j.knownAt.IsZero() && j.deletedAt.IsZero() && j.pendingDeletes == 0
		if mustExist && live[id] == nil {
			w.violate(nil, "job %d (body %q, acknowledged: %v) existed at %s and no delete of it succeeded or went unanswered, "+
				"but it is gone at the end", id, j.put.body, j.put.acked, w.since(j.knownAt))
		}
	}
}

// checkStatsAgainstHistory compares the quiescent stats snapshot with the
// jobs found and with the commands sent and answered.
func (w *rworld) checkStatsAgainstHistory(t *testing.T, snap rSnapshot, live map[uint64]*rLive) {
	t.Helper()
	st := snap.stats
	w.mu.Lock()
	defer w.mu.Unlock()
	count := map[string]int{}
	for _, l := range live {
		count[l.state]++
		if l.state == "ready" && l.pri < 1024 {
			count["urgent"]++
		}
	}
	expectStat := func(key string, want int) {
		if st[key] != strconv.Itoa(want) {
			w.violate(nil, "stats %s: %s, but the history and the jobs found say %d", key, st[key], want)
		}
	}
	for _, state := range []string{"urgent", "ready", "reserved", "delayed", "buried"} {
		expectStat("current-jobs-"+state, count[state])
	}
	expectStat("current-connections", 1)
	expectStat("current-tubes", len(rTubes))
	expectStat("current-waiting", 0)
	expectStat("total-connections", w.dials)
	acked := 0
	for _, p := range w.puts {
		if p.acked {
			acked++
		}
	}
	expectRange := func(key string, lo, hi int) {
		v, err := strconv.Atoi(st[key])
		if err != nil || v < lo || v > hi {
			w.violate(nil, "stats %s: %s, but the history says between %d and %d", key, st[key], lo, hi)
		}
	}
	// Puts whose reply was never read may or may not have made a job.
	expectRange("total-jobs", max(acked, len(w.jobs)), snap.sent[kPut])
	for k, key := range cmdCounters {
		if key != "" {
			expectRange(key, snap.replied[k], snap.sent[k])
		}
	}
}

// drainAndCheckEmpty deletes every job found and checks that the server and
// each tube are then empty.
func (w *rworld) drainAndCheckEmpty(t *testing.T, ctl *conn, live map[uint64]*rLive) {
	t.Helper()
	var deletes []*rcmd
	for _, id := range sortedKeys(live) {
		deletes = append(deletes, &rcmd{kind: kDelete, id: id})
	}
	for i, r := range w.ctlPipeline(t, ctl, deletes) {
		if r.word != "DELETED" {
			t.Fatalf("draining: %s got %s", deletes[i], r.line)
		}
	}
	st := w.ctlStats(t, ctl)
	for _, state := range []string{"urgent", "ready", "reserved", "delayed", "buried"} {
		if st["current-jobs-"+state] != "0" {
			t.Errorf("after the drain, stats current-jobs-%s: %s", state, st["current-jobs-"+state])
		}
	}
	for _, tube := range rTubes {
		y, err := parseYAMLDict(w.ctlDo(t, ctl, &rcmd{kind: kStatsTube, tube: tube}).body)
		if err != nil {
			t.Fatal(err)
		}
		for _, state := range []string{"ready", "reserved", "delayed", "buried"} {
			if y["current-jobs-"+state] != "0" {
				t.Errorf("after the drain, stats-tube %s current-jobs-%s: %s", tube, state, y["current-jobs-"+state])
			}
		}
	}
}
