package persist

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"syscall"

	"github.com/beanpole/beanpole/persist/upstream"
)

// binlogFiles sorts the binlog.N files of a directory by whose they are.
type binlogFiles struct {
	// up are upstream beanstalkd's (any version), blank those neither
	// side's header claims (zeros, a few bytes, or garbage): beside
	// upstream's files they are upstream's too, killed while
	// preallocating or damaged.
	up, blank []uint64
	// ours is one of beanpole's segments, if the directory holds any.
	ours string
	// odd are the binlog.N that are not regular files (a named pipe, a
	// directory, a device): never opened, since opening a named pipe
	// waits for a writer, but moved aside with upstream's files so that
	// beanpole's own log never meets them either.
	odd []oddFile
}

// oddFile is a binlog.N that is not a regular file.
type oddFile struct {
	seq  uint64
	what string // "a named pipe", ...
}

// foreign are the files that are not beanpole's, in order: what the
// import reads, when up is not empty.
func (b binlogFiles) foreign() []uint64 {
	return slices.Sorted(slices.Values(append(slices.Clone(b.up), b.blank...)))
}

// aside are the files the import moves aside: the foreign ones and the
// odd ones, in order.
func (b binlogFiles) aside() []uint64 {
	seqs := b.foreign()
	for _, o := range b.odd {
		seqs = append(seqs, o.seq)
	}
	slices.Sort(seqs)
	return seqs
}

// skipped says, for an operator, which files the import does not read.
func (b binlogFiles) skipped(dir string) []string {
	var s []string
	for _, o := range b.odd {
		s = append(s, fmt.Sprintf("%s is %s, not a regular file: it is not read; the import moves it to %s with upstream's files",
			join(dir, segName(o.seq)), o.what, join(dir, importArchive)))
	}
	return s
}

// classify sorts dir's binlog.N files by their first bytes. It only
// reads: the dry run uses it too.
func classify(fsys FS, dir string) (binlogFiles, error) {
	var b binlogFiles
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return b, importErr(err)
	}
	for _, n := range names {
		seq, ok := parseSegName(n)
		if !ok {
			continue
		}
		what, err := oddKind(join(dir, n))
		if err != nil {
			return b, importErr(err)
		}
		if what != "" {
			b.odd = append(b.odd, oddFile{seq: seq, what: what})
			continue
		}
		head, err := readHead(fsys, join(dir, n))
		if err != nil {
			return b, importErr(err)
		}
		switch {
		case isUpstream(head):
			b.up = append(b.up, seq)
		case len(head) >= len(segMagic) && string(head[:len(segMagic)]) == segMagic:
			b.ours = n
		default:
			b.blank = append(b.blank, seq)
		}
	}
	slices.Sort(b.up)
	slices.Sort(b.blank)
	slices.SortFunc(b.odd, func(x, y oddFile) int { return cmp.Compare(x.seq, y.seq) })
	if len(b.up) > 0 && b.ours != "" {
		return b, fmt.Errorf("%w: %s holds both upstream beanstalkd's binlog (%s) and beanpole's (%s); move one of them elsewhere",
			ErrFormat, dir, segName(b.up[0]), b.ours)
	}
	return b, nil
}

// oddKind says what the file at path is when it is not a regular file, or
// a symbolic link to one: "a named pipe (FIFO)", "a dangling symbolic
// link (to "x")", "a looping symbolic link (to "y")", ...; "" for a
// regular file. A link that leads nowhere
// (to no file, or round in a loop) is the link's own fault and no error;
// any other failure to look (permission, I/O) is returned.
func oddKind(path string) (string, error) {
	st, err := os.Stat(path)
	if err == nil {
		if st.Mode().IsRegular() {
			return "", nil
		}
		return fileKind(st.Mode()), nil
	}
	if lst, lerr := os.Lstat(path); lerr != nil || lst.Mode()&fs.ModeSymlink == 0 {
		return "", err
	}
	to, _ := os.Readlink(path)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return fmt.Sprintf("a dangling symbolic link (to %q)", to), nil
	case errors.Is(err, syscall.ELOOP):
		return fmt.Sprintf("a looping symbolic link (to %q)", to), nil
	}
	return "", err
}

// fileKind names the kind of a file that is not a regular one.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	}
	return "a special file (" + m.String() + ")"
}

func isUpstream(head []byte) bool {
	_, ok := upstream.Version(head)
	return ok
}

// readHead reads the first bytes of a file, as many as a header has.
func readHead(fsys FS, path string) ([]byte, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, segHeaderSize)
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b[:n], nil
}

// readUpstream replays the upstream files seqs of dir, in order.
func readUpstream(fsys FS, dir string, seqs []uint64) (*upstream.Replay, error) {
	rp := upstream.NewReplay(dir)
	for _, seq := range seqs {
		f, err := fsys.OpenFile(join(dir, segName(seq)), os.O_RDONLY, 0)
		if err != nil {
			return nil, importErr(err)
		}
		size, err := f.Size()
		if err == nil {
			err = rp.ReadFile(seq, f, size)
		}
		f.Close()
		if errors.Is(err, upstream.ErrRefused) {
			return nil, refusedError{err}
		}
		if errors.Is(err, upstream.ErrVersion) {
			return nil, fmt.Errorf("%w: %v", ErrFormat, err)
		}
		if err != nil {
			return nil, importErr(err)
		}
	}
	return rp, nil
}

// refusedError refuses a binlog that must not be imported at all, even
// with its damage accepted (upstream.ErrRefused). errors.Is(err,
// ErrFormat) holds.
type refusedError struct{ err error }

func (e refusedError) Error() string {
	return "binlog import refused: " + e.err.Error() + ". Nothing was changed"
}

func (e refusedError) Unwrap() []error { return []error{ErrFormat, e.err} }

// inUse reports whether a running server (beanstalkd or beanpole) holds
// dir's lock. It creates nothing: no lock file, no lock to take.
func inUse(dir string) bool {
	f, err := os.OpenFile(join(dir, "lock"), os.O_WRONLY, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	return lockFile(f) != nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
