package e2e

// The HTTP side on a network: a request under a foreign Host name (DNS
// rebinding) is refused with 421, job bodies need the token unless
// --http-public-bodies, browsing stops at a bounded depth, wrong tokens
// are limited per client address and logged at most once a second, and
// every legal tube name has its page.

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// getAs fetches base+path with the Host header host (none given: the
// URL's) and the header pairs hdr; it returns the status, the body and,
// for an error page, its message.
func getAs(t *testing.T, base, host, path string, hdr ...string) (code int, body, msg string) {
	t.Helper()
	req, err := http.NewRequest("GET", base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, b := httpDo(t, req, false)
	if _, rest, ok := strings.Cut(string(b), `id="error">`); ok {
		msg, _, _ = strings.Cut(rest, "<")
		msg = html.UnescapeString(msg)
	}
	return resp.StatusCode, string(b), msg
}

func TestHTTPRefusesForeignHostNames(t *testing.T) {
	t.Parallel()
	s, base := startDashboard(t, "--http-host", "beans.example")
	c := s.dial(t)
	fill(t, c)
	port := base[strings.LastIndex(base, ":")+1:]

	for _, host := range []string{"evil.example", "evil.example:" + port, "beans.example.evil.example", "10.0.0.1:" + port} {
		want := fmt.Sprintf("misdirected request: the Host %q is not a name of this server; start beanpole with --http-host NAME to serve it under another name\n", host)
		for _, path := range []string{"/metrics", "/", "/api/overview", "/tube?name=q", "/api/jobs/1", "/static/app.js"} {
			if code, body, _ := getAs(t, base, host, path, "Authorization", "Bearer "+dashToken); code != http.StatusMisdirectedRequest || body != want {
				t.Errorf("GET %s as %s: %d %q, want 421 %q", path, host, code, body, want)
			}
		}
		req, err := http.NewRequest("POST", base+"/tube/flush?name=q", strings.NewReader(withToken("state", "all").Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Host = host
		if resp, b := httpDo(t, req, false); resp.StatusCode != http.StatusMisdirectedRequest || string(b) != want {
			t.Errorf("a flush as %s: %d %q, want 421", host, resp.StatusCode, b)
		}
	}
	if got := counts(t, c, "q"); got != "2/1/2/1" {
		t.Fatalf("a flush under a foreign name changed the tube: %s", got)
	}
	// Health and readiness answer any name: load balancers probe them.
	for path, want := range map[string]string{"/healthz": "ok\n", "/readyz": "ready\n"} {
		if code, body, _ := getAs(t, base, "evil.example", path); code != http.StatusOK || body != want {
			t.Errorf("GET %s as evil.example: %d %q, want 200 %q", path, code, body, want)
		}
	}
	for _, host := range []string{"localhost", "localhost:" + port, "LocalHost.", "127.0.0.1", "127.0.0.1:" + port,
		"127.0.0.2:" + port, "[::1]", "[::1]:" + port, "beans.example", "Beans.Example:8443"} {
		if code, body, _ := getAs(t, base, host, "/metrics"); code != http.StatusOK || !strings.Contains(body, "beanstalkd_current_jobs_ready") {
			t.Errorf("GET /metrics as %s: %d, want 200 and the metrics", host, code)
		}
	}
}

func TestDashboardShowsBodiesOnlyWithTheToken(t *testing.T) {
	t.Parallel()
	s, base := startDashboard(t)
	c := s.dial(t)
	fill(t, c)
	code, page, _ := getAs(t, base, "", "/tube?name=q&state=ready")
	if code != http.StatusOK {
		t.Fatalf("the tube page: %d", code)
	}
	for _, want := range []string{
		`<pre class="body sealed" data-job="1">body needs the token</pre>`,
		`<code class="body sealed" data-job="2">body needs the token</code>`,
		`Job bodies need the token. <button type="button" id="show-bodies">show bodies</button>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the tube page lacks %s", want)
		}
	}
	for _, body := range []string{"ready one", "ready two", "buried first"} {
		if strings.Contains(page, body) {
			t.Errorf("the tube page shows the body %q without the token", body)
		}
	}
	const one = `{"id":1,"size":9,"text":"ready one","hex":false,"truncated":false}` + "\n"
	for _, tc := range []struct {
		hdr       []string
		code      int
		body, msg string
	}{
		{nil, http.StatusUnauthorized, "", "job bodies need the token"},
		{[]string{"Authorization", "Bearer nope"}, http.StatusForbidden, "", "wrong token"},
		{[]string{"Authorization", "Bearer " + dashToken}, http.StatusOK, one, ""},
	} {
		code, body, msg := getAs(t, base, "", "/api/jobs/1", tc.hdr...)
		if code != tc.code || msg != tc.msg || tc.body != "" && body != tc.body {
			t.Errorf("GET /api/jobs/1 with %q: %d %q %q, want %d %q %q", tc.hdr, code, msg, body, tc.code, tc.msg, tc.body)
		}
	}
	if code, _, msg := getAs(t, base, "", "/api/jobs/999", "Authorization", "Bearer "+dashToken); code != http.StatusNotFound || msg != "no job 999" {
		t.Errorf("GET /api/jobs/999: %d %q", code, msg)
	}

	// --http-public-bodies: on the page and from the API, no token needed.
	s2, base2 := startDashboard(t, "--http-public-bodies")
	fill(t, s2.dial(t))
	_, page, _ = getAs(t, base2, "", "/tube?name=q&state=ready")
	for _, want := range []string{`<pre class="body">ready one</pre>`, `<code class="body">ready two</code>`} {
		if !strings.Contains(page, want) {
			t.Errorf("with --http-public-bodies the page lacks %s", want)
		}
	}
	if strings.Contains(page, "sealed") {
		t.Errorf("with --http-public-bodies a body is still sealed")
	}
	if code, body, _ := getAs(t, base2, "", "/api/jobs/1"); code != http.StatusOK || body != one {
		t.Errorf("GET /api/jobs/1 with --http-public-bodies: %d %q", code, body)
	}

	// No token at all: nobody sees bodies, and the page says how to.
	s3, base3 := startHTTPServer(t)
	fill(t, s3.dial(t))
	_, page, _ = getAs(t, base3, "", "/tube?name=q&state=ready")
	if !strings.Contains(page, "Job bodies are not shown: start beanpole with <code>--http-token-file FILE</code> to show them with the token, or with <code>--http-public-bodies</code>.") || strings.Contains(page, "ready one") {
		t.Errorf("the read-only page does not say why bodies are hidden, or shows one")
	}
	const hidden = "job bodies are not shown: start beanpole with --http-token-file FILE to show them with the token, or with --http-public-bodies"
	if code, _, msg := getAs(t, base3, "", "/api/jobs/1", "Authorization", "Bearer "+dashToken); code != http.StatusForbidden || msg != hidden {
		t.Errorf("GET /api/jobs/1 on a read-only dashboard: %d %q", code, msg)
	}
}

func TestDashboardBrowsingStopsAtAThousandJobs(t *testing.T) {
	t.Parallel()
	s, base := startDashboard(t)
	c := s.dial(t)
	var b strings.Builder
	b.WriteString("use deep\r\n")
	const n = 1010
	for range n {
		b.WriteString("put 0 0 60 1\r\nx\r\n")
	}
	mustSend(t, c, b.String())
	expect(t, c, "USING deep\r\n")
	for i := 1; i <= n; i++ {
		expectLine(t, c, fmt.Sprintf("INSERTED %d", i))
	}
	code, page, _ := getAs(t, base, "", "/tube?name=deep&state=ready&page=40")
	if code != http.StatusOK {
		t.Fatalf("page 40: %d", code)
	}
	ids := regexp.MustCompile(`<tr data-id="(\d+)">`).FindAllStringSubmatch(page, -1)
	if len(ids) != 25 || ids[0][1] != "976" || ids[24][1] != "1000" {
		t.Errorf("page 40 lists %v, want jobs 976 to 1000", ids)
	}
	if !strings.Contains(page, `id="browse-total">1010 ready · page 40 of 40`) || strings.Contains(page, `id="next-page"`) {
		t.Errorf("page 40 is not shown as the last one")
	}
	for _, p := range []string{"41", "4000"} {
		want := fmt.Sprintf("page %q: want 1 to 40 (a listing reaches the first 1000 jobs in serving order)", p)
		if code, _, msg := getAs(t, base, "", "/tube?name=deep&state=ready&page="+p); code != http.StatusBadRequest || msg != want {
			t.Errorf("page %s: %d %q, want 400 %q", p, code, msg, want)
		}
	}
}

// postFrom sends an action from the local address src.
func postFrom(t *testing.T, src, base, path string, form url.Values) (code int, retryAfter, msg string) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c := http.Client{Timeout: defaultTimeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
	}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer c.CloseIdleConnections()
	resp, err := c.PostForm(base+path, form)
	if err != nil {
		t.Fatalf("POST %s from %s: %v", path, src, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s from %s: %v", path, src, err)
	}
	if _, rest, ok := strings.Cut(string(b), `id="error">`); ok {
		msg, _, _ = strings.Cut(rest, "<")
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), msg
}

// refusalLines are the server's log lines about refused tokens, as JSON.
func refusalLines(t *testing.T, s *server) (lines int, events int) {
	t.Helper()
	for _, l := range strings.Split(s.out.String(), "\n") {
		if !strings.Contains(l, `"dashboard: a`) || !strings.Contains(l, "token") {
			continue
		}
		var e struct {
			Suppressed int `json:"suppressed"`
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("a log line that is not JSON: %q", l)
		}
		lines++
		events += 1 + e.Suppressed
	}
	return lines, events
}

func TestDashboardLimitsWrongTokensPerAddress(t *testing.T) {
	t.Parallel()
	s, base := startDashboard(t, "--log-json")
	c := s.dial(t)
	fill(t, c)
	wrong := withToken()
	wrong.Set("token", "guess")
	start := time.Now()
	refused, forbidden := 0, 0
	var retry, msg string
	for {
		var code int
		code, retry, msg = postFrom(t, "127.0.0.1", base, "/jobs/4/delete", wrong)
		refused++
		if code == http.StatusTooManyRequests {
			break
		}
		if code != http.StatusForbidden || msg != "wrong token" {
			t.Fatalf("wrong token %d: %d %q", refused, code, msg)
		}
		if forbidden++; forbidden > 100 {
			t.Fatal("100 wrong tokens in a row were all answered 403: no limit")
		}
	}
	limited := time.Now()
	// 10 at once, then one every 6 s.
	if most := 10 + int(limited.Sub(start)/(6*time.Second)); forbidden < 10 || forbidden > most {
		t.Errorf("%d wrong tokens were compared before the first 429 in %v, want 10 to %d", forbidden, limited.Sub(start), most)
	}
	wait, err := strconv.Atoi(retry)
	if err != nil || wait < 1 || wait > 6 {
		t.Fatalf("Retry-After %q, want 1 to 6 seconds", retry)
	}
	if want := fmt.Sprintf("too many wrong tokens from this address: try again in %d s", wait); msg != want {
		t.Errorf("the 429's message: %q, want %q", msg, want)
	}
	// While it lasts, the right token from that address is refused too.
	code, _, _ := postFrom(t, "127.0.0.1", base, "/jobs/4/delete", withToken())
	refused++
	if code != http.StatusTooManyRequests && time.Since(limited) < time.Duration(wait-1)*time.Second {
		t.Errorf("the right token during the wait: %d, want 429", code)
	}
	if code == http.StatusTooManyRequests {
		if st := statsJob(t, c, 4); st["state"] != "buried" {
			t.Errorf("job 4 is %s after refused deletes", st["state"])
		}
	}
	// Another address has an allowance of its own.
	if code, _, msg := postFrom(t, "127.0.0.2", base, "/jobs/5/delete", withToken()); code != http.StatusSeeOther {
		t.Fatalf("the right token from 127.0.0.2: %d %q, want 303", code, msg)
	}
	mustSend(t, c, "peek 5\r\n")
	expect(t, c, "NOT_FOUND\r\n")

	// The log: at most a line a second, and the lines account for every
	// refusal. A refusal logs a line once a second has passed since the
	// last one, which then counts those it left out.
	for i := 0; ; i++ {
		if i == 30 {
			t.Fatalf("the log lines never accounted for the %d refusals", refused)
		}
		if code, _, _ := postFrom(t, "127.0.0.2", base, "/jobs/5/delete", wrong); code != http.StatusForbidden {
			t.Fatalf("a wrong token from 127.0.0.2: %d", code)
		}
		refused++
		deadline := time.Now().Add(2 * time.Second)
		_, events := refusalLines(t, s)
		for events != refused && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			_, events = refusalLines(t, s)
		}
		if events == refused {
			break
		}
	}
	lines, _ := refusalLines(t, s)
	if most := int(time.Since(start)/time.Second) + 1; lines < 2 || lines > most {
		t.Errorf("%d log lines for %d refusals in %v, want 2 to %d", lines, refused, time.Since(start), most)
	}
}

func TestDashboardReachesEveryLegalTubeName(t *testing.T) {
	t.Parallel()
	s, base := startDashboard(t)
	c := s.dial(t)
	names := []string{".", "..", "...", "a+b", "x;y", "$c", "(p)", "a/b", "_", "A-Z.9"}
	for i, name := range names {
		mustSend(t, c, "use "+name+"\r\n")
		expect(t, c, "USING "+name+"\r\n")
		put(t, c, 0, 0, 60, "j", uint64(i+1))
	}
	// Every tube the overview links to opens that tube's page.
	_, overview, _ := getAs(t, base, "", "/")
	links := map[string]string{}
	for _, m := range regexp.MustCompile(`<tr data-tube="([^"]*)"><td><a href="([^"]*)">`).FindAllStringSubmatch(overview, -1) {
		links[html.UnescapeString(m[1])] = html.UnescapeString(m[2])
	}
	shown := func(name string) string { // as the template writes text
		return strings.NewReplacer("+", "&#43;").Replace(name)
	}
	for _, name := range names {
		link, ok := links[name]
		if !ok {
			t.Errorf("the overview does not link tube %q", name)
			continue
		}
		code, page, msg := getAs(t, base, "", link)
		if want := `<span id="tube-name">` + shown(name) + `</span>`; code != http.StatusOK || !strings.Contains(page, want) {
			t.Errorf("tube %q: %s answers %d %q, want its page", name, link, code, msg)
		}
		path := "/tube/pause?name=" + url.QueryEscape(name)
		code, loc, msg := post(t, base, path, withToken("seconds", "10"))
		if want := "/tube?name=" + url.QueryEscape(name) + "&msg=paused+for+10+s"; code != http.StatusSeeOther || loc != want {
			t.Errorf("POST %s: %d %q %q, want 303 to %q", path, code, loc, msg, want)
		}
		if st := statsTube(t, c, name); st["pause"] != "10" {
			t.Errorf("tube %q after its pause: pause %s", name, st["pause"])
		}
	}
}
