// Package persist is beanpole's binlog (-b DIR): a write-ahead log of job
// changes that the in-memory engine replays at start-up. It replaces
// upstream beanstalkd's walg.c/file.c with a checksummed, versioned,
// little-endian format and fixes upstream's weaknesses: no checksums, one
// bad record losing the rest of its file, deleted jobs coming back, ids
// reused after a restart, `buries` growing on every restart, release with
// delay 0 losing its priority, fsync driven only by the next write,
// synchronous preallocation, a new file per restart, and old files pinned
// forever by a few long-lived jobs.
//
// # Use
//
//	lg, rec, err := persist.Open(opts, logger)  // lock, recover, start
//	// load rec.Jobs into the engine; next job id = rec.MaxID+1
//	err = lg.Put(&job, record.AckFunc(func(err error) { ... }))
//	...
//	lg.Close()                                 // flush + fsync (SIGTERM)
//
// Log is the engine's Journal: one typed call per kind of change, Put (a
// new job's full record), Delete, Release (every release, delay 0
// included), Bury, Kick, and Rewrite (a fresh full record of a live job,
// for compaction). Each encodes its record with package record, which owns
// the payload format. Records of one job must be appended in the order its
// changes happen: append while holding the lock that guards the job.
// Reserve, touch, TTR expiry and delayed→ready are not logged (replay
// makes reserved jobs ready, and delayed jobs carry a wall-clock
// deadline). The engine also provides Options.Rewrite, which calls Rewrite
// for the jobs the log names, for compaction.
//
// # Durability contract
//
// Each call returns at once; its ack runs on the log's writer goroutine
// when the record is durable to the promised level. With WantSync and
// SyncEvery == 0 (-f0) that is after an fsync covering it (many records
// share one write and one fsync: group commit). Otherwise (-f MS, or -F) it
// is after write(2): the record is in the kernel and survives the process
// being killed, but not a power loss until the next fsync, which with -f MS
// a timer issues at most every MS and at the latest MS after any write.
// Records are written in the order they were appended, so after the process
// dies recovery sees exactly a prefix of what was appended: every
// acknowledged record, possibly some not yet acknowledged, never a record
// without those appended before it. After a power loss the same holds for
// everything fsynced; damage in data that was not is reported. A write or
// fsync error fails the log (ErrFailed): the server keeps serving from
// memory. Close writes everything queued and fsyncs regardless of policy.
// A put that cannot get room (disk full, quota, file descriptors...) is
// refused up front with ErrNoSpace, which the engine answers with
// OUT_OF_MEMORY; a delete never is, because its put reserved its room.
//
// # On-disk format
//
// DIR holds `lock` (an open-file-description write lock held while open)
// and segments `binlog.N`, N = 1, 2, ... Each segment is preallocated to
// SegmentSize (fallocate, or zeros where that is unsupported) and trimmed to
// its content once full. All integers are little-endian; checksums are
// CRC32C (Castagnoli).
//
//	segment header, 32 bytes
//	  0  [8]byte "BPBINLOG"
//	  8  u32     version (1)
//	  12 u32     flags (0)
//	  16 u64     N (must match the file name)
//	  24 u32     reserved
//	  28 u32     CRC32C of bytes 0..28
//	frames, back to back (a frame never straddles two segments)
//	  0  u32     payload length
//	  4  u64     LSN: +1 per frame across the whole log
//	  12 u32     CRC32C of the payload
//	  16 u32     CRC32C of bytes 0..16 (the header itself)
//	  20 payload
//	zeros to the end of the file
//
// The first frame of every segment is an id mark: the highest job id in
// any earlier frame, so old segments can be deleted without job ids ever
// being handed out twice. Payloads (package record) start with a kind byte
// and the job id:
//
//	1 full     id, pri, state, delay, ttr, created, deadline, buried-seq,
//	           counters ×5, tube, body
//	2 delete   id
//	3 bury     id, pri, buried-seq, counters
//	4 kick     id, counters
//	5 release  id, pri, delay, deadline, counters
//	6 id mark  id
//
// Update records carry absolute values, not deltas, so replay is
// idempotent.
//
// # Recovery
//
// Segments are read in order and folded into the live jobs. A frame whose
// header checks out but whose payload does not is skipped (its length is
// trustworthy) and reported; a frame header that does not check out ends
// the readable part of that segment, because nothing after it can be
// located safely (resynchronising by searching would let a job body that
// imitates a frame inject records). At the end of the last segment such
// damage is a torn write: it is cut off with a warning, and the log
// continues from the last good frame. Anywhere else, or when intact frames
// are found beyond it, it is reported as an error naming the segment, the
// offset and, where they can be read, the job ids involved, and the damaged
// file is kept untouched (renamed binlog.N.damaged once no longer needed).
// The server always starts, except when the directory holds a format it
// cannot read (ErrFormat), such as upstream's own binlog.
//
// # Space and compaction
//
// Each live job pins the segment holding its latest full record. Segments
// are deleted from the head of the log once unpinned and once the records
// that unpinned them are durable. When closed segments hold at least
// CompactRatio (default 2) bytes of dead data per byte of live data, the
// jobs pinning the head segment are rewritten forward through
// Options.Rewrite, so a few long-lived jobs cannot keep old segments alive.
//
// File layout: frame.go (framing), segment.go, space.go (reservation,
// preallocation), writer.go (group commit), syncer.go (timer fsync),
// reclaim.go, compact.go, scan.go + replay.go + recover.go (recovery),
// import*.go (carrying an upstream binlog over; package upstream reads
// it), lock*.go, fs*.go (the injectable filesystem), log.go (API),
// stats.go, options.go, errors.go. The payloads are package record's.
package persist
