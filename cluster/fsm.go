package cluster

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"

	"github.com/beanpole/beanpole/codec"
	"github.com/beanpole/beanpole/record"
)

// Entry types: the first byte of every raft entry.
const (
	entryRecords byte = 1 // framed records (batch.go)
	entryLeader  byte = 2 // a new leader's id and client address
	// entryLeave: a leader asked to leave the group (membership.go).
	entryLeave byte = 16
)

// FSM is a node's replicated state: the live jobs, the highest id any
// record named, the paused tubes. Every node applies the same committed
// entries in the same order; the leader's engine is loaded from it when
// the node takes the lead.
type FSM struct {
	mu sync.Mutex
	state
	applied uint64 // raft index of the last entry applied
	// leader is the latest leader's announcement: its node id and the
	// addresses its clients connect to (followers forward there): the
	// plaintext one, then, after a NUL, the TLS one if it has one.
	leaderID, leaderClient string
	// clients are the client addresses of every node that has led.
	clients map[string]string
	m       *metrics // nil in tests of the FSM alone
	log     zerolog.Logger
	// lent, on the leader, is its journal's Lent: the engine's copy of a
	// body it put, shared instead of copied.
	lent atomic.Pointer[func(id uint64) ([]byte, bool)]
	// leave is the latest leader's request to leave the group.
	leave leaveRequest
	// confs are the configurations raft committed since the last
	// takeConfigurations, in order.
	confs []committedConf
}

// committedConf is a configuration raft committed, at index.
type committedConf struct {
	index   uint64
	servers []raft.Server
}

// NewFSM is an empty state.
func NewFSM() *FSM {
	return &FSM{state: newState(), clients: map[string]string{}, log: zerolog.Nop()}
}

// Apply folds one committed entry into the state. A malformed entry is
// refused whole, on every node alike: nothing of it is applied, and the
// error is the entry's response (the leader's journal then fails).
func (f *FSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = l.Index
	if l.Type != raft.LogCommand || len(l.Data) == 0 {
		return nil
	}
	if err := validEntry(l.Data); err != nil {
		// Only a leader that is not one of ours (a forged entry) or a
		// damaged log writes such an entry: it is refused whole, on every
		// node alike, and said loudly.
		if f.m != nil {
			f.m.refused.Add(1)
		}
		f.log.Error().Err(err).Uint64("index", l.Index).Msg("cluster: refused a malformed entry")
		return fmt.Errorf("cluster: entry %d refused: %w", l.Index, err)
	}
	if !l.AppendedAt.IsZero() {
		f.expire(l.AppendedAt.UnixNano())
	}
	switch l.Data[0] {
	case entryRecords:
		return eachRecord(l.Data[1:], func(r *record.Record) error {
			if r.Kind == record.KindFull {
				r.Body = f.keep(r.ID, r.Body)
			}
			f.apply(r)
			return nil
		})
	case entryLeader:
		var id, plain string
		id, f.leaderClient, plain = announcement(l.Data[1:])
		f.leaderID, f.clients[id] = id, plain
	case entryLeave:
		f.leave = parseLeave(l.Data)
	}
	return nil
}

// validEntry checks a whole entry before any of it is applied: its type,
// and each record as the engine could have written it (validRecord); a
// leader's announcement names an id and client addresses of the
// HOST:PORT form.
func validEntry(data []byte) error {
	switch data[0] {
	case entryRecords:
		return eachRecord(data[1:], validRecord)
	case entryLeader:
		return validAnnouncement(data[1:])
	case entryLeave:
		return validLeave(data)
	}
	return fmt.Errorf("%w: unknown entry type %d", record.ErrBad, data[0])
}

// validAnnouncement checks a leader's announcement (entryLeader's payload,
// also kept in snapshots): an id and one or two client addresses, the
// plaintext one and the TLS one, each empty or HOST:PORT.
func validAnnouncement(b []byte) error {
	parts := strings.Split(string(b), "\x00")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
		return fmt.Errorf("%w: a leader's announcement of %d parts", record.ErrBad, len(parts))
	}
	for _, a := range parts[1:] {
		if _, _, err := net.SplitHostPort(a); a != "" && err != nil {
			return fmt.Errorf("%w: a leader's client address %q", record.ErrBad, a)
		}
	}
	return nil
}

