//go:build unix && !linux

package persist

import (
	"os"
	"syscall"
)

// lockFile uses flock, which like Linux OFD locks belongs to the open file,
// so a second Open in the same process is refused as well.
func lockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
