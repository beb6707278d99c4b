package persist

import (
	"errors"
	"io"
	"os"
	"path/filepath"
)

// FS is every filesystem operation the log performs on its directory. The
// log never touches the filesystem any other way (except the lock file), so
// a test can wrap OSFS and inject ENOSPC, EIO or slow fsyncs exactly where it
// wants them.
type FS interface {
	// OpenFile is os.OpenFile.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// ReadDir returns the names of the entries of dir.
	ReadDir(dir string) ([]string, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	// SyncDir makes creations, renames and unlinks in dir durable.
	SyncDir(dir string) error
}

// File is an open segment file.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync makes written data durable (fdatasync where available).
	Sync() error
	Truncate(size int64) error
	// Allocate makes the file at least size bytes long with its blocks
	// reserved, so later writes below size cannot fail for lack of space.
	// It uses fallocate where the filesystem supports it and writes zeros
	// otherwise; either way the new bytes read as zero.
	Allocate(size int64) error
	Size() (int64, error)
}

// OSFS is the real filesystem.
type OSFS struct{}

func (OSFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (OSFS) ReadDir(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}

func (OSFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }
func (OSFS) Remove(name string) error             { return os.Remove(name) }

func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

type osFile struct{ *os.File }

func (f osFile) Sync() error { return datasync(f.File) }

func (f osFile) Size() (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (f osFile) Allocate(size int64) error {
	cur, err := f.Size()
	if err != nil || cur >= size {
		return err
	}
	if err := fallocate(f.File, size); !errors.Is(err, errNoFallocate) {
		return err
	}
	return zeroFill(f, cur, size)
}

// zeroFill is the portable preallocation upstream uses everywhere: real
// zero blocks, no holes, so even NFS or a filesystem without fallocate has
// the space committed before a record needs it.
func zeroFill(w io.WriterAt, from, to int64) error {
	var zeros [64 << 10]byte
	for from < to {
		n := int64(len(zeros))
		if to-from < n {
			n = to - from
		}
		if _, err := w.WriteAt(zeros[:n], from); err != nil {
			return err
		}
		from += n
	}
	return nil
}

func join(dir, name string) string { return filepath.Join(dir, name) }
