package persist

import (
	"fmt"
	"os"
)

// lockDir takes the exclusive lock on DIR/lock that keeps two servers from
// writing one binlog. The returned file must stay open for the life of the
// process (closing it releases the lock).
func lockDir(dir string) (*os.File, error) {
	path := join(dir, "lock")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		// Not ErrLocked: a directory that cannot be written (read-only,
		// permission denied, missing) is no other server's doing.
		return nil, err
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %s: %v", ErrLocked, path, err)
	}
	return f, nil
}
