package codec

// ServerStats is everything the `stats` reply shows, in upstream's key
// order. Strings are written as double-quoted YAML scalars (1.13 style).
type ServerStats struct {
	CurrentJobsUrgent, CurrentJobsReady, CurrentJobsReserved   uint64
	CurrentJobsDelayed, CurrentJobsBuried                      uint64
	Cmd                                                        [NumOps]uint64 // indexed by Op
	JobTimeouts, TotalJobs, MaxJobSize, CurrentTubes           uint64
	CurrentConnections, CurrentProducers, CurrentWorkers       uint64
	CurrentWaiting, TotalConnections                           uint64
	PID                                                        int
	Version                                                    string
	RusageUtimeSec, RusageUtimeUsec                            int64
	RusageStimeSec, RusageStimeUsec                            int64
	Uptime                                                     uint64
	BinlogOldestIndex, BinlogCurrentIndex                      uint64
	BinlogRecordsMigrated, BinlogRecordsWritten, BinlogMaxSize uint64
	// BinlogFailed: a binlog write or fsync failed and changes are
	// refused. Only then is binlog-failed shown, so the reply is
	// upstream's key for key while the log is healthy.
	BinlogFailed               bool
	Draining                   bool
	ID, Hostname, OS, Platform string
	// beanpole's own keys, after all of upstream's: the memory charged to
	// jobs (bodies and a fixed overhead each) and its ceiling (0: none).
	JobMemoryBytes, JobMemoryLimit uint64
}

// TubeStats is everything the `stats-tube` reply shows, in upstream's order.
type TubeStats struct {
	Name                                                     []byte
	CurrentJobsUrgent, CurrentJobsReady, CurrentJobsReserved uint64
	CurrentJobsDelayed, CurrentJobsBuried, TotalJobs         uint64
	CurrentUsing, CurrentWatching, CurrentWaiting            uint64
	CmdDelete, CmdPauseTube, Pause, PauseTimeLeft            uint64
}

// JobStats is everything the `stats-job` reply shows, in upstream's order.
type JobStats struct {
	ID                                          uint64
	Tube                                        []byte
	State                                       string // ready|reserved|delayed|buried
	Pri                                         uint32
	Age, Delay, TTR, TimeLeft                   uint64
	File                                        uint64
	Reserves, Timeouts, Releases, Buries, Kicks uint64
}
