package cluster

import (
	"container/heap"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/beanpole/beanpole/codec"
	"github.com/beanpole/beanpole/record"
)

// state is what the committed records fold into: the live jobs, the
// paused tubes, and the tube names both hold, each kept once. A name is
// dropped once no live job and no pause holds it, so tubes that come and
// go (unique names, one job each) do not pile up.
type state struct {
	live   *record.Live
	tubes  map[string]*tubeName
	pauses map[string]*pause
	expiry pauseHeap // the pauses, soonest end first
}

// tubeName is a tube's name and how many live jobs and pauses hold it.
type tubeName struct {
	s    string
	refs int
}

// pause is a paused tube: pause-tube's delay and the wall-clock Unix ns at
// which it ends, on the leader's clock.
type pause struct {
	tube  string
	delay time.Duration
	until int64
	index int // in state.expiry
}

func newState() state {
	return state{live: record.NewLive(), tubes: map[string]*tubeName{}, pauses: map[string]*pause{}}
}

// intern is the name to keep for tube b; a new one is held by nothing
// until its caller counts a reference.
func (s *state) intern(b []byte) string {
	if n, ok := s.tubes[string(b)]; ok {
		return n.s
	}
	n := &tubeName{s: string(b)}
	s.tubes[n.s] = n
	return n.s
}

func (s *state) ref(name string) { s.tubes[name].refs++ }

func (s *state) unref(name string) {
	n := s.tubes[name]
	if n.refs--; n.refs <= 0 {
		delete(s.tubes, name)
	}
}

// apply folds one valid record in.
func (s *state) apply(r *record.Record) {
	switch r.Kind {
	case record.KindPause:
		s.pause(r)
	case record.KindFull, record.KindDelete:
		old := s.live.Jobs[r.ID]
		if j := s.live.Apply(r, s.intern); j != nil {
			s.ref(j.Tube)
		}
		if old != nil {
			s.unref(old.Tube)
		}
	default:
		s.live.Apply(r, s.intern)
	}
}

// pause applies a pause record: a delay of 0 ends the tube's pause.
func (s *state) pause(r *record.Record) {
	p := s.pauses[string(r.Tube)]
	switch {
	case r.Delay == 0:
		if p != nil {
			s.unpause(p)
		}
	case p != nil:
		p.delay, p.until = time.Duration(r.Delay), r.Deadline
		heap.Fix(&s.expiry, p.index)
	default:
		p = &pause{tube: s.intern(r.Tube), delay: time.Duration(r.Delay), until: r.Deadline}
		s.ref(p.tube)
		s.pauses[p.tube] = p
		heap.Push(&s.expiry, p)
	}
}

func (s *state) unpause(p *pause) {
	heap.Remove(&s.expiry, p.index)
	delete(s.pauses, p.tube)
	s.unref(p.tube)
}

// expire drops the pauses that ended by at (wall-clock Unix ns on the
// leader's clock: the time the leader appended the entry being applied,
// which every node reads alike from the log).
func (s *state) expire(at int64) {
	for len(s.expiry) > 0 && s.expiry[0].until <= at {
		s.unpause(s.expiry[0])
	}
}

// pauseList is the pauses in tube-name order.
func (s *state) pauseList() []record.Pause {
	ps := make([]record.Pause, 0, len(s.pauses))
	for _, p := range s.pauses {
		ps = append(ps, record.Pause{Tube: p.tube, Delay: p.delay, Until: p.until})
	}
	slices.SortFunc(ps, func(a, b record.Pause) int { return strings.Compare(a.Tube, b.Tube) })
	return ps
}

// Pauses are the paused tubes, each with pause-tube's delay and the
// wall-clock time its pause ends, in tube-name order: what a new leader's
// engine restores (engine.RestorePauses) along with the jobs.
func (f *FSM) Pauses() []record.Pause {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pauseList()
}

// maxPause is the longest pause-tube delay: 2^32-1 seconds.
const maxPause = math.MaxUint32 * time.Second

// validPause checks a pause record as the engine could have written it: a
// tube name the protocol accepts, and a delay of at most maxPause with an
// end after 0, or both 0 (the end of a pause).
func validPause(r *record.Record) error {
	switch {
	case !codec.ValidTubeName(r.Tube):
		return fmt.Errorf("%w: a pause of tube name %q", record.ErrBad, r.Tube)
	case r.Delay < 0 || r.Delay > int64(maxPause) || r.Deadline < 0 || (r.Delay == 0) != (r.Deadline == 0):
		return fmt.Errorf("%w: a pause of tube %q for %d ns until %d", record.ErrBad, r.Tube, r.Delay, r.Deadline)
	}
	return nil
}

// pauseHeap orders pauses by their end (container/heap).
type pauseHeap []*pause

func (h pauseHeap) Len() int           { return len(h) }
func (h pauseHeap) Less(i, j int) bool { return h[i].until < h[j].until }
func (h pauseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *pauseHeap) Push(x any) {
	p := x.(*pause)
	p.index = len(*h)
	*h = append(*h, p)
}
func (h *pauseHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return p
}
