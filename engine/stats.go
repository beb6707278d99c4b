package engine

import "github.com/beanpole/beanpole/codec"

const second = int64(1e9)

// StatsJob fills st for job id; false when there is no such job.
func (e *Engine) StatsJob(id uint64, st *codec.JobStats) bool {
	j := e.lockJob(id)
	if j == nil {
		return false
	}
	t := j.Tube
	now := e.mono()
	*st = codec.JobStats{
		ID:       j.ID,
		Tube:     t.nameBytes,
		State:    j.state.String(),
		Pri:      j.Pri,
		Age:      uint64(e.age(j, now) / second),
		Delay:    uint64(j.delay),
		TTR:      uint64(j.ttr),
		Reserves: uint64(j.reserves), Timeouts: uint64(j.timeouts),
		Releases: uint64(j.releases), Buries: uint64(j.buries), Kicks: uint64(j.kicks),
	}
	if j.state == Reserved || j.state == Delayed {
		st.TimeLeft = uint64(max(j.deadline-now, 0) / second)
	}
	t.mu.Unlock()
	st.File = e.fileOf(id)
	return true
}

// age is how long ago j was put, in ns (stats-job age).
func (e *Engine) age(j *Job, now int64) int64 { return max(e.wall(now)-j.createdAt, 0) }

// StatsTube fills st for the named tube; false when it does not exist.
func (e *Engine) StatsTube(name []byte, st *codec.TubeStats) bool {
	e.reg.mu.Lock()
	t := e.reg.byName[string(name)]
	if t == nil {
		e.reg.mu.Unlock()
		return false
	}
	st.CurrentUsing, st.CurrentWatching = uint64(t.using), uint64(t.watching)
	t.mu.Lock()
	e.reg.mu.Unlock()
	now := e.mono()
	st.Name = t.nameBytes
	st.CurrentJobsUrgent = uint64(t.urgent)
	st.CurrentJobsReady = uint64(t.count[Ready])
	st.CurrentJobsReserved = uint64(t.count[Reserved])
	st.CurrentJobsDelayed = uint64(t.count[Delayed])
	st.CurrentJobsBuried = uint64(t.count[Buried])
	st.TotalJobs = t.totalJobs
	st.CurrentWaiting = uint64(t.waiters.n)
	st.CmdDelete = t.cmdDelete
	st.CmdPauseTube = t.cmdPauseTube
	st.Pause, st.PauseTimeLeft = 0, 0
	if t.pauseUntil != 0 {
		st.Pause = uint64(t.pauseDur / second)
		st.PauseTimeLeft = uint64(max(t.pauseUntil-now, 0) / second)
	}
	t.mu.Unlock()
	return true
}

// Stats fills the engine's part of the `stats` reply: job and connection
// gauges and totals. The caller fills commands, process and binlog fields.
func (e *Engine) Stats(st *codec.ServerStats) {
	c := &e.ctr
	st.CurrentJobsUrgent = uint64(c.sum(cJobsUrgent))
	st.CurrentJobsReady = uint64(c.sum(cJobsReady))
	st.CurrentJobsReserved = uint64(c.sum(cJobsReserved))
	st.CurrentJobsDelayed = uint64(c.sum(cJobsDelayed))
	st.CurrentJobsBuried = uint64(c.sum(cJobsBuried))
	st.JobTimeouts = uint64(c.sum(cJobTimeouts))
	st.TotalJobs = uint64(c.sum(cTotalJobs))
	st.CurrentConnections = uint64(c.sum(cConnections))
	st.TotalConnections = uint64(c.sum(cTotalConnections))
	st.CurrentProducers = uint64(c.sum(cProducers))
	st.CurrentWorkers = uint64(c.sum(cWorkers))
	st.CurrentWaiting = uint64(c.sum(cWaiting))
	e.reg.mu.Lock()
	st.CurrentTubes = uint64(len(e.reg.list))
	e.reg.mu.Unlock()
	st.Draining = e.Draining()
	used, limit := e.JobMemory()
	st.JobMemoryBytes, st.JobMemoryLimit = uint64(used), uint64(limit)
}

// AppendTubeNames appends every tube's name in list-tubes order.
func (e *Engine) AppendTubeNames(dst [][]byte) [][]byte {
	e.reg.mu.Lock()
	for _, t := range e.reg.list {
		dst = append(dst, t.nameBytes)
	}
	e.reg.mu.Unlock()
	return dst
}
