package admin

import (
	"bytes"
	"log"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// net/http's own messages (a failed TLS handshake for each scanner that
// connects) reach the server's log as warnings, at most one a second, the
// next saying how many were left out.
func TestErrorLogWritesAtMostALineASecond(t *testing.T) {
	var buf bytes.Buffer
	e := &errorLog{log: zerolog.New(&buf)}
	l := log.New(e, "", 0)
	for range 5 {
		l.Printf("http: TLS handshake error from %s: EOF", "127.0.0.1:1234")
	}
	want := `{"level":"warn","suppressed":0,"message":"http: TLS handshake error from 127.0.0.1:1234: EOF"}` + "\n"
	if buf.String() != want {
		t.Fatalf("log:\n%s\nwant:\n%s", buf.String(), want)
	}
	e.last.Add(-2e9) // as if two seconds had passed
	buf.Reset()
	l.Printf("http: TLS handshake error from %s: EOF", "127.0.0.1:1235")
	if !strings.Contains(buf.String(), `"suppressed":4`) {
		t.Fatalf("the next line does not count the 4 left out: %s", buf.String())
	}
}
