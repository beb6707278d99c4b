package engine

import (
	"sync"

	"github.com/beanpole/beanpole/record"
)

// registry owns the tube namespace. Tubes live as long as a connection uses
// or watches them or a job is in them; "default" lives forever. The list
// keeps creation order with swap-remove on deletion, which is the order
// upstream's list-tubes shows. Lock order: registry before tube.
type registry struct {
	mu     sync.Mutex
	byName map[string]*Tube
	list   []*Tube
}

func (r *registry) init(e *Engine) *Tube {
	r.byName = make(map[string]*Tube)
	t := newTube(e, []byte("default"))
	e.ctr.add(0, cTubeBytes, tubeCost(t.nameBytes))
	r.add(t)
	return t
}

func (r *registry) add(t *Tube) {
	t.listIndex = len(r.list)
	r.list = append(r.list, t)
	r.byName[t.Name] = t
}

// acquire finds or creates the tube and counts one use or watch of it. A
// new tube is charged against the memory ceiling on shard; nil means it
// did not fit (nothing changed).
func (r *registry) acquire(e *Engine, shard int, name []byte, using bool) *Tube {
	r.mu.Lock()
	t := r.byName[string(name)]
	if t == nil {
		if !e.charge(shard, cTubeBytes, tubeCost(name)) {
			r.mu.Unlock()
			return nil
		}
		t = newTube(e, name)
		r.add(t)
	}
	if using {
		t.using++
	} else {
		t.watching++
	}
	r.mu.Unlock()
	return t
}

// release drops one use or watch and frees the tube if nothing holds it.
func (r *registry) release(t *Tube, using bool) {
	r.mu.Lock()
	if using {
		t.using--
	} else {
		t.watching--
	}
	r.freeIfUnusedLocked(t)
	r.mu.Unlock()
}

// maybeFree is called when a tube's last job went away.
func (r *registry) maybeFree(t *Tube) {
	r.mu.Lock()
	r.freeIfUnusedLocked(t)
	r.mu.Unlock()
}

func (r *registry) freeIfUnusedLocked(t *Tube) {
	if t.dead || t.using > 0 || t.watching > 0 || t.Name == "default" {
		return
	}
	t.mu.Lock()
	empty := t.jobs == 0
	if empty && t.timer != nil {
		t.timer.Stop()
	}
	if empty && t.pauseUntil != 0 && t.e.pj != nil {
		// Its pause ends with it (upstream's tube goes with its last
		// reference): the replicated state forgets it too. Nobody waits.
		_ = t.e.pj.Pause(&record.Pause{Tube: t.Name}, nil)
	}
	t.mu.Unlock()
	if !empty {
		return
	}
	t.dead = true
	t.e.ctr.add(0, cTubeBytes, -tubeCost(t.nameBytes))
	delete(r.byName, t.Name)
	last := len(r.list) - 1
	moved := r.list[last]
	r.list[t.listIndex] = moved
	moved.listIndex = t.listIndex
	r.list[last] = nil
	r.list = r.list[:last]
}

func (r *registry) lookup(name []byte) *Tube {
	r.mu.Lock()
	t := r.byName[string(name)]
	r.mu.Unlock()
	return t
}
