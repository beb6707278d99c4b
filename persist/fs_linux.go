package persist

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

var errNoFallocate = errors.New("fallocate not supported")

// fallocate reserves blocks up to size in one metadata operation. Mode 0
// extends the file size too, and the new range reads as zeros.
func fallocate(f *os.File, size int64) error {
	for {
		err := unix.Fallocate(int(f.Fd()), 0, 0, size)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EINVAL):
			return errNoFallocate
		default:
			return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
		}
	}
}

// datasync is fdatasync: a preallocated segment's size never changes while
// records go in, so the inode timestamps are the only metadata we would
// otherwise pay a journal commit for.
func datasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if !errors.Is(err, unix.EINTR) {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}

// SeekData is lseek's SEEK_DATA: the first offset at or after off that is
// not in a hole, io.EOF if only holes follow. A filesystem that does not
// tell holes apart says the offset itself. The upstream import uses it to
// pass over the preallocation of beanstalkd's files without reading it.
func (f osFile) SeekData(off int64) (int64, error) {
	for {
		d, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		switch {
		case err == nil:
			return d, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENXIO):
			return 0, io.EOF
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.EOPNOTSUPP):
			return off, nil
		}
		return 0, &os.PathError{Op: "lseek SEEK_DATA", Path: f.Name(), Err: err}
	}
}