// announcement splits a leader's announcement into its id, its client
// addresses as announced, and the plaintext one alone.
func announcement(b []byte) (id, addrs, plain string) {
	id, addrs, _ = strings.Cut(string(b), "\x00")
	plain, _, _ = strings.Cut(addrs, "\x00")
	return id, addrs, plain
}

// validRecord checks a record as the engine could have written it. A
// pause is checked by validPause; any other record names a job id other
// than 0 and the largest; a full record's job has a tube name the protocol
// accepts, a body that ends in CRLF and fits the largest -z, and times
// that are not negative.
func validRecord(r *record.Record) error {
	switch {
	case r.Kind == record.KindPause:
		return validPause(r)
	case r.ID == 0 || r.ID == math.MaxUint64:
		return fmt.Errorf("%w: job id %d", record.ErrBad, r.ID)
	case r.Kind != record.KindFull:
		return nil
	case !codec.ValidTubeName(r.Tube):
		return fmt.Errorf("%w: job %d has tube name %q", record.ErrBad, r.ID, r.Tube)
	case len(r.Body) < 2 || !bytes.HasSuffix(r.Body, crlf) || len(r.Body) > maxJobSize+2:
		return fmt.Errorf("%w: job %d's body of %d bytes does not end in CRLF or is too large", record.ErrBad, r.ID, len(r.Body))
	case r.TTR < 0 || r.Delay < 0 || r.Created < 0 || r.Deadline < 0:
		return fmt.Errorf("%w: job %d has a negative time", record.ErrBad, r.ID)
	}
	return nil
}

// maxJobSize is the largest -z: no job of a group is larger.
const maxJobSize = 1 << 30

var crlf = []byte("\r\n")

// keep is the body to hold for a full record of job id: the engine's own
// copy when this node's journal put the job with these bytes, otherwise a
// copy of the entry's (the entry's buffer is raft's; a job outlives it).
func (f *FSM) keep(id uint64, body []byte) []byte {
	if lent := f.lent.Load(); lent != nil {
		if b, ok := (*lent)(id); ok && bytes.Equal(b, body) {
			return b
		}
	}
	return append([]byte(nil), body...)
}

// State is what the leader's engine is loaded from: the live jobs in id
// order (none reserved) and the highest id ever named.
func (f *FSM) State() (jobs []*record.Job, maxID uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	src := f.live.Sorted()
	jobs = make([]*record.Job, len(src))
	for i, j := range src {
		c := *j
		jobs[i] = &c
	}
	return jobs, f.live.MaxID
}

// Leader is the latest leader's announcement: its node id and client
// addresses, plaintext and TLS ("" for a listener it does not have).
func (f *FSM) Leader() (id, client, tlsClient string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	client, tlsClient, _ = strings.Cut(f.leaderClient, "\x00")
	return f.leaderID, client, tlsClient
}

// Clients are the client addresses of the nodes that have led, by id.
func (f *FSM) Clients() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.clients)
}

// StoreConfiguration notes the configuration raft committed at index
// (raft.ConfigurationStore) for takeConfigurations.
func (f *FSM) StoreConfiguration(index uint64, c raft.Configuration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = index
	f.confs = append(f.confs, committedConf{index: index, servers: c.Servers})
}

// raft hands the FSM every configuration it commits.
var _ raft.ConfigurationStore = (*FSM)(nil)

// takeConfigurations returns the configurations raft committed since the
// last call, in order.
func (f *FSM) takeConfigurations() []committedConf {
	f.mu.Lock()
	defer f.mu.Unlock()
	confs := f.confs
	f.confs = nil
	return confs
}

// appliedIndex is the raft index of the last entry applied.
func (f *FSM) appliedIndex() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied
}

// Snapshot captures the state for raft. It copies each job's fixed fields
// but not its body: bodies never change once put, so the snapshot and the
// state share them, and Persist streams them to the sink.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := &snapshot{m: f.m, maxID: f.live.MaxID, jobs: make([]snapJob, 0, len(f.live.Jobs)), leader: f.leaderID + "\x00" + f.leaderClient,
		pauses: f.pauseList()}
	for _, id := range slices.Sorted(maps.Keys(f.clients)) {
		s.clients = append(s.clients, id+"\x00"+f.clients[id])
	}
	for _, j := range f.live.Jobs {
		s.jobs = append(s.jobs, snapJob{j: j, pri: j.Pri, state: j.State, delay: j.Delay, deadline: j.Deadline,
			buriedSeq: j.BuriedSeq, counters: j.Counters})
	}
	return s, nil
}

