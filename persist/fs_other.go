//go:build !linux

package persist

import (
	"errors"
	"os"
)

var errNoFallocate = errors.New("fallocate not supported")

func fallocate(*os.File, int64) error { return errNoFallocate }

func datasync(f *os.File) error { return f.Sync() }
