package e2e

// The client examples of docs/tls.md ("Clients"), run against a server
// with --tls-listen: go-beanstalk over tls.Dial, and greenstalk (Python)
// over an ssl.SSLContext socket.

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// docClientBlock returns the fenced block of lang in the "Clients" section
// of docs/tls.md.
func docClientBlock(t *testing.T, lang string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "tls.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Clients\n")
	if !ok {
		t.Fatal("docs/tls.md has no \"## Clients\" section")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	_, code, ok := strings.Cut(sec, "\n```"+lang+"\n")
	if !ok {
		t.Fatalf("docs/tls.md's Clients section has no %s block", lang)
	}
	code, _, ok = strings.Cut(code, "\n```\n")
	if !ok {
		t.Fatalf("docs/tls.md's %s block is not closed", lang)
	}
	return code + "\n"
}

// go-beanstalk over TLS: the Go block of docs/tls.md (tls.Dial with the
// server's CA, then beanstalk.NewConn), built as a program of its own with
// go-beanstalk v0.2.0 and run with the server's address and CA put in for
// queue.example.com:11301 and ca.pem. It prints the body it reserved and
// deletes the job.
func TestTLSGoBeanstalkClientFromTheDocs(t *testing.T) {
	t.Parallel()
	code := docClientBlock(t, "go")
	ts := startTLSServer(t)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	writeFile(t, caFile, ts.ca.pem)
	code = substitute(t, "Go", code, [][2]string{
		{`"queue.example.com:11301"`, `"` + ts.tlsAddr + `"`},
		{`os.ReadFile("ca.pem")`, `os.ReadFile("` + caFile + `")`},
	})
	// The e2e module's go.sum has go-beanstalk's sums, and the module
	// cache has it: the e2e tests import it.
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "go.mod"), []byte("module tlsexample\n\ngo 1.22\n\nrequire github.com/beanstalkd/go-beanstalk v0.2.0\n"))
	writeFile(t, filepath.Join(dir, "go.sum"), sum)
	writeFile(t, filepath.Join(dir, "main.go"), []byte(code))
	build := exec.Command("go", "build", "-o", "example", ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the Go example of docs/tls.md: %v\n%s", err, out)
	}
	runExample(t, "the go-beanstalk example", exec.Command(filepath.Join(dir, "example")))
	checkExampleDone(t, ts)
}

// substitute makes the replacements in an example of docs/tls.md, each of
// which must be there.
func substitute(t *testing.T, lang, code string, rs [][2]string) string {
	t.Helper()
	for _, r := range rs {
		if !strings.Contains(code, r[0]) {
			t.Fatalf("docs/tls.md's %s example has no %s to replace; keep this test in step with it", lang, r[0])
		}
		code = strings.ReplaceAll(code, r[0], r[1])
	}
	return code
}

// runExample runs an example, which must print "hello" and exit 0.
func runExample(t *testing.T, what string, cmd *exec.Cmd) {
	t.Helper()
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(6 * defaultTimeout):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%s did not finish; stderr: %s", what, stderr.String())
	}
	if err != nil {
		t.Fatalf("%s failed: %v; stderr: %s", what, err, stderr.String())
	}
	if out := stdout.String(); out != "hello\n" {
		t.Fatalf("%s printed%s", what, diffMsg("hello\n", out))
	}
}

// checkExampleDone checks over plaintext that the example's one job was
// put, reserved and deleted.
func checkExampleDone(t *testing.T, ts *tlsServer) {
	t.Helper()
	st := stats(t, ts.dial(t))
	for k, want := range map[string]string{"total-jobs": "1", "cmd-delete": "1", "current-jobs-ready": "0", "current-jobs-reserved": "0"} {
		if st[k] != want {
			t.Errorf("after the example, %s = %s, want %s", k, st[k], want)
		}
	}
}

// greenstalk over TLS: the Python block of docs/tls.md, run as it is with
// the server's address and CA put in for queue.example.com:11301 and
// ca.pem. It prints the body it reserved and deletes the job.
func TestTLSGreenstalkClientFromTheDocs(t *testing.T) {
	t.Parallel()
	skipUnlessBeanpole(t, "TLS is beanpole's")
	code := docClientBlock(t, "python")
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the greenstalk example of docs/tls.md is not run")
	}
	if out, err := exec.Command(python, "-c", "import greenstalk").CombinedOutput(); err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		t.Skipf("python3 cannot import greenstalk (pip install greenstalk): the example of docs/tls.md is not run: %s", lines[len(lines)-1])
	}
	t.Parallel()
	ts := startTLSServer(t)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	writeFile(t, caFile, ts.ca.pem)
	host, port, err := net.SplitHostPort(ts.tlsAddr)
	if err != nil {
		t.Fatal(err)
	}
	code = substitute(t, "Python", code, [][2]string{
		{`("queue.example.com", 11301)`, `("` + host + `", ` + port + `)`},
		{`server_hostname="queue.example.com"`, `server_hostname="` + host + `"`},
		{`cafile="ca.pem"`, `cafile="` + caFile + `"`},
	})
	script := filepath.Join(dir, "example.py")
	writeFile(t, script, []byte(code))
	runExample(t, "the greenstalk example", exec.Command(python, script))
	checkExampleDone(t, ts)
}
