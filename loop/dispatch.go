package loop

import (
	"errors"
	"time"

	"github.com/beanpole/beanpole/codec"
	"github.com/beanpole/beanpole/engine"
	"github.com/panjf2000/gnet/v2"
)

// hideInternal is the status of a line for c: beanpole's own commands
// (codec.Op.Internal) are unknown to a connection that is not internal
// (ServeInternal), as they are to upstream, so that the public protocol
// stays upstream's byte for byte: UNKNOWN_COMMAND, counted nowhere,
// waiting for nothing.
func hideInternal(c *conn, st codec.Status, op codec.Op) codec.Status {
	if op.Internal() && !c.cl.Internal() {
		return codec.Unknown
	}
	return st
}

// dispatch runs one parsed command line. Replies go to the loop's batch.
func (s *Server) dispatch(c *conn, st codec.Status, cmd *codec.Command) gnet.Action {
	out := &c.ls.out
	switch st {
	case codec.Unknown:
		out.buf = append(out.buf, codec.RepUnknownCommand...)
		return gnet.None
	case codec.BadFormat:
		out.buf = append(out.buf, codec.RepBadFormat...)
		return gnet.None
	}
	c.ls.cmd[cmd.Op].Add(1)
	if st == codec.PauseTubeBadName {
		// Upstream counts it, then rejects the name's leading '-'.
		out.buf = append(out.buf, codec.RepBadFormat...)
		return gnet.None
	}
	cl := &c.cl
	switch cmd.Op {
	case codec.OpPut:
		if c.extra().dec.Skipping() {
			// Over -z: upstream reads and drops the body before
			// answering JOB_TOO_BIG, even when the line also has
			// trailing garbage.
			return gnet.None
		}
		if st == codec.PutTrailingGarbage {
			out.buf = append(out.buf, codec.RepBadFormat...)
			return gnet.None
		}
		cl.MarkProducer()
		c.put = putHeader{id: s.eng.NextID(), pri: cmd.Pri, delay: cmd.Delay, ttr: cmd.TTR, bytes: cmd.Bytes}
		// readBody allocates the body when it sees the first of it.
		c.body = nil
	case codec.OpReserve, codec.OpReserveWithTimeout:
		cl.MarkWorker()
		timeout := time.Duration(-1)
		if cmd.Op == codec.OpReserveWithTimeout {
			timeout = time.Duration(cmd.Timeout) * time.Second
		}
		if c.hungUp() {
			timeout = 0 // nobody is left to wait for the answer
		}
		j, outcome := cl.Reserve(c.ls.passClock(), timeout)
		if outcome == engine.Parked {
			c.parked = true
			return gnet.None
		}
		s.reserveReply(c, j, outcome)
	case codec.OpReserveJob:
		// Only a reserve-job that reserves makes the connection a worker.
		if j := cl.ReserveJob(cmd.ID); j != nil {
			cl.MarkWorker()
			s.reserveReply(c, j, engine.GotJob)
		} else {
			out.buf = append(out.buf, codec.RepNotFound...)
		}
	case codec.OpDelete:
		ok, err := cl.Delete(c.ls.passClock(), cmd.ID)
		s.okErr(out, ok, err, codec.RepDeleted)
	case codec.OpRelease:
		ok, err := cl.Release(cmd.ID, cmd.Pri, time.Duration(cmd.Delay)*time.Second)
		s.okErr(out, ok, err, codec.RepReleased)
	case codec.OpBury:
		ok, err := cl.Bury(cmd.ID, cmd.Pri)
		s.okErr(out, ok, err, codec.RepBuried)
	case codec.OpTouch:
		s.ok(out, cl.Touch(cmd.ID), codec.RepTouched)
	case codec.OpKick:
		if k, err := cl.Kick(cmd.Bound); k == 0 && err != nil {
			out.buf = append(out.buf, refusal(err)...)
		} else {
			out.buf = codec.AppendKicked(out.buf, uint64(k))
		}
	case codec.OpKickJob:
		ok, err := cl.KickJob(cmd.ID)
		s.okErr(out, ok, err, codec.RepKicked)
	case codec.OpPeek:
		s.found(out, s.eng.Peek(cmd.ID))
	case codec.OpPeekReady:
		s.found(out, cl.PeekReady())
	case codec.OpPeekDelayed:
		s.found(out, cl.PeekDelayed())
	case codec.OpPeekBuried:
		s.found(out, cl.PeekBuried())
	case codec.OpUse:
		if !cl.Use(cmd.Tube) {
			out.buf = append(out.buf, codec.RepOutOfMemory...)
			break
		}
		out.buf = codec.AppendUsing(out.buf, cl.Used().NameBytes())
	case codec.OpWatch:
		if n, ok := cl.Watch(cmd.Tube); ok {
			out.buf = codec.AppendWatching(out.buf, uint64(n))
		} else {
			out.buf = append(out.buf, codec.RepOutOfMemory...)
		}
	case codec.OpIgnore:
		if n, ok := cl.Ignore(cmd.Tube); ok {
			out.buf = codec.AppendWatching(out.buf, uint64(n))
		} else {
			out.buf = append(out.buf, codec.RepNotIgnored...)
		}
	case codec.OpPauseTube:
		ok, err := cl.PauseTube(cmd.Tube, time.Duration(cmd.Delay)*time.Second)
		s.okErr(out, ok, err, codec.RepPaused)
	case codec.OpStats:
		var st codec.ServerStats
		s.Stats(&st)
		out.buf = codec.AppendStats(out.buf, &st)
	case codec.OpStatsJob:
		var st codec.JobStats
		if s.eng.StatsJob(cmd.ID, &st) {
			out.buf = codec.AppendJobStats(out.buf, &st)
		} else {
			out.buf = append(out.buf, codec.RepNotFound...)
		}
	case codec.OpStatsTube:
		var st codec.TubeStats
		if s.eng.StatsTube(cmd.Tube, &st) {
			out.buf = codec.AppendTubeStats(out.buf, &st)
		} else {
			out.buf = append(out.buf, codec.RepNotFound...)
		}
	case codec.OpListTubes:
		c.ls.tubes = s.eng.AppendTubeNames(c.ls.tubes[:0])
		s.tubeList(c, c.ls.tubes)
		clear(c.ls.tubes)
	case codec.OpListTubeUsed:
		out.buf = codec.AppendUsing(out.buf, cl.Used().NameBytes())
	case codec.OpListTubesWatched:
		names := c.ls.tubes[:0]
		for _, t := range cl.Watched() {
			names = append(names, t.NameBytes())
		}
		s.tubeList(c, names)
		clear(names)
		c.ls.tubes = names
	case codec.OpCancelWait:
		// A parked reserve takes its cancel line before any command runs
		// (cancelParked): here nothing waits, or the wait had its answer.
		out.buf = append(out.buf, codec.RepNotWaiting...)
	case codec.OpUnreserve:
		ok, err := cl.Unreserve(cmd.ID)
		s.okErr(out, ok, err, codec.RepUnreserved)
	case codec.OpPeekWatched:
		if id, pri, ok := cl.Peek(c.ls.passClock()); ok {
			out.buf = codec.AppendReady(out.buf, id, pri)
		} else {
			out.buf = append(out.buf, codec.RepNotFound...)
		}
	case codec.OpQuit:
		return gnet.Close
	}
	return gnet.None
}

