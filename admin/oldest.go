package admin

import (
	"sync"
	"time"
)

// oldestEvery is how often the dashboard reads a tube's oldest ready job.
// Reading it walks every ready job (10 to 40 ms of CPU for a million),
// taking the tube's lock for a chunk at a time: read per page, a few
// browsers would keep a CPU busy walking. Read at most once per
// oldestEvery, the walk costs the same however many pages ask.
const oldestEvery = time.Second

// oldestCache remembers each tube's oldest ready age for oldestEvery, and
// ages it by the time since it was read. Reads are one at a time, so that
// pages asking at once wait for one walk instead of making one each.
type oldestCache struct {
	mu   sync.Mutex
	read func(tube []byte) (time.Duration, bool)
	m    map[string]oldestRead
}

type oldestRead struct {
	at  time.Time
	age time.Duration
	ok  bool
}

// oldestTubes bounds the tubes remembered: past it, reads older than
// oldestEvery are dropped.
const oldestTubes = 4 * overviewTubes

func newOldestCache(read func(tube []byte) (time.Duration, bool)) *oldestCache {
	return &oldestCache{read: read, m: map[string]oldestRead{}}
}

// get is the age of the tube's oldest ready job at now, as read at most
// oldestEvery ago; ok is false when the tube does not exist.
func (c *oldestCache) get(tube string, now time.Time) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, hit := c.m[tube]
	if !hit || now.Sub(r.at) >= oldestEvery || now.Before(r.at) {
		if !hit && len(c.m) >= oldestTubes {
			for k, v := range c.m {
				if now.Sub(v.at) >= oldestEvery {
					delete(c.m, k)
				}
			}
		}
		r.age, r.ok = c.read([]byte(tube))
		r.at = now
		if len(c.m) < oldestTubes {
			c.m[tube] = r
		}
	}
	if !r.ok || r.age == 0 {
		return 0, r.ok
	}
	return r.age + now.Sub(r.at), true
}
