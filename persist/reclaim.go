package persist

// reclaim deletes segments from the head of the list while nothing needs
// them (upstream's walgc). A head segment can go when:
//   - the writer has sealed it;
//   - no live job's latest full record is in it (refs == 0);
//   - the records that moved its jobs elsewhere (deletes, rewrites) are
//     durable: otherwise a crash could lose both copies;
//   - a later segment's id mark is durable, so the highest job id it
//     contained is still on disk.
//
// Only the head goes, never a segment in the middle: a delete record must
// outlive the put it cancels, and the put is always in an older segment.
// Damaged segments are renamed binlog.N.damaged instead of unlinked, to
// keep the evidence.
func (l *Log) reclaim() {
	// One reclaimer at a time, start to finish: when reclaim returns, no
	// other goroutine is still unlinking segments it took off the list.
	l.reclaimMu.Lock()
	defer l.reclaimMu.Unlock()
	l.mu.Lock()
	var gone []*segment
	for len(l.segs) > 1 && l.cur > 0 {
		h := l.segs[0]
		if !h.sealed || h.refs > 0 || h.lastUnpin > l.syncedLSN || !l.markDurableLocked() {
			break
		}
		gone = append(gone, h)
		l.segs[0] = nil
		l.segs = l.segs[1:]
		l.cur--
	}
	l.mu.Unlock()
	if len(gone) == 0 {
		return
	}
	for _, s := range gone {
		_ = s.closeFile(0, false)
		if s.damaged {
			l.log.Warn().Uint64("segment", s.seq).Msg("binlog: damaged segment no longer needed; kept as " + segName(s.seq) + ".damaged")
			_ = l.opts.FS.Rename(s.path, s.path+".damaged")
		} else {
			_ = l.opts.FS.Remove(s.path)
		}
	}
	if l.opts.WantSync {
		// An unlink lost in a crash could bring back a segment whose
		// deletes are already gone, resurrecting jobs.
		_ = l.opts.FS.SyncDir(l.opts.Dir)
	}
}

// markDurableLocked: does a segment after the head start with a durable
// id mark? The first one after the head has the oldest mark, so it
// decides. (Not the current segment's: under steady load its mark is
// always fresh, and waiting for it would stall reclaiming.)
func (l *Log) markDurableLocked() bool {
	for i := 1; i <= l.cur && i < len(l.segs); i++ {
		if m := l.segs[i].firstLSN; m != 0 {
			return m <= l.syncedLSN
		}
	}
	return false
}
