package engine

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/beanpole/beanpole/codec"
)

// The operator's actions (flush, move, kick, delete, pause) racing clients
// that put, reserve, release, bury, kick and delete over the same tubes,
// with and without a journal that acknowledges from its own goroutine.
// Then, quiet: no deadlock, every job counted once (puts less deletes and
// flushes is what is left), the gauges, heaps, id table and job memory
// agree, and tubes nobody uses and no job holds are gone.
func TestOperatorRacingClientsKeepsEveryJobCountedOnce(t *testing.T) {
	for _, journaled := range []bool{false, true} {
		name := "no journal"
		if journaled {
			name = "journal"
		}
		t.Run(name, func(t *testing.T) { operatorChurn(t, journaled) })
	}
}

func operatorChurn(t *testing.T, journaled bool) {
	const workers = 4
	e := New(workers)
	var f *fakeJournal
	stopAcks := make(chan struct{})
	acksDone := make(chan struct{})
	if journaled {
		f = &fakeJournal{}
		e.SetJournal(f)
		go func() { // the log's writer: acks whatever is queued, in order
			defer close(acksDone)
			for {
				if n := f.unacked(); n > 0 {
					f.ackNext(n, nil)
					continue
				}
				select {
				case <-stopAcks:
					return
				case <-time.After(50 * time.Microsecond):
				}
			}
		}()
	} else {
		close(acksDone)
	}
	tubes := []string{"default", "a", "b", "c"}
	var (
		stop                         atomic.Bool
		wg                           sync.WaitGroup
		puts, deletes, flushed, gone atomic.Int64
		recent                       [64]atomic.Uint64 // ids the operator picks from
	)
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := lcg(uint32(g*7919 + 1))
			c, ch := newTestClient(e, 1+g)
			c.Watch([]byte(tubes[1+g%3]))
			var held []uint64
			// waitAcked is the loop's rule: a reply waits for its records.
			waitAcked := func() {
				if c.journalState == nil {
					return
				}
				for a, k, _ := c.Durability(); k < a; a, k, _ = c.Durability() {
					if c.WakeWhenAcked(a) {
						select {
						case <-ch:
						case <-time.After(10 * time.Second):
						}
					}
				}
			}
			for !stop.Load() {
				switch rnd(10) {
				case 0, 1, 2:
					c.Use([]byte(tubes[rnd(4)]))
					if j, err := c.Put(e.Now(), e.NextID(), rnd(2000), time.Duration(rnd(3))*time.Millisecond, time.Second, []byte("x\r\n")); err == nil {
						puts.Add(1)
						recent[j.ID%64].Store(j.ID)
					}
					waitAcked()
				case 3, 4:
					j, o := c.Reserve(c.e.Now(), 0)
					if o == GotJob {
						held = append(held, j.ID)
					}
				case 5:
					if len(held) > 0 {
						c.Release(held[0], rnd(2000), time.Duration(rnd(2))*time.Millisecond)
						held = held[1:]
						waitAcked()
					}
				case 6:
					if len(held) > 0 {
						c.Bury(held[0], rnd(2000))
						held = held[1:]
						waitAcked()
					}
				case 7, 8:
					if len(held) > 0 {
						if ok, _ := c.Delete(c.e.Now(), held[0]); ok {
							deletes.Add(1)
						}
						held = held[1:]
						waitAcked()
					}
				case 9:
					c.Use([]byte(tubes[rnd(4)]))
					c.Kick(rnd(3))
					waitAcked()
				}
			}
			waitAcked()
			c.Close()
		}()
	}
	wg.Add(1)
	go func() { // the operator
		defer wg.Done()
		op := e.NewOperator()
		rnd := lcg(4242)
		for !stop.Load() {
			tube := tubes[rnd(4)]
			id := recent[rnd(64)].Load()
			switch rnd(6) {
			case 0:
				states := [][]State{{Ready}, {Delayed}, {Buried}, {Ready, Delayed, Buried}}[rnd(4)]
				if n, err := op.Flush(tube, states...); err == nil || n > 0 {
					flushed.Add(int64(n))
				}
			case 1:
				op.Move(id, tubes[rnd(4)]) // one job for another: no change in the count
			case 2:
				op.Kick(tube, rnd(5))
			case 3:
				op.KickJob(id)
			case 4:
				if op.Delete(id) == nil {
					gone.Add(1)
				}
			case 5:
				op.Pause(tube, time.Duration(rnd(2))*time.Millisecond)
			}
		}
	}()
	time.Sleep(1500 * time.Millisecond)
	stop.Store(true)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("deadlock: the clients and the operator did not stop")
	}
	close(stopAcks)
	<-acksDone
	if f != nil && f.unacked() > 0 {
		f.ackNext(f.unacked(), nil)
	}
	awaitNoDelayed(t, e, 10*time.Second) // delays of a few ms

	var gs codec.ServerStats
	e.Stats(&gs)
	var live, inTable int64
	var sum [Deleted]int64
	for _, name := range e.AppendTubeNames(nil) {
		tb := e.reg.lookup(name)
		tb.mu.Lock()
		for s := Ready; s < Deleted; s++ {
			sum[s] += tb.count[s]
			live += tb.count[s]
		}
		n := int64(0)
		for j := tb.buried.head; j != nil; j = j.next {
			n++
		}
		if int64(tb.ready.Len()) != tb.count[Ready] || int64(tb.delay.Len()) != tb.count[Delayed] || n != tb.count[Buried] {
			t.Errorf("tube %s: ready %d, delayed %d, buried %d vs counts %v", name, tb.ready.Len(), tb.delay.Len(), n, tb.count)
		}
		if tb.jobs != tb.count[Ready]+tb.count[Delayed]+tb.count[Buried]+tb.count[Reserved] {
			t.Errorf("tube %s holds %d jobs, counts %v", name, tb.jobs, tb.count)
		}
		if tb.jobs == 0 && tb.using == 0 && tb.watching == 0 && tb.Name != "default" {
			t.Errorf("tube %s: no job, nobody using or watching it, still listed", name)
		}
		tb.mu.Unlock()
	}
	for i := range e.jobs.shards {
		inTable += int64(e.jobs.shards[i].n)
	}
	want := puts.Load() - deletes.Load() - flushed.Load() - gone.Load()
	if live != want || inTable != live {
		t.Errorf("jobs: %d in tubes, %d in the id table; puts %d - deletes %d - flushed %d - operator deletes %d = %d",
			live, inTable, puts.Load(), deletes.Load(), flushed.Load(), gone.Load(), want)
	}
	if int64(gs.CurrentJobsReady) != sum[Ready] || int64(gs.CurrentJobsDelayed) != sum[Delayed] ||
		int64(gs.CurrentJobsBuried) != sum[Buried] || gs.CurrentJobsReserved != 0 || sum[Reserved] != 0 {
		t.Errorf("global %d/%d/%d/%d vs tubes %v", gs.CurrentJobsReady, gs.CurrentJobsReserved, gs.CurrentJobsDelayed, gs.CurrentJobsBuried, sum)
	}
	if used, _ := e.JobMemory(); used != live*jobCost([]byte("x\r\n")) {
		t.Errorf("job memory %d for %d jobs of %d", used, live, jobCost([]byte("x\r\n")))
	}
	if gs.CurrentConnections != 0 {
		t.Errorf("current-connections %d: the operator must not count as one", gs.CurrentConnections)
	}
	if puts.Load() < 1000 || flushed.Load() == 0 {
		t.Errorf("too little happened to tell: %d puts, %d flushed", puts.Load(), flushed.Load())
	}
}
