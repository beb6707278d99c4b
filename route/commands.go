package route

import (
	"bytes"
	"slices"
	"strconv"
	"time"

	"github.com/beanpole/beanpole/codec"
)

// forward runs a command at group g (with the session's used tube first,
// if it reads it); id is the job the command names, if any. A command
// whose reply is short (small) goes on its way behind the others; one
// whose reply may be large is answered before the next is sent, so that a
// backend never waits to send replies the router is not reading.
func (s *session) forward(g int, usesTube bool, id uint64, small bool, parts ...[]byte) bool {
	b, err := s.backend(g)
	if err != nil {
		return false
	}
	if usesTube {
		s.useAt(b, s.use)
	}
	return s.send(b, id, parts...) && (small || s.settle())
}

// read runs a command that changes nothing (peek*, stats-job,
// stats-tube) at group g, once every reply still to come is in. When its
// connection to the group is lost before the reply (the group's leader
// died, stopped, or handed its lead over) and held none of the session's
// reservations, the command is sent again at the group's next leader,
// unseen by the client, as a waiting reserve is (reserveOn).
func (s *session) read(g int, usesTube bool, id uint64, line []byte) bool {
	if !s.settle() {
		return false
	}
	var l losses
	for {
		b, err := s.backend(g)
		if err != nil {
			return false
		}
		if usesTube {
			s.useAt(b, s.use)
		}
		l.try()
		s.lost = nil
		if s.send(b, id, line) && s.settle() {
			return true
		}
		if s.lost != b || len(b.held) > 0 {
			return false
		}
		clear(s.pend)
		s.pend = s.pend[:0]
		s.drop(b)
		if !l.lost() {
			return false
		}
	}
}