// bigReply: a reply built from a list (list-tubes) longer than this is
// built only if it fits under the memory ceiling.
const bigReply = 64 << 10

// tubeList answers list-tubes or list-tubes-watched. A list whose reply
// would not fit under the memory ceiling, with the unsent replies and
// everything else charged, is not built: it is answered OUT_OF_MEMORY, as
// upstream answers when malloc fails. One that fits is charged as unsent
// output once the socket has taken what it takes (chargeOutput), so
// non-readers that repeat it reach the ceiling and are answered
// OUT_OF_MEMORY from there on instead of piling copies of it up. A long
// list is written out a chunk at a time as it is built (unless replies
// wait for the binlog ahead of it), so the only copy of it is the one gnet
// keeps of what the socket has not taken.
func (s *Server) tubeList(c *conn, names [][]byte) {
	out := &c.ls.out
	n := int64(codec.TubeListSize(names))
	if n <= bigReply {
		out.buf = codec.AppendTubeList(out.buf, names)
		return
	}
	if !s.eng.Charge(c.ls.shard, engine.MemReplies, n) {
		out.buf = append(out.buf, codec.RepOutOfMemory...)
		return
	}
	s.eng.Uncharge(c.ls.shard, engine.MemReplies, n)
	stream := !c.heldPending()
	out.buf = codec.AppendTubeListHead(out.buf, names)
	for _, name := range names {
		out.buf = codec.AppendTubeListItem(out.buf, name)
		if stream && len(out.buf) >= chunk {
			if s.send(c, 0); c.closed || c.fenced {
				return // the pass discards the rest
			}
		}
	}
	out.buf = codec.AppendTubeListEnd(out.buf)
	if stream {
		out.room = 0 // the pass charges what gnet kept before the next command
	}
}