// The snapshot format: the magic, the highest id, the number of jobs, then
// each job as a length-prefixed full record, then the latest leader's
// announcement, length-prefixed; then the number of nodes that have led
// (u32) and each one's id and client address, NUL between them,
// length-prefixed; then the number of paused tubes (u32) and each one's
// pause record, length-prefixed. Lengths and numbers are little-endian,
// lengths u32. A snapshot of the first format (snapMagic1) ends after the
// announcement: it restores no pause and the announcing leader's client
// address alone.
const (
	snapMagic  = "beanpole-cluster-2\n"
	snapMagic1 = "beanpole-cluster-1\n"
)

// maxSnapString bounds a snapshot's announcement, client address entry
// and pause record: tube names and addresses are far shorter.
const maxSnapString = 1 << 16

// maxSnapRecord bounds a snapshot record: the largest job (-z is at most
// 1 GiB) with the longest tube name.
const maxSnapRecord = 1<<30 + 1<<16

type snapshot struct {
	m       *metrics
	maxID   uint64
	jobs    []snapJob
	leader  string
	clients []string // id NUL address
	pauses  []record.Pause
}

// snapJob is a job as a snapshot holds it: the fields records change,
// copied, and the Job itself for those it was born with (ID, Tube, TTR,
// CreatedAt, Body), which record.Live never changes, so that Persist may
// read them while later entries are applied. Half the size of a Job copy.
type snapJob struct {
	j         *record.Job
	pri       uint32
	state     record.State
	delay     time.Duration
	deadline  int64
	buriedSeq uint64
	counters  record.Counters
}

// job is the job as it stood when the snapshot was taken.
func (sj *snapJob) job() record.Job {
	return record.Job{ID: sj.j.ID, Tube: sj.j.Tube, Pri: sj.pri, State: sj.state, Delay: sj.delay, TTR: sj.j.TTR,
		CreatedAt: sj.j.CreatedAt, Deadline: sj.deadline, BuriedSeq: sj.buriedSeq, Counters: sj.counters, Body: sj.j.Body}
}

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	start := time.Now()
	cw := &countingWriter{w: sink}
	w := bufio.NewWriterSize(cw, 256<<10)
	var hdr []byte
	hdr = append(hdr, snapMagic...)
	hdr = binary.LittleEndian.AppendUint64(hdr, s.maxID)
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(len(s.jobs)))
	_, err := w.Write(hdr)
	var buf []byte
	for i := 0; i < len(s.jobs) && err == nil; i++ {
		j := s.jobs[i].job()
		buf = binary.LittleEndian.AppendUint32(buf[:0], uint32(record.FullSize(&j)))
		buf = record.AppendFull(buf, &j)
		_, err = w.Write(buf)
	}
	if err == nil {
		buf = binary.LittleEndian.AppendUint32(buf[:0], uint32(len(s.leader)))
		buf = append(buf, s.leader...)
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(s.clients)))
		for _, c := range s.clients {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(len(c)))
			buf = append(buf, c...)
		}
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(s.pauses)))
		for i := range s.pauses {
			at := len(buf)
			buf = record.AppendPause(binary.LittleEndian.AppendUint32(buf, 0), &s.pauses[i])
			binary.LittleEndian.PutUint32(buf[at:], uint32(len(buf)-at-4))
		}
		_, err = w.Write(buf)
	}
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		_ = sink.Cancel()
		return err
	}
	if s.m != nil {
		s.m.snapSeconds.Store(math.Float64bits(time.Since(start).Seconds()))
		s.m.snapBytes.Store(cw.n)
	}
	return sink.Close()
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n uint64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += uint64(n)
	return n, err
}

func (s *snapshot) Release() {}

