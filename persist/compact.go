package persist

import "slices"

// Compaction.
//
// A live job pins the segment holding its latest full record, and segments
// are only reclaimed from the head, so one long-lived buried or delayed job
// can keep gigabytes of otherwise dead segments alive (upstream #43, #359,
// #570, #573). Compaction copies the jobs pinning the head segment forward:
// Options.Rewrite appends a fresh full record for each, which moves the
// pin, and once those records are durable the head (and whatever dead
// segments follow it) is reclaimed.
//
// The log cannot copy a job itself: only the engine knows its current
// state, and the copy must be ordered with the job's other records, which
// only the engine's locking can do. Hence the callback.
//
// It runs when closed segments carry at least CompactRatio bytes nothing
// needs for each byte a live job needs, and never touches the newest
// closed segment: jobs there are usually about to be deleted anyway.

// maxCompactRounds bounds one pass; the next sealed segment starts another.
const maxCompactRounds = 64

func (l *Log) compactLoop() {
	defer l.bg.Done()
	for {
		select {
		case <-l.wakeCompact:
		case <-l.stop:
			return
		}
		l.Compact()
	}
}

// Compact waits until everything appended so far is durable, reclaims
// what that frees, then compacts if due, and returns how many jobs it
// asked Options.Rewrite to rewrite. The log runs it by itself whenever a
// segment is sealed; calling it is useful in tests, or from an admin
// command to shrink the directory now. Do not call it while holding a
// lock Rewrite needs.
func (l *Log) Compact() int {
	l.compactMu.Lock()
	defer l.compactMu.Unlock()
	total := 0
	var prev *segment
	for range maxCompactRounds {
		// The rewrites of the previous round must be durable before the
		// segments they free can go.
		if !l.waitDurable() {
			break
		}
		l.reclaim()
		l.mu.Lock()
		ids, head := l.planLocked()
		l.mu.Unlock()
		if len(ids) == 0 || head == prev {
			// Nothing to do, or the last round freed nothing: some job
			// could not be rewritten (no space, or the engine dropped it
			// but has not logged its delete yet). Try at the next seal.
			break
		}
		prev = head
		l.opts.Rewrite(ids)
		total += len(ids)
	}
	return total
}

// waitDurable waits until every record placed so far is durable to the
// promised level. It reports false if the log closed or failed meanwhile.
func (l *Log) waitDurable() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	target := l.nextLSN - 1
	for l.syncedLSN < target && !l.closed && l.failed == nil {
		if l.opts.WantSync && l.opts.SyncEvery > 0 && l.writtenLSN > l.syncedLSN {
			kick(l.wakeSync)
		}
		l.cond.Wait()
	}
	return !l.closed && l.failed == nil
}

// planLocked picks the jobs to rewrite: those pinning the head segment, if
// compaction is due.
func (l *Log) planLocked() ([]uint64, *segment) {
	if l.opts.Rewrite == nil || l.opts.CompactRatio < 0 {
		return nil, nil
	}
	nsealed := 0
	var total, live int64
	for _, s := range l.segs {
		if !s.sealed {
			break
		}
		nsealed++
		total += s.used
		live += s.liveBytes
	}
	if nsealed < 2 {
		return nil, nil
	}
	h := l.segs[0]
	if h.refs == 0 || float64(total-live) < l.opts.CompactRatio*float64(live) {
		return nil, nil
	}
	ids := make([]uint64, 0, h.refs)
	for id, p := range l.pins {
		if p.seq == h.seq {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, h
}
