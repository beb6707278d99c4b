package loop

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/beanpole/beanpole/codec"
	"github.com/beanpole/beanpole/engine"
	"github.com/beanpole/beanpole/record"
	"github.com/rs/zerolog"
)

// batchLog is a journal that writes like the binlog and the cluster's:
// the records appended while it syncs a batch form the next batch, whose
// acks all come together once that sync is over. It can be paused (no
// batch is synced until resume) and made to fail every record from its
// failAt-th on, after which appends are refused, as a failed log does.
type batchLog struct {
	sync time.Duration // what one batch's sync takes

	mu      sync.Mutex
	cond    sync.Cond
	pending []record.Ack
	paused  bool
	n       int64 // records appended
	failAt  int64 // 0: never
	failed  bool
	stop    bool

	batches atomic.Int64 // batches synced
}

func newBatchLog(t *testing.T, sync time.Duration) *batchLog {
	l := &batchLog{sync: sync}
	l.cond.L = &l.mu
	done := make(chan struct{})
	go l.write(done)
	t.Cleanup(func() {
		l.mu.Lock()
		l.stop, l.paused = true, false
		l.cond.Broadcast()
		l.mu.Unlock()
		<-done
	})
	return l
}

func (l *batchLog) write(done chan struct{}) {
	defer close(done)
	type ack struct {
		a   record.Ack
		err error
	}
	var batch []ack
	for {
		l.mu.Lock()
		for !l.stop && (l.paused || len(l.pending) == 0) {
			l.cond.Wait()
		}
		if l.stop {
			l.mu.Unlock()
			return
		}
		first := l.n - int64(len(l.pending)) + 1
		batch = batch[:0]
		for i, a := range l.pending {
			var err error
			if l.failAt != 0 && first+int64(i) >= l.failAt {
				err, l.failed = errEIO, true
			}
			batch = append(batch, ack{a, err})
		}
		clear(l.pending)
		l.pending = l.pending[:0]
		l.mu.Unlock()
		time.Sleep(l.sync) // the device's fsync, not a synchronisation
		l.batches.Add(1)
		for _, a := range batch {
			a.a.Durable(a.err)
		}
	}
}

func (l *batchLog) append(a record.Ack) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed {
		return errEIO
	}
	l.n++
	if a != nil {
		l.pending = append(l.pending, a)
		l.cond.Broadcast()
	}
	return nil
}

// appended is how many records the log has taken.
func (l *batchLog) appended() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

func (l *batchLog) pause() {
	l.mu.Lock()
	l.paused = true
	l.mu.Unlock()
}

func (l *batchLog) resume() {
	l.mu.Lock()
	l.paused = false
	l.cond.Broadcast()
	l.mu.Unlock()
}

func (l *batchLog) Put(_ *record.Job, a record.Ack) error { return l.append(a) }
func (l *batchLog) Delete(_ uint64, a record.Ack) error   { return l.append(a) }
func (l *batchLog) Release(_ uint64, _ uint32, _ time.Duration, _ int64, _ record.Counters, a record.Ack) error {
	return l.append(a)
}
func (l *batchLog) Bury(_ uint64, _ uint32, _ uint64, _ record.Counters, a record.Ack) error {
	return l.append(a)
}
func (l *batchLog) Kick(_ uint64, _ record.Counters, a record.Ack) error { return l.append(a) }
func (l *batchLog) Rewrite(*record.Job) error                            { return nil }
func (l *batchLog) FileOf(uint64) uint64                                 { return 0 }

// batchServer serves one loop over an engine logging to l, with
// highWater as the flow-control limit (0: the default) and limit as the
// memory ceiling (0: none).
func batchServer(t *testing.T, l *batchLog, highWater int, limit int64) (*Server, *engine.Engine, string) {
	t.Helper()
	eng := engine.New(1)
	eng.SetJournal(l)
	eng.SetJobMemoryLimit(limit)
	srv, err := New(Config{Loops: 1, MaxJobSize: 65535, Version: "test", Log: zerolog.Nop(), HighWater: highWater}, eng)
	if err != nil {
		t.Fatal(err)
	}
	return srv, eng, serve(t, srv)
}

// putScript is n pipelined puts of one-byte jobs and their replies.
func putScript(n int) (script, replies string) {
	var s, r strings.Builder
	for i := 1; i <= n; i++ {
		s.WriteString("put 0 0 60 1\r\nx\r\n")
		fmt.Fprintf(&r, "INSERTED %d\r\n", i)
	}
	return s.String(), r.String()
}

