// Package upstream reads the binlog of upstream beanstalkd (the C server)
// so that beanpole can carry its jobs over. It only reads: nothing here
// writes or moves a file.
//
// # Files
//
// beanstalkd -b DIR keeps DIR/binlog.N, N counting up from 1. Files are
// preallocated with zeros and written front to back; beanstalkd deletes
// them from the lowest N up once no live job needs them, so the files
// present always form an unbroken run. Each file starts with a native
// int32 version, then records back to back, then the zeros of the
// preallocation (or the end of the file, once beanstalkd has moved on and
// trimmed it).
//
// # Records, version 7 (beanstalkd 1.5 to 1.13)
//
// Native-endian C structs; this package reads the little-endian 64-bit
// layout (x86-64, arm64, ppc64el, riscv64):
//
//	int32  namelen          0 for an update record
//	[namelen]byte tube name (no NUL)
//	Jobrec, 80 bytes:
//	  @0  u64 id            @40 i64 created-at (wall-clock ns)
//	  @8  u32 priority      @48 i64 deadline   (wall-clock ns)
//	  @16 i64 delay (ns)    @56 u32 reserves, @60 timeouts, @64 releases,
//	  @24 i64 ttr (ns)          @68 buries, @72 kicks
//	  @32 i32 body size     @76 u8 state: 0 deleted, 1 ready, 2 reserved,
//	                            3 buried, 4 delayed
//	[body size]byte body    full records only; ends in CRLF
//
// A full record (namelen > 0) is written when a job is put and again when
// compaction moves a live job forward; an update record (namelen 0, no
// body) when it is deleted, buried, kicked or released with a delay.
// Reserve, touch, a release without delay, a TTR timeout and a delayed job
// becoming ready are not written. A record whose id is 0 is the zero
// preallocation: the file's records end there.
//
// # Records, version 5 (beanstalkd 1.4)
//
// The same fields at the same offsets, but namelen is a size_t (8 bytes),
// the job struct is 77 bytes (no trailing padding) and delay, ttr,
// created-at and deadline are microseconds.
//
// # Replay
//
// Replay folds the files in order the way beanstalkd's own start-up does:
// a full record creates the job (or moves its body, for compaction), an
// update record changes its state and counters, a delete removes it, an
// update for a job no full record named is ignored (its put was in a file
// since deleted, so the job was deleted or moved), and the last record
// wins. A reserved job comes back ready, a delayed one keeps its absolute
// deadline. Buried jobs are ordered by when they were buried, as far as
// the records still tell: a job moved by compaction keeps its place.
//
// Replay keeps no bodies: it remembers where each live job's latest full
// record put its body (file, offset, size), so that the caller can copy
// them one at a time.
//
// # Damage
//
// beanstalkd stops reading a file at the first record it cannot read and
// goes on with the next file. So does Replay, and it tells two cases
// apart. A torn tail is a bad record followed by nothing but zeros: a
// write cut short, as when beanstalkd is killed between the write(2)s of
// one record; at most that record is lost. Anything else is damage: the
// records after it in the file are not applied, and Replay names the jobs
// it can still find there, reading them without trusting them. A file
// missing from the run is damage too. Without checksums, one cut cannot
// be seen at all, by beanstalkd or here: an update record cut by a power
// loss after the first bytes of its created-at field reads as a delete.
//
// A gap in the run is one entry however many files it spans. The search
// for data past the records skips the holes of the preallocation when the
// file can say where they are (DataSeeker), rather than read them as
// zeros.
//
// Two things are refused outright, not read as damage (ErrRefused): a
// record naming job id 2^64-1, which no id can follow, so that the jobs
// put after the import would reuse ids; and a file whose header declares
// version 5 or 7 but whose records do not read under it and do under the
// other version, where reading the records as damage would probe them
// under the wrong layout and find nonsense ids.
//
// Three choices differ from beanstalkd's: a torn record of a job already
// known leaves the job as its earlier records had it (beanstalkd drops the
// job); a full record whose body does not end in CRLF is refused
// (beanstalkd would read the zeros of the preallocation as its body); and
// a record no beanstalkd writes (a zero TTR or creation time, a tube name
// with bytes no name has) is refused rather than applied.
package upstream