func (s *Server) ok(out *output, ok bool, reply []byte) {
	if ok {
		out.buf = append(out.buf, reply...)
	} else {
		out.buf = append(out.buf, codec.RepNotFound...)
	}
}

// okErr answers a command that may also be refused by the binlog.
func (s *Server) okErr(out *output, ok bool, err error, reply []byte) {
	switch {
	case !ok:
		out.buf = append(out.buf, codec.RepNotFound...)
	case err != nil:
		out.buf = append(out.buf, refusal(err)...)
	default:
		out.buf = append(out.buf, reply...)
	}
}

// refusal is the reply to a change the engine refused: OUT_OF_MEMORY for
// a full disk, as upstream, and for a put past the job-memory ceiling, as
// upstream when malloc fails; INTERNAL_ERROR once the log has failed, and
// once every job id has been handed out (both last).
func refusal(err error) []byte {
	if errors.Is(err, engine.ErrNoRoom) || errors.Is(err, engine.ErrNoMemory) {
		return codec.RepOutOfMemory
	}
	return codec.RepInternalError
}

func (s *Server) found(out *output, j *engine.Job) {
	if j == nil {
		out.buf = append(out.buf, codec.RepNotFound...)
		return
	}
	out.buf = codec.AppendFoundHeader(out.buf, j.ID, uint64(len(j.Body)-2))
	out.body(j.Body)
}

// reserveReply answers a reserve that has its outcome.
func (s *Server) reserveReply(c *conn, j *engine.Job, outcome engine.Outcome) {
	out := &c.ls.out
	switch outcome {
	case engine.GotJob:
		out.buf = codec.AppendReservedHeader(out.buf, j.ID, uint64(len(j.Body)-2))
		out.body(j.Body)
	case engine.TimedOut:
		out.buf = append(out.buf, codec.RepTimedOut...)
	case engine.DeadlineSoon:
		out.buf = append(out.buf, codec.RepDeadlineSoon...)
	}
}

// finishPut runs once a put body that ends in CRLF has fully arrived.
func (s *Server) finishPut(c *conn) {
	out := &c.ls.out
	body := c.body
	c.body = nil
	if s.eng.Draining() {
		out.buf = append(out.buf, codec.RepDraining...)
		return
	}
	p := c.put
	j, err := c.cl.Put(c.ls.passClock(), p.id, p.pri, time.Duration(p.delay)*time.Second, time.Duration(p.ttr)*time.Second, body)
	if err != nil {
		// The job-memory ceiling or the binlog refused it (the id is
		// burned), or no id was left.
		if errors.Is(err, engine.ErrNoIDs) && !s.idsOut.Swap(true) {
			s.log.Error().Msg("every job id, up to 18446744073709551615, has been handed out: puts are answered INTERNAL_ERROR from now on (ids are never reused)")
		}
		out.buf = append(out.buf, refusal(err)...)
		return
	}
	out.buf = codec.AppendInserted(out.buf, j.ID)
}