// cmdCount is how many op commands srv has run.
func cmdCount(srv *Server, op codec.Op) uint64 {
	var st codec.ServerStats
	srv.Stats(&st)
	return st.Cmd[op]
}

// A consumer that pipelines reserve+delete does not wait for each delete's
// record before its next reserve: the deletes of one pipelined burst share
// the log's batches (one fsync, one raft entry) instead of taking one each.
func TestPipelinedDeletesShareLogBatches(t *testing.T) {
	const n = 64
	l := newBatchLog(t, 5*time.Millisecond)
	_, _, addr := batchServer(t, l, 0, 0)
	c := dial(t, addr)
	script, replies := putScript(n)
	send(t, c, script)
	expect(t, c, replies)
	before := l.batches.Load()
	var s, r strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&s, "reserve\r\ndelete %d\r\n", i)
		fmt.Fprintf(&r, "RESERVED %d 1\r\nx\r\nDELETED\r\n", i)
	}
	send(t, c, s.String())
	expect(t, c, r.String())
	if got := l.batches.Load() - before; got > 8 {
		t.Fatalf("%d pipelined deletes took %d log batches, want a handful", n, got)
	}
}

// A command that reads or changes shared state waits for the
// connection's own puts that are not durable yet: the job is published
// only then, and seeing it missing (or, after a failed put, seeing it at
// all) would be seeing what the log could take back; a change run before
// it (the delete below) would be seen by others before the put it follows.
// The replies keep their order.
func TestCommandsWaitForTheirOwnUnackedPut(t *testing.T) {
	l := newBatchLog(t, 0)
	_, _, addr := batchServer(t, l, 0, 0)
	c, other := dial(t, addr), dial(t, addr)
	send(t, c, "put 0 0 60 1\r\nx\r\n")
	expect(t, c, "INSERTED 1\r\n")
	l.pause()
	send(t, c, "put 0 0 60 1\r\ny\r\n")
	waitUntil(t, "the put's record", func() bool { return l.appended() == 2 })
	send(t, c, "delete 1\r\npeek 2\r\nstats-job 3\r\npeek-ready\r\nreserve-with-timeout 0\r\nlist-tube-used\r\n")
	// Another client on the same loop: the commands above have been read
	// by the time it is answered, and would have run if they did not wait.
	send(t, other, "peek 1\r\n")
	expect(t, other, "FOUND 1 1\r\nx\r\n")
	l.resume()
	expect(t, c, "INSERTED 2\r\nDELETED\r\nFOUND 2 1\r\ny\r\nNOT_FOUND\r\nFOUND 2 1\r\ny\r\nRESERVED 2 1\r\ny\r\nUSING default\r\n")
}

// A record that fails is answered INTERNAL_ERROR, in its place among the
// pipelined replies, and so is every change after it (the log refuses
// them); the commands that change nothing are answered as usual.
func TestFailedRecordInPipelineIsInternalError(t *testing.T) {
	l := newBatchLog(t, time.Millisecond)
	_, _, addr := batchServer(t, l, 0, 0)
	c := dial(t, addr)
	script, replies := putScript(4)
	send(t, c, script)
	expect(t, c, replies)
	l.mu.Lock()
	l.failAt = 6 // the second delete below
	l.mu.Unlock()
	send(t, c, "reserve\r\ndelete 1\r\nreserve\r\ndelete 2\r\nreserve\r\ndelete 3\r\nlist-tube-used\r\n")
	expect(t, c, "RESERVED 1 1\r\nx\r\nDELETED\r\nRESERVED 2 1\r\nx\r\nINTERNAL_ERROR\r\nRESERVED 3 1\r\nx\r\nINTERNAL_ERROR\r\nUSING default\r\n")
}

