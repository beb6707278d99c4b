package persist

import "time"

// syncLoop is the -f MS policy (WantSync with SyncEvery > 0): records are
// acknowledged once written, and this goroutine fsyncs the current segment
// at most once per SyncEvery and at the latest SyncEvery after a write,
// whether or not more writes follow. (Upstream only syncs when the next
// write happens, so the last writes before a quiet period could stay
// unsynced indefinitely.) It runs beside the writer so that an fsync never
// delays the next write.
func (l *Log) syncLoop() {
	defer l.bg.Done()
	var last time.Time
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-l.wakeSync:
		case <-l.stop:
			return
		}
		if wait := time.Until(last.Add(l.opts.SyncEvery)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-l.stop:
				timer.Stop()
				return
			}
		}
		l.mu.Lock()
		s, lsn := l.wcur, l.writtenLSN
		idle := s == nil || lsn <= l.syncedLSN || l.failed != nil
		l.mu.Unlock()
		if idle {
			continue
		}
		// Everything up to lsn is in s or in sealed segments, which were
		// synced when sealed; so syncing s makes all of it durable. If the
		// writer seals s meanwhile, that seal syncs it.
		start := time.Now()
		err := s.sync()
		last = time.Now()
		l.fsyncNanos.Add(uint64(last.Sub(start)))
		l.fsyncs.Add(1)
		l.mu.Lock()
		if err != nil {
			l.failLocked(err)
		} else if lsn > l.syncedLSN {
			l.syncedLSN = lsn
		}
		l.cond.Broadcast()
		l.mu.Unlock()
		if err == nil {
			l.reclaim()
		}
	}
}