// watchedByGroup is the session's watched tubes by group, and the groups
// in order.
func (s *session) watchedByGroup() (map[int][]string, []int) {
	by := map[int][]string{}
	for _, t := range s.watch {
		g := GroupOfTube([]byte(t), s.r.cfg.Groups)
		by[g] = append(by[g], t)
	}
	groups := make([]int, 0, len(by))
	for g := range by {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	return by, groups
}

// outcome is how one try of a reserve ended.
type outcome int

const (
	answered outcome = iota // the client's reply is in out
	broken                  // the session ends
	// lost: a group's leader closed its backend (it died, or its lead
	// moved) while the reserve was on its way there, and the session held
	// no reservation in that group. Whatever that leader reserved for the
	// session is ready again at the next (docs/cluster.md), so the reserve
	// runs again, at the group's next leader, unseen by the client.
	lost
	// suspended: the reserve waits, and its session lets its goroutine go
	// until a socket it waits on has input (suspend, resume).
	suspended
	// fresh: the reserve is yet to be tried (reserveOn).
	fresh
)

// maxQuickLosses bounds how often in a row a command is lost within a
// second of being sent before its client's connection is closed: leaders
// that keep closing what they are sent are not failing over.
const maxQuickLosses = 20

// losses are the losses in a row of a command sent again at each.
type losses struct {
	quick int       // in a row, each within a second of its try
	tried time.Time // when the last try began
}

// try notes that a try begins.
func (l *losses) try() { l.tried = time.Now() }

// lost counts a loss of the last try, and says whether the command may be
// tried again.
func (l *losses) lost() bool {
	if l.quick++; time.Since(l.tried) >= time.Second {
		l.quick = 0
	}
	return l.quick <= maxQuickLosses
}

// reserving is a reserve under way: what it needs to go on after a loss,
// or once its session resumes it.
type reserving struct {
	on       bool // suspended: the session resumes it before anything else
	c        codec.Command
	line     []byte // the line sent, in lineBuf
	lineBuf  [40]byte
	deadline time.Time // reserve-with-timeout's
	losses
	bs   []*backend
	woke int // which socket woke it: -1 the client's, i bs[i]'s
}

// reserve runs a reserve or reserve-with-timeout, again at a group's next
// leader if the one it waited at is lost (lost), with what is left of its
// timeout.
func (s *session) reserve(cmd *codec.Command, line []byte) bool {
	if s.more {
		if by, groups := s.watchedByGroup(); len(groups) == 1 {
			return s.pipelineReserve(groups[0], by[groups[0]], line)
		}
	}
	if !s.settle() {
		return false
	}
	r := &s.rsv
	r.c, r.losses = *cmd, losses{}
	r.deadline = time.Now().Add(time.Duration(r.c.Timeout) * time.Second)
	r.line = append(r.lineBuf[:0], "reserve\r\n"...)
	if r.c.Op == codec.OpReserveWithTimeout {
		r.setTimeout(r.c.Timeout)
	}
	return s.reserveOn(fresh)
}

// setTimeout has the reserve-with-timeout wait secs.
func (r *reserving) setTimeout(secs uint32) {
	r.c.Timeout = secs
	r.line = strconv.AppendUint(append(r.lineBuf[:0], "reserve-with-timeout "...), uint64(secs), 10)
	r.line = append(r.line, "\r\n"...)
}

// reserveOn goes on with the reserve in s.rsv, whose last try ended as out
// (fresh: none yet), trying again after each loss, until it is answered,
// fails (false), or is suspended.
func (s *session) reserveOn(out outcome) bool {
	r := &s.rsv
	for {
		switch out {
		case answered:
			return true
		case broken:
			return false
		case suspended:
			r.on = true
			return true
		case lost:
			if !r.lost() {
				return false
			}
			if r.c.Op == codec.OpReserveWithTimeout {
				// Whole seconds, rounded up: a job ready at the next
				// leader is still taken once the time is up (a timeout of
				// 0).
				r.setTimeout(uint32(max(0, (time.Until(r.deadline)+time.Second-1)/time.Second)))
			}
		}
		r.try()
		out = s.reserveOnce(&r.c, r.line)
	}
}

// buffered is the first backend the reserve waits at whose reply the
// session read already (no socket shows it), or -1.
func (r *reserving) buffered() int {
	for i, b := range r.bs {
		if b.rd != nil && b.rd.Buffered() > 0 {
			return i
		}
	}
	return -1
}

// suspend lets the session's goroutine go while its reserve waits: the
// parking wakes it (a goroutine of its own again, resume) when its client
// or a group it waits at has input. The session keeps no buffer but what
// its client sent behind the reserve. False if the router stops.
func (s *session) suspend() bool {
	s.rest()
	if len(s.buf) == 0 {
		s.buf = nil
	}
	s.scratch = nil
	s.fds = append(s.fds[:0], s.fd)
	for _, b := range s.rsv.bs {
		s.fds = append(s.fds, b.fd)
	}
	return s.r.park.park(s, s.fds)
}

// resume goes on with the reserve suspended (s.rsv) once a socket it waits
// on has input (s.rsv.woke): false ends the session.
func (s *session) resume() bool {
	r := &s.rsv
	r.on = false
	bs := r.bs
	for _, b := range bs {
		b.bufs()
	}
	var out outcome
	switch {
	case r.woke >= 0:
		rep, err := bs[r.woke].readReply()
		out = s.wonWait(bs, nil, r.woke, waited{reply: rep, err: err})
	case !s.readWaiting():
		return false
	case !s.ended:
		r.on = true // input behind the reserve, held until it is answered
		return true
	case !s.withdrawAll(bs, nil, -1):
		return false
	default:
		// The client hung up: no job for it, as on one server.
		s.out = append(s.out, codec.RepTimedOut...)
		return true
	}
	return s.reserveOn(out)
}

// pipelineReserve sends a reserve at group g, whose tubes are all the
// session watches, behind the commands on their way, as a client that
// sends more behind it pipelines it: its reply is read in its turn, and
// while it waits the client is read as while any reserve waits. A group
// that loses it closes the client's connection, as with any command
// pipelined there: the replies of those behind it are lost too.
func (s *session) pipelineReserve(g int, tubes []string, line []byte) bool {
	b, err := s.backend(g)
	if err != nil {
		return false
	}
	s.watchExactly(b, tubes)
	if _, err := b.wr.Write(line); err != nil {
		return false
	}
	s.pend = append(s.pend, pending{b: b, wait: true})
	return len(s.pend) < window || s.settle()
}

// lostIf is the outcome of a command at b that failed with err (nil: it
// did not): lost, and b dropped, if b's leader closed it while b held no
// reservation of the session's.
func (s *session) lostIf(b *backend, err error) outcome {
	switch {
	case err == nil:
		return answered
	case len(b.held) > 0:
		return broken
	}
	s.drop(b)
	return lost
}

// reserveOnce runs a reserve. Where the watched tubes lie in one group,
// it runs there. Otherwise each group is asked for a job at once, and the
// most urgent one offered is taken (the others are put back, no release
// counted); when none offers one, the reserve waits at every group, the
// first answer wins, and the other waits are cancelled.
func (s *session) reserveOnce(cmd *codec.Command, line []byte) outcome {
	by, groups := s.watchedByGroup()
	if len(groups) == 1 {
		b, err := s.backend(groups[0])
		if err != nil {
			return broken
		}
		s.watchExactly(b, by[groups[0]])
		if !s.settle() {
			return broken
		}
		if err := b.send(line); err != nil {
			return s.lostIf(b, err)
		}
		w, out := s.wait(b)
		if out == answered {
			b.note(w, 0)
			s.out = append(s.out, w...)
		}
		return out
	}
	bs := make([]*backend, len(groups))
	for i, g := range groups {
		b, err := s.backend(g)
		if err != nil {
			return broken
		}
		s.watchExactly(b, by[g])
		bs[i] = b
	}
	if !s.settle() {
		return broken
	}
	// What is ready now, most urgent first across the groups: every group
	// names the job a reserve would take there (beanpole-peek-watched,
	// which writes nothing), and the reserve runs at the group with the
	// most urgent one. At first, the group the session last took a job
	// from (else the first) takes its job at once, behind naming it: when
	// no other group names a more urgent one, that is the answer, in one
	// round trip; otherwise it goes back, uncounted. Among groups, jobs of
	// equal priority come in no set order: each group's ids come from a
	// counter of its own. A job another worker took meanwhile sends it
	// round again, peekRounds times at most.
	take := max(0, slices.Index(groups, s.lastTake))
	for round := range peekRounds {
		if round > 0 {
			take = -1
			if !s.settle() { // a job put back
				return broken
			}
		}
		reps, ok := askAll(bs, func(b *backend) string {
			if take >= 0 && b == bs[take] {
				return "beanpole-peek-watched\r\nreserve-with-timeout 0\r\n"
			}
			return "beanpole-peek-watched\r\n"
		})
		if !ok {
			return broken
		}
		var taken []byte
		if take >= 0 {
			rep, err := bs[take].readReply()
			if err != nil {
				return s.lostIf(bs[take], err)
			}
			if bytes.HasPrefix(rep, []byte("RESERVED ")) {
				taken = bytes.Clone(rep)
			}
		}
		// The most urgent job named, but the one taken's group's when it
		// took one: that group's next is what it took.
		best, bestID, bestPri := -1, uint64(0), uint64(0)
		for i, rep := range reps {
			id, pri, ok := readyJob(rep)
			if ok && (taken == nil || i != take) && (best < 0 || pri < bestPri || pri == bestPri && id < bestID) {
				best, bestID, bestPri = i, id, pri
			}
		}
		if taken != nil {
			// The job taken is the one its group named, unless another
			// worker took that one first: then its priority is asked.
			id := replyID(taken)
			named, pri, ok := readyJob(reps[take])
			if !ok || named != id {
				rep, err := bs[take].roundTrip([]byte("stats-job " + strconv.FormatUint(id, 10) + "\r\n"))
				if err != nil {
					return s.lostIf(bs[take], err)
				}
				if pri, ok = yamlUint(rep, "pri"); !ok {
					return broken
				}
			}
			if best < 0 || pri <= bestPri {
				bs[take].note(taken, 0)
				s.out = append(s.out, taken...)
				s.lastTake = groups[take]
				return answered
			}
			// Another group names a more urgent job.
			s.own(bs[take], "UNRESERVED", "beanpole-unreserve "+strconv.FormatUint(id, 10)+"\r\n")
		}
		if best < 0 {
			break
		}
		rep, err := bs[best].roundTrip([]byte("reserve-with-timeout 0\r\n"))
		if err != nil {
			return s.lostIf(bs[best], err)
		}
		if bytes.HasPrefix(rep, []byte("RESERVED ")) {
			bs[best].note(rep, 0)
			s.out = append(s.out, rep...)
			s.lastTake = groups[best]
			return answered
		}
	}
	if !s.settle() { // a job put back
		return broken
	}
	// Whatever is ready now, as above, but taken at once: every group is
	// asked at once, and the priorities of what they offer are read at
	// once; the offers not taken go back behind the reply. This also
	// answers DEADLINE_SOON and TIMED_OUT as one server does.
	type offer struct {
		b     *backend
		reply []byte
		pri   uint64
	}
	var offers []offer
	soon := false
	reps, ok := askAll(bs, func(*backend) string { return "reserve-with-timeout 0\r\n" })
	if !ok {
		return broken
	}
	for i, rep := range reps {
		switch {
		case bytes.HasPrefix(rep, []byte("RESERVED ")):
			offers = append(offers, offer{b: bs[i], reply: rep})
		case bytes.HasPrefix(rep, codec.RepDeadlineSoon):
			soon = true
		}
	}
	if len(offers) > 0 {
		best := 0
		if len(offers) > 1 {
			obs := make([]*backend, len(offers))
			ids := map[*backend]uint64{}
			for i, o := range offers {
				obs[i], ids[o.b] = o.b, replyID(o.reply)
			}
			stats, ok := askAll(obs, func(b *backend) string { return "stats-job " + strconv.FormatUint(ids[b], 10) + "\r\n" })
			if !ok {
				return broken
			}
			for i := range offers {
				pri, ok := yamlUint(stats[i], "pri")
				if !ok {
					return broken
				}
				offers[i].pri = pri
				if o := offers[best]; pri < o.pri || pri == o.pri && replyID(offers[i].reply) < replyID(o.reply) {
					best = i
				}
			}
		}
		offers[best].b.note(offers[best].reply, 0)
		s.out = append(s.out, offers[best].reply...)
		for i, o := range offers {
			if i != best {
				s.own(o.b, "UNRESERVED", "beanpole-unreserve "+strconv.FormatUint(replyID(o.reply), 10)+"\r\n")
			}
		}
		return answered
	}
	if soon {
		s.out = append(s.out, codec.RepDeadlineSoon...)
		return answered
	}
	if cmd.Op == codec.OpReserveWithTimeout && cmd.Timeout == 0 {
		s.out = append(s.out, codec.RepTimedOut...)
		return answered
	}
	return s.waitAll(bs, line)
}

// waitAll has every backend wait with the reserve line; the first answer
// is the client's, and the others' waits are cancelled (a job one of them
// offered meanwhile is put back). Where the session can, the reserve is
// suspended while they wait (suspend, resume).
func (s *session) waitAll(bs []*backend, line []byte) outcome {
	if !s.waitsParked(bs) {
		return s.waitAllGo(bs, line)
	}
	for i, b := range bs {
		if err := b.send(line); err != nil {
			_ = s.withdrawAll(bs[:i], nil, -1)
			return s.lostIf(b, err)
		}
	}
	s.rsv.bs = append(s.rsv.bs[:0], bs...)
	return suspended
}

// waitAllGo is waitAll with a goroutine reading each backend, and one
// reading the client once the wait takes watchAfter.
func (s *session) waitAllGo(bs []*backend, line []byte) outcome {
	type answer struct {
		i int
		w waited
	}
	first := make(chan answer, len(bs))
	relay := make([]chan waited, len(bs))
	for i, b := range bs {
		if err := b.send(line); err != nil {
			// The waits sent already are ended as the others' are.
			_ = s.withdrawAll(bs[:i], relay, -1)
			return s.lostIf(b, err)
		}
		got := b.await()
		relay[i] = make(chan waited, 1)
		go func() {
			w := <-got
			first <- answer{i, w}
			relay[i] <- w
		}()
	}
	win, won := awaitSoon(s, first)
	if won {
		return s.wonWait(bs, relay, win.i, win.w)
	}
	// The replies before the reserve's are the client's now, as on one
	// server, where they go out before a reserve waits.
	s.flush()
	in, stop := s.watchInput()
	for !won {
		select {
		case win = <-first:
			won = true
		case p, ok := <-in:
			if ok {
				if !s.take(p) {
					stop()
					return broken
				}
				continue
			}
			// The client hung up: no job for it, as on one server.
			stop()
			if !s.withdrawAll(bs, relay, -1) {
				return broken
			}
			s.out = append(s.out, codec.RepTimedOut...)
			return answered
		}
	}
	if !stop() {
		return broken
	}
	return s.wonWait(bs, relay, win.i, win.w)
}

// wonWait gives the client the answer of bs[i], the first of the waits to
// answer, and ends the others' waits (each delivered on its relay; nil:
// read by the backend itself). An answer that is bs[i]'s loss (its leader
// closed it) ends them too, and the reserve is lost.
func (s *session) wonWait(bs []*backend, relay []chan waited, i int, w waited) outcome {
	if relay != nil {
		<-relay[i]
	}
	if !s.withdrawAll(bs, relay, i) {
		return broken
	}
	if w.err != nil {
		return s.lostIf(bs[i], w.err)
	}
	bs[i].note(w.reply, 0)
	s.out = append(s.out, w.reply...)
	return answered
}

// withdrawAll ends the waits of bs but bs[except]'s, each delivered on its
// relay (nil: read by the backend itself); false if that failed at a
// backend that held a reservation of the session's. One whose leader
// closed it is dropped: its wait ended with it.
func (s *session) withdrawAll(bs []*backend, relay []chan waited, except int) bool {
	for k, b := range bs {
		if k == except {
			continue
		}
		var got <-chan waited
		if relay != nil {
			got = relay[k]
		}
		if _, err := b.withdraw(got); err != nil {
			if len(b.held) > 0 {
				return false
			}
			s.drop(b)
		}
	}
	return true
}

// watchAfter is how long a reserve may take before the session reads its
// client meanwhile (watchInput): one answered at once, as most are when
// jobs are ready, costs no second goroutine.
const watchAfter = 10 * time.Millisecond

// awaitSoon is what got delivers within watchAfter, if it does.
func awaitSoon[T any](s *session, got <-chan T) (T, bool) {
	if s.soon == nil {
		s.soon = time.NewTimer(watchAfter)
	} else {
		s.soon.Reset(watchAfter)
	}
	select {
	case v := <-got:
		s.soon.Stop()
		return v, true
	case <-s.soon.C:
		var zero T
		return zero, false
	}
}

// wait is the reply of a reserve sent to b, the only group its session
// waits at. One that takes watchAfter is suspended where the session can
// (suspend, resume).
func (s *session) wait(b *backend) ([]byte, outcome) {
	if !s.waitsParked([]*backend{b}) {
		return s.waitGo(b)
	}
	if b.replySoon() {
		rep, err := b.readReply()
		return rep, s.lostIf(b, err)
	}
	s.rsv.bs = append(s.rsv.bs[:0], b)
	return nil, suspended
}

// waitsParked reports whether the session's reserve can be suspended
// while it waits at bs: the router parks, and the sockets of the client
// and of bs are known.
func (s *session) waitsParked(bs []*backend) bool {
	if s.fd < 0 || s.r.park == nil {
		return false
	}
	for _, b := range bs {
		if b.fd < 0 {
			return false
		}
	}
	return true
}

// readWaiting reads what the client sent while its reserve is suspended
// (it has some, or hung up: the parking said so). A session holds at most waitCap of
// input, as one server holds of a connection whose reserve waits: past
// it, readWaiting reports false and the client's connection is closed.
//
// A TLS client's socket may show only part of a record, which crypto/tls
// waits for the rest of: the read gives up after tlsWaitRead, and the
// session is suspended again (the rest wakes it). Its socket may also
// have brought more records than one read takes, which it shows no more:
// those are read at once, without waiting, until crypto/tls holds none.
func (s *session) readWaiting() bool {
	if s.deadline {
		_ = s.c.SetReadDeadline(time.Time{})
		s.deadline = false
	}
	isTLS := socket(s.c) != s.c
	if isTLS {
		_ = s.c.SetReadDeadline(time.Now().Add(tlsWaitRead))
		defer s.c.SetReadDeadline(time.Time{})
	}
	for {
		s.buf = slices.Grow(s.buf, readChunk)
		n, err := s.c.Read(s.buf[len(s.buf) : len(s.buf)+readChunk])
		s.buf = s.buf[:len(s.buf)+n]
		switch {
		case len(s.buf) > s.r.waitCap || !s.hold(&s.heldIn, len(s.buf)):
			return false
		case err != nil:
			s.ended = s.ended || !isTimeout(err)
			return true
		case !isTLS:
			return true
		}
		// Only what crypto/tls holds: a deadline passed reads nothing
		// more from the socket.
		_ = s.c.SetReadDeadline(time.Unix(1, 0))
	}
}

// tlsWaitRead bounds how long a suspended reserve's session waits for the
// rest of a TLS record its client's socket showed part of.
const tlsWaitRead = 10 * time.Millisecond

// waitGo is wait with a goroutine reading b, and one reading the client
// once the wait takes watchAfter.
func (s *session) waitGo(b *backend) ([]byte, outcome) {
	got := b.await()
	if w, ok := awaitSoon(s, got); ok {
		return w.reply, s.lostIf(b, w.err)
	}
	s.flush()
	in, stop := s.watchInput()
	for {
		select {
		case w := <-got:
			if !stop() {
				return nil, broken
			}
			return w.reply, s.lostIf(b, w.err)
		case p, ok := <-in:
			if ok {
				if !s.take(p) {
					stop()
					return nil, broken
				}
				continue
			}
			stop()
			rep, err := b.withdraw(got)
			if err != nil {
				return nil, broken
			}
			return rep, answered
		}
	}
}

// withdraw ends a wait whose answer the session no longer wants (endWait)
// and puts back the job it offered meanwhile, if it did, uncounted: the
// reply is then TIMED_OUT, as if the cancel had come first.
func (b *backend) withdraw(got <-chan waited) ([]byte, error) {
	rep, err := b.endWait(got)
	if err != nil || !bytes.HasPrefix(rep, []byte("RESERVED ")) {
		return rep, err
	}
	return codec.RepTimedOut, b.expect("UNRESERVED", []byte("beanpole-unreserve "+strconv.FormatUint(replyID(rep), 10)+"\r\n"))
}

// peekRounds bounds how often a reserve over several groups peeks and
// finds the job it chose taken, before it takes what every group offers.
const peekRounds = 3

// readyJob reads a READY reply to beanpole-peek-watched.
func readyJob(rep []byte) (id, pri uint64, ok bool) {
	rest, ok := bytes.CutPrefix(bytes.TrimSuffix(rep, []byte("\r\n")), []byte("READY "))
	if !ok {
		return 0, 0, false
	}
	a, b, ok := bytes.Cut(rest, []byte(" "))
	if !ok {
		return 0, 0, false
	}
	id, err1 := strconv.ParseUint(string(a), 10, 64)
	pri, err2 := strconv.ParseUint(string(b), 10, 64)
	return id, pri, err1 == nil && err2 == nil
}

// askAll sends each backend the command line(b) gives it, all at once,
// then reads their replies, in order; each is a copy. False if any failed.
func askAll(bs []*backend, line func(b *backend) string) ([][]byte, bool) {
	reps, failed := askEach(bs, line)
	return reps, len(failed) == 0
}

// askEach is askAll that reads every reply it can, and says which
// backends failed.
func askEach(bs []*backend, line func(b *backend) string) (reps [][]byte, failed []*backend) {
	sent := make([]bool, len(bs))
	for i, b := range bs {
		if _, err := b.wr.WriteString(line(b)); err != nil || b.wr.Flush() != nil {
			failed = append(failed, b)
			continue
		}
		sent[i] = true
	}
	reps = make([][]byte, len(bs))
	for i, b := range bs {
		if !sent[i] {
			continue
		}
		rep, err := b.readReply()
		if err != nil {
			failed = append(failed, b)
			continue
		}
		reps[i] = bytes.Clone(rep)
	}
	return reps, failed
}

// yamlUint is the value of key in a YAML reply (stats-job's pri, say).
func yamlUint(rep []byte, key string) (uint64, bool) {
	for _, l := range yamlLines(rep) {
		if v, ok := bytes.CutPrefix(l, []byte(key+": ")); ok {
			n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// listTubes is the tubes of every group, each once.
func (s *session) listTubes() bool {
	reps, ok := s.askEveryGroup("list-tubes\r\n")
	if !ok {
		return false
	}
	var names [][]byte
	seen := map[string]bool{}
	for _, rep := range reps {
		for _, l := range yamlLines(rep) {
			name, ok := bytes.CutPrefix(l, []byte("- "))
			if ok && !seen[string(name)] {
				seen[string(name)] = true
				names = append(names, name)
			}
		}
	}
	s.longReply(codec.AppendTubeList(nil, names))
	return true
}

// longReply gives the client a list reply the router built. One past
// longReply bytes is held against the router's budget until its client
// takes it; past the budget it is answered OUT_OF_MEMORY instead, as one
// server answers a list it has no room for, and the session goes on.
func (s *session) longReply(rep []byte) {
	if len(rep) > longReply && !s.hold(&s.heldOut, int(s.heldOut)+len(rep)) {
		rep = codec.RepOutOfMemory
	}
	s.reply(rep)
}

// askEveryGroup sends line, a command that changes nothing, to every
// group at once and reads their replies, in group order. A connection
// lost before its reply, holding none of the session's reservations, is
// replaced at its group's next leader and every group asked again, as
// read does.
func (s *session) askEveryGroup(line string) ([][]byte, bool) {
	if !s.settle() {
		return nil, false
	}
	var l losses
	bs := make([]*backend, s.r.cfg.Groups)
	for {
		for g := 1; g <= s.r.cfg.Groups; g++ {
			b, err := s.backend(g)
			if err != nil {
				return nil, false
			}
			bs[g-1] = b
		}
		l.try()
		reps, failed := askEach(bs, func(*backend) string { return line })
		if len(failed) == 0 {
			return reps, true
		}
		for _, b := range failed {
			if len(b.held) > 0 {
				return nil, false
			}
			s.drop(b)
		}
		if !l.lost() {
			return nil, false
		}
	}
}

// firstOnly are the stats that are not summed over the groups: the first
// group's value stands (the process's, or the same at every group).
var firstOnly = map[string]bool{
	"max-job-size": true, "binlog-oldest-index": true, "binlog-current-index": true, "binlog-max-size": true,
	"rusage-utime": true, "rusage-stime": true, "uptime": true, "pid": true, "version": true,
	"draining": true, "id": true, "hostname": true, "os": true, "platform": true,
	"binlog-records-written": true, "binlog-records-migrated": true,
}

// stats is every group's stats summed, with this node's client
// connections in place of the backends'.
func (s *session) stats() bool {
	reps, ok := s.askEveryGroup("stats\r\n")
	if !ok {
		return false
	}
	var keys []string
	vals := map[string]string{}
	sums := map[string]uint64{}
	for _, rep := range reps {
		for _, l := range yamlLines(rep) {
			k, v, ok := bytes.Cut(l, []byte(": "))
			if !ok {
				continue
			}
			key := string(k)
			if _, known := vals[key]; !known {
				keys = append(keys, key)
				vals[key] = string(v)
			}
			if n, err := strconv.ParseUint(string(v), 10, 64); err == nil && !firstOnly[key] {
				sums[key] += n
			}
		}
	}
	cur, total := s.r.Connections()
	sums["current-connections"], sums["total-connections"] = cur, total
	body := []byte("---\n")
	for _, k := range keys {
		v := vals[k]
		if n, ok := sums[k]; ok {
			v = strconv.FormatUint(n, 10)
		}
		body = append(append(append(append(body, k...), ": "...), v...), '\n')
	}
	s.out = codec.AppendOKHeader(s.out, uint64(len(body)))
	s.out = append(append(s.out, body...), "\r\n"...)
	return true
}

// yamlLines are the lines of an OK reply's YAML body.
func yamlLines(rep []byte) [][]byte {
	_, body, _ := bytes.Cut(rep, []byte("\r\n"))
	body = bytes.TrimSuffix(body, []byte("\r\n"))
	return bytes.Split(body, []byte("\n"))
}
