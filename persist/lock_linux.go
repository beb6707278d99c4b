package persist

import (
	"os"

	"golang.org/x/sys/unix"
)

// lockFile takes an open-file-description (OFD) write lock. Unlike a
// classic fcntl lock it belongs to this open file, not to the process, so a
// second Open in the same process is refused too, and closing some other
// descriptor of the file never drops it. It still conflicts with
// upstream beanstalkd's F_SETLK lock, so beanpole and beanstalkd cannot
// share a directory either.
func lockFile(f *os.File) error {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	return unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
}
