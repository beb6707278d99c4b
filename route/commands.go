package route

import (
	"bytes"
	"slices"
	"strconv"

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

// reserve runs a reserve or reserve-with-timeout. Where the watched tubes
// lie in one group, it runs there. Otherwise each group is asked for a job
// at once, and the most urgent one offered is taken (the others are put
// back, no release counted); when none offers one, the reserve waits at
// every group, the first answer wins, and the other waits are cancelled.
func (s *session) reserve(cmd *codec.Command, line []byte) bool {
	if !s.settle() {
		return false
	}
	by, groups := s.watchedByGroup()
	if len(groups) == 1 {
		b, err := s.backend(groups[0])
		if err != nil {
			return false
		}
		s.watchExactly(b, by[groups[0]])
		if !s.settle() || b.send(line) != nil {
			return false
		}
		w, ok := s.wait(b)
		if !ok {
			return false
		}
		b.note(w, 0)
		s.out = append(s.out, w...)
		return true
	}
	bs := make([]*backend, len(groups))
	for i, g := range groups {
		b, err := s.backend(g)
		if err != nil {
			return false
		}
		s.watchExactly(b, by[g])
		bs[i] = b
	}
	if !s.settle() {
		return false
	}
	// Whatever is ready now, most urgent first across the groups.
	type offer struct {
		b     *backend
		reply []byte
		pri   uint64
	}
	var offers []offer
	soon := false
	for _, b := range bs {
		rep, err := b.roundTrip([]byte("reserve-with-timeout 0\r\n"))
		if err != nil {
			return false
		}
		switch {
		case bytes.HasPrefix(rep, []byte("RESERVED ")):
			offers = append(offers, offer{b: b, reply: bytes.Clone(rep)})
		case bytes.HasPrefix(rep, codec.RepDeadlineSoon):
			soon = true
		}
	}
	if len(offers) > 0 {
		best := 0
		if len(offers) > 1 {
			for i := range offers {
				pri, ok := offers[i].b.jobPri(replyID(offers[i].reply))
				if !ok {
					return false
				}
				offers[i].pri = pri
				if o := offers[best]; pri < o.pri || pri == o.pri && replyID(offers[i].reply) < replyID(o.reply) {
					best = i
				}
			}
		}
		for i, o := range offers {
			if i != best && o.b.unreserve(replyID(o.reply)) != nil {
				return false
			}
		}
		offers[best].b.note(offers[best].reply, 0)
		s.out = append(s.out, offers[best].reply...)
		return true
	}
	if soon {
		s.out = append(s.out, codec.RepDeadlineSoon...)
		return true
	}
	if cmd.Op == codec.OpReserveWithTimeout && cmd.Timeout == 0 {
		s.out = append(s.out, codec.RepTimedOut...)
		return true
	}
	return s.waitAll(bs, line)
}

// waitAll has every backend wait with the reserve line; the first answer
// is the client's, and the others' waits are cancelled (a job one of them
// offered meanwhile is put back).
func (s *session) waitAll(bs []*backend, line []byte) bool {
	type answer struct {
		i int
		w waited
	}
	first := make(chan answer, len(bs))
	gots := make([]<-chan waited, len(bs))
	relay := make([]chan waited, len(bs))
	for i, b := range bs {
		if b.send(line) != nil {
			return false
		}
		got := b.await()
		gots[i] = got
		relay[i] = make(chan waited, 1)
		go func() {
			w := <-got
			first <- answer{i, w}
			relay[i] <- w
		}()
	}
	var win answer
	in := s.in
	for won := false; !won; {
		select {
		case win = <-first:
			won = true
		case p, ok := <-in:
			if ok {
				s.buf = append(s.buf, p...)
				continue
			}
			// The client hung up: no job for it, as on one server.
			s.ended, in = true, nil
			for i, b := range bs {
				rep, err := b.endWait(relay[i])
				if err != nil || bytes.HasPrefix(rep, []byte("RESERVED ")) && b.unreserve(replyID(rep)) != nil {
					return false
				}
			}
			s.out = append(s.out, codec.RepTimedOut...)
			return true
		}
	}
	if win.w.err != nil {
		return false
	}
	<-relay[win.i]
	for i, b := range bs {
		if i == win.i {
			continue
		}
		rep, err := b.endWait(relay[i])
		if err != nil || bytes.HasPrefix(rep, []byte("RESERVED ")) && b.unreserve(replyID(rep)) != nil {
			return false
		}
	}
	bs[win.i].note(win.w.reply, 0)
	s.out = append(s.out, win.w.reply...)
	return true
}

// wait is the reply of a reserve sent to b. A client that hangs up
// meanwhile has the wait cancelled, as one server cancels it.
func (s *session) wait(b *backend) ([]byte, bool) {
	got := b.await()
	for {
		select {
		case w := <-got:
			return w.reply, w.err == nil
		case p, ok := <-s.in:
			if ok {
				s.buf = append(s.buf, p...)
				continue
			}
			s.ended = true
			rep, err := b.endWait(got)
			if err != nil {
				return nil, false
			}
			if bytes.HasPrefix(rep, []byte("RESERVED ")) {
				if b.unreserve(replyID(rep)) != nil {
					return nil, false
				}
				rep = codec.RepTimedOut
			}
			return rep, true
		}
	}
}

// unreserve puts back a job b reserved in a race the session did not take.
func (b *backend) unreserve(id uint64) error {
	return b.expect("UNRESERVED", []byte("beanpole-unreserve "+strconv.FormatUint(id, 10)+"\r\n"))
}

// jobPri is job id's priority, from stats-job.
func (b *backend) jobPri(id uint64) (uint64, bool) {
	rep, err := b.roundTrip([]byte("stats-job " + strconv.FormatUint(id, 10) + "\r\n"))
	if err != nil {
		return 0, false
	}
	for _, l := range bytes.Split(rep, []byte("\n")) {
		if v, ok := bytes.CutPrefix(l, []byte("pri: ")); ok {
			n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// listTubes is the tubes of every group, each once.
func (s *session) listTubes() bool {
	if !s.settle() {
		return false
	}
	var names [][]byte
	seen := map[string]bool{}
	for g := 1; g <= s.r.cfg.Groups; g++ {
		b, err := s.backend(g)
		if err != nil {
			return false
		}
		rep, err := b.roundTrip([]byte("list-tubes\r\n"))
		if err != nil {
			return false
		}
		for _, l := range yamlLines(rep) {
			name, ok := bytes.CutPrefix(l, []byte("- "))
			if ok && !seen[string(name)] {
				seen[string(name)] = true
				names = append(names, bytes.Clone(name))
			}
		}
	}
	s.out = codec.AppendTubeList(s.out, names)
	return true
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
	if !s.settle() {
		return false
	}
	var keys []string
	vals := map[string]string{}
	sums := map[string]uint64{}
	for g := 1; g <= s.r.cfg.Groups; g++ {
		b, err := s.backend(g)
		if err != nil {
			return false
		}
		rep, err := b.roundTrip([]byte("stats\r\n"))
		if err != nil {
			return false
		}
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