// Replies held behind a record that is not durable are capped: past
// HighWater bytes of them the connection's further commands wait, and the
// held replies are charged against the memory ceiling with the unsent
// output until they are sent.
func TestHeldRepliesAreCappedAndCharged(t *testing.T) {
	const highWater, n = 4096, 2000
	l := newBatchLog(t, 0)
	srv, eng, addr := batchServer(t, l, highWater, 0)
	c, other := dial(t, addr), dial(t, addr)
	send(t, c, "put 0 0 60 1\r\nx\r\n")
	expect(t, c, "INSERTED 1\r\n")
	l.pause()
	script := "delete 1\r\n" + strings.Repeat("list-tube-used\r\n", n)
	go func() { _, _ = c.Write([]byte(script)) }() // blocks once the server stops reading
	reply := "USING default\r\n"
	perReply := int64(len(reply) + heldEntryCost)
	ran := func() uint64 { return cmdCount(srv, codec.OpListTubeUsed) }
	waitUntil(t, "replies held up to the cap", func() bool {
		return eng.Memory(engine.MemReplies) >= highWater-perReply
	})
	send(t, other, "list-tube-used\r\n") // the loop has gone round since
	expect(t, other, "USING default\r\n")
	maxRan := uint64(highWater/perReply) + 1
	if got, charged := ran(), eng.Memory(engine.MemReplies); got > maxRan || charged > highWater+perReply {
		t.Fatalf("%d commands ran with their replies held, %d bytes charged; want at most %d and %d",
			got, charged, maxRan, highWater+perReply)
	}
	l.resume()
	expect(t, c, "DELETED\r\n"+strings.Repeat(reply, n))
	if got := ran(); got != n+1 {
		t.Fatalf("cmd-list-tube-used %d, want %d", got, n+1)
	}
	waitUntil(t, "the charge for the held replies to go back", func() bool {
		return eng.Memory(engine.MemReplies) == 0
	})
}

// Under a memory ceiling, held replies count against it: a connection
// whose held replies reach it waits, with at most one command's reply
// past it, until they are sent.
func TestHeldRepliesStopAtTheMemoryCeiling(t *testing.T) {
	const n = 2000
	l := newBatchLog(t, 0)
	const limit = 16 << 10
	srv, eng, addr := batchServer(t, l, 0, limit)
	c := dial(t, addr)
	send(t, c, "put 0 0 60 1\r\nx\r\n")
	expect(t, c, "INSERTED 1\r\n")
	used, _ := eng.JobMemory()
	room := limit - used - eng.Memory(engine.MemTubes)
	l.pause()
	reply := "USING default\r\n"
	go func() { _, _ = c.Write([]byte("delete 1\r\n" + strings.Repeat("list-tube-used\r\n", n))) }()
	ran := func() uint64 { return cmdCount(srv, codec.OpListTubeUsed) }
	perReply := int64(len(reply) + heldEntryCost)
	waitUntil(t, "replies held up to the ceiling", func() bool {
		return eng.Memory(engine.MemReplies) >= room-2*perReply
	})
	other := dial(t, addr)
	send(t, other, "list-tube-used\r\n")
	expect(t, other, "USING default\r\n")
	// The delete gave the job's memory back: there is that much more room.
	if got, max := ran(), uint64((room+used)/perReply)+2; got > max {
		t.Fatalf("%d commands ran with their replies held under a ceiling with room for %d bytes, want at most %d", got, room+used, max)
	}
	l.resume()
	expect(t, c, "DELETED\r\n"+strings.Repeat(reply, n))
}

// A reserve that runs while earlier replies wait for the log and then
// waits itself is answered TIMED_OUT when the client half-closes, behind
// those replies.
func TestHalfCloseTimedOutComesAfterHeldReplies(t *testing.T) {
	l := newBatchLog(t, 0)
	_, eng, addr := batchServer(t, l, 0, 0)
	c := dial(t, addr)
	send(t, c, "put 0 0 60 1\r\nx\r\n")
	expect(t, c, "INSERTED 1\r\n")
	l.pause()
	send(t, c, "delete 1\r\nreserve\r\n")
	awaitWaiting(t, eng, 1)
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	awaitWaiting(t, eng, 0)
	l.resume()
	expect(t, c, "DELETED\r\nTIMED_OUT\r\n")
}

// Held replies with bodies too large to be copied into the batch (they
// are referenced) come back whole and in order, interleaved with the
// header bytes held around them.
func TestHeldRepliesWithLargeBodies(t *testing.T) {
	const n, size = 8, 3 * inlineBody
	l := newBatchLog(t, time.Millisecond)
	_, _, addr := batchServer(t, l, 0, 0)
	c := dial(t, addr)
	var put, inserted, rsv, want strings.Builder
	for i := 1; i <= n; i++ {
		body := strings.Repeat(string(rune('a'+i)), size)
		fmt.Fprintf(&put, "put 0 0 60 %d\r\n%s\r\n", size, body)
		fmt.Fprintf(&inserted, "INSERTED %d\r\n", i)
		fmt.Fprintf(&rsv, "reserve\r\nlist-tube-used\r\ndelete %d\r\n", i)
		fmt.Fprintf(&want, "RESERVED %d %d\r\n%s\r\nUSING default\r\nDELETED\r\n", i, size, body)
	}
	send(t, c, put.String())
	expect(t, c, inserted.String())
	send(t, c, rsv.String())
	expect(t, c, want.String())
}
