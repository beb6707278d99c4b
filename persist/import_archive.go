package persist

// ArchiveDir is where the import moved upstream beanstalkd's files:
// DIR/beanstalkd-import.
func (r *ImportReport) ArchiveDir() string { return join(r.Dir, importArchive) }