// Restore replaces the state with a snapshot's. Every record and address
// in it is checked as an entry's would be.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	r := bufio.NewReaderSize(rc, 256<<10)
	hdr := make([]byte, len(snapMagic)+16)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return fmt.Errorf("cluster: snapshot header: %w", err)
	}
	magic := string(hdr[:len(snapMagic)])
	if magic != snapMagic && magic != snapMagic1 {
		return errors.New("cluster: not a beanpole snapshot")
	}
	st := newState()
	st.live.MaxID = binary.LittleEndian.Uint64(hdr[len(snapMagic):])
	n := binary.LittleEndian.Uint64(hdr[len(snapMagic)+8:])
	var lenb [4]byte
	var rec record.Record
	for i := uint64(0); i < n; i++ {
		if _, err := io.ReadFull(r, lenb[:]); err != nil {
			return fmt.Errorf("cluster: snapshot job %d of %d: %w", i+1, n, err)
		}
		size := binary.LittleEndian.Uint32(lenb[:])
		if size > maxSnapRecord {
			return fmt.Errorf("cluster: snapshot job %d of %d claims %d bytes", i+1, n, size)
		}
		p := make([]byte, size)
		if _, err := io.ReadFull(r, p); err != nil {
			return fmt.Errorf("cluster: snapshot job %d of %d: %w", i+1, n, err)
		}
		if err := record.Decode(p, &rec); err != nil || rec.Kind != record.KindFull {
			return fmt.Errorf("cluster: snapshot job %d of %d is not a full record: %v", i+1, n, err)
		}
		if err := validRecord(&rec); err != nil {
			return fmt.Errorf("cluster: snapshot job %d of %d: %w", i+1, n, err)
		}
		st.apply(&rec) // the body aliases p, which nothing else holds
	}
	lb, err := snapString(r, "leader")
	if err != nil {
		return err
	}
	id, addr, plain := announcement(lb)
	if id != "" || addr != "" { // "\x00": no leader known when it was taken
		if err := validAnnouncement(lb); err != nil {
			return fmt.Errorf("cluster: snapshot leader: %w", err)
		}
	}
	clients := map[string]string{}
	if id != "" {
		clients[id] = plain
	}
	if magic == snapMagic {
		if clients, err = restoreClients(r); err != nil {
			return err
		}
		if err := restorePauses(r, &st); err != nil {
			return err
		}
	}
	f.mu.Lock()
	f.state = st
	f.leaderID, f.leaderClient = id, addr
	f.clients = clients
	f.mu.Unlock()
	return nil
}

// snapString reads one length-prefixed string of a snapshot.
func snapString(r io.Reader, what string) ([]byte, error) {
	var lenb [4]byte
	if _, err := io.ReadFull(r, lenb[:]); err != nil {
		return nil, fmt.Errorf("cluster: snapshot %s: %w", what, err)
	}
	n := binary.LittleEndian.Uint32(lenb[:])
	if n > maxSnapString {
		return nil, fmt.Errorf("cluster: snapshot %s claims %d bytes", what, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("cluster: snapshot %s: %w", what, err)
	}
	return b, nil
}

// snapCount reads a u32 count of a snapshot.
func snapCount(r io.Reader, what string) (uint32, error) {
	var b [4]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, fmt.Errorf("cluster: snapshot %s: %w", what, err)
	}
	return binary.LittleEndian.Uint32(b[:]), nil
}

// restoreClients reads a snapshot's client addresses of the nodes that
// have led, each checked as a leader's announcement.
func restoreClients(r io.Reader) (map[string]string, error) {
	n, err := snapCount(r, "client addresses")
	if err != nil {
		return nil, err
	}
	clients := map[string]string{}
	for i := uint32(0); i < n; i++ {
		b, err := snapString(r, "client address")
		if err != nil {
			return nil, err
		}
		if err := validAnnouncement(b); err != nil {
			return nil, fmt.Errorf("cluster: snapshot client address %d of %d: %w", i+1, n, err)
		}
		id, _, plain := announcement(b)
		clients[id] = plain // as Apply keeps it: the plain address
	}
	return clients, nil
}

// restorePauses reads a snapshot's pause records into st, each checked as
// an entry's.
func restorePauses(r io.Reader, st *state) error {
	n, err := snapCount(r, "pauses")
	if err != nil {
		return err
	}
	var rec record.Record
	for i := uint32(0); i < n; i++ {
		b, err := snapString(r, "pause")
		if err != nil {
			return err
		}
		if err := record.Decode(b, &rec); err != nil || rec.Kind != record.KindPause {
			return fmt.Errorf("cluster: snapshot pause %d of %d is not a pause record: %v", i+1, n, err)
		}
		if err := validPause(&rec); err != nil {
			return fmt.Errorf("cluster: snapshot pause %d of %d: %w", i+1, n, err)
		}
		st.apply(&rec)
	}
	return nil
}

// tubeCount is how many tubes the state holds: those of live jobs, and
// the paused ones.
func (f *FSM) tubeCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.tubes)
}

// jobCount is how many live jobs the state holds.
func (f *FSM) jobCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live.Jobs)
}
