// Package logbuf is a log destination for tests: the server's goroutines
// write to it while the test reads what they wrote.
package logbuf

import (
	"strings"
	"sync"
)

// Buffer is an io.Writer safe for concurrent use whose String is all that
// was written so far.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is what was written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
