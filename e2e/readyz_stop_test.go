package e2e

// At SIGTERM, /readyz answers 503 stopping for --stop-grace while the
// protocol port still serves, so that a load balancer polling /readyz
// takes the server out before its listeners close.

import (
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"
)

func TestReadyzSaysStoppingBeforeTheListenersClose(t *testing.T) {
	skipUnlessBeanpole(t, "--http and --stop-grace are beanpole's")
	t.Parallel()
	const grace = 3 * time.Second
	s, base := startHTTPServer(t, "--stop-grace", grace.String())
	waitFor(t, defaultTimeout, "/readyz to say ready", func() bool {
		code, body := httpGet(t, base+"/readyz")
		return code == http.StatusOK && body == "ready\n"
	})
	held := s.dial(t)
	put(t, held, 0, 0, 60, "before", 1)

	sent := time.Now()
	s.signal(t, syscall.SIGTERM)
	client := http.Client{Timeout: defaultTimeout}
	var code int
	var body string
	for {
		resp, err := client.Get(base + "/readyz")
		if err != nil {
			t.Fatalf("/readyz unreachable %v after SIGTERM, before it said stopping: %v", time.Since(sent), err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		code, body = resp.StatusCode, string(b)
		if code != http.StatusOK {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if code != http.StatusServiceUnavailable || body != "stopping\n" {
		t.Fatalf("/readyz after SIGTERM: %d %q, want 503 \"stopping\\n\"", code, body)
	}
	// Still serving, old connections and new ones, until the grace is over.
	seen := time.Since(sent)
	fresh := s.dial(t)
	mustSend(t, fresh, "put 0 0 60 5\r\nafter\r\n")
	expect(t, fresh, "INSERTED 2\r\n")
	mustSend(t, held, "reserve-with-timeout 0\r\n")
	expect(t, held, "RESERVED 1 6\r\nbefore\r\n")

	select {
	case <-s.exited:
	case <-time.After(grace + defaultTimeout):
		t.Fatalf("still running %v after SIGTERM", time.Since(sent))
	}
	if passed := time.Since(sent); passed < grace {
		t.Errorf("exited %v after SIGTERM, before --stop-grace %v was over", passed, grace)
	}
	if s.waitErr != nil {
		t.Errorf("exit after SIGTERM: %v", s.waitErr)
	}
	t.Logf("/readyz said stopping %v after SIGTERM", seen)
}
