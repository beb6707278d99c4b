package e2e

// The dashboard's actions over HTTP against the real binary: each one's
// effect is checked on the wire, bad input gets a clear error and changes
// nothing, actions without the token, with a wrong one, from another
// origin or on a read-only dashboard are refused, and with -b what an
// action did survives a restart.

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const dashToken = "tok-3f9a"

// startDashboard starts a server whose dashboard allows actions.
func startDashboard(t *testing.T, extra ...string) (*server, string) {
	t.Helper()
	skipUnlessBeanpole(t, "the dashboard is beanpole's")
	f := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(f, []byte(dashToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return startHTTPServer(t, append([]string{"--http-token-file", f}, extra...)...)
}

// post sends an action's form and returns the status, the redirect and
// the error page's message.
func post(t *testing.T, base, path string, form url.Values, hdr ...string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest("POST", base+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, b := httpDo(t, req, false)
	msg := ""
	if _, rest, ok := strings.Cut(string(b), `id="error">`); ok {
		msg, _, _ = strings.Cut(rest, "<")
	}
	return resp.StatusCode, resp.Header.Get("Location"), msg
}

func withToken(kv ...string) url.Values {
	v := url.Values{"token": {dashToken}}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}

// fill puts jobs in tube q: 1 and 2 ready, 3 delayed, 4 and 5 buried
// (4 first), 6 reserved by c.
func fill(t *testing.T, c *conn) {
	t.Helper()
	mustSend(t, c, "use q\r\n")
	expect(t, c, "USING q\r\n")
	mustSend(t, c, "watch q\r\nignore default\r\n")
	expect(t, c, "WATCHING 2\r\nWATCHING 1\r\n")
	put(t, c, 10, 0, 60, "ready one", 1)
	put(t, c, 20, 0, 60, "ready two", 2)
	put(t, c, 0, 3600, 60, "delayed", 3)
	put(t, c, 5, 0, 60, "buried first", 4)
	put(t, c, 5, 0, 60, "buried second", 5)
	for _, id := range []string{"4", "5"} {
		mustSend(t, c, "reserve-job "+id+"\r\nbury "+id+" 5\r\n")
		readLine(t, c)
		readLine(t, c)
		expect(t, c, "BURIED\r\n")
	}
	put(t, c, 30, 0, 60, "reserved", 6)
	mustSend(t, c, "reserve-job 6\r\n")
	expect(t, c, "RESERVED 6 8\r\nreserved\r\n")
}

func counts(t *testing.T, c *conn, tube string) string {
	t.Helper()
	st := statsTube(t, c, tube)
	return st["current-jobs-ready"] + "/" + st["current-jobs-delayed"] + "/" + st["current-jobs-buried"] + "/" + st["current-jobs-reserved"]
}

func TestDashboardActionsChangeWhatTheWireSees(t *testing.T) {
	t.Parallel()
	s, base := startDashboard(t)
	c := s.dial(t)
	fill(t, c)
	if got := counts(t, c, "q"); got != "2/1/2/1" {
		t.Fatalf("before: %s", got)
	}

	// kick 1: the oldest buried job.
	code, loc, msg := post(t, base, "/tube/kick?name=q", withToken("n", "1"))
	if code != http.StatusSeeOther || loc != "/tube?name=q&msg=kicked+1" {
		t.Fatalf("kick: %d %q %q", code, loc, msg)
	}
	if st := statsJob(t, c, 4); st["state"] != "ready" {
		t.Fatalf("kick took job 4 to %s, want ready", st["state"])
	}
	// kick one job, delete one job.
	if code, _, msg := post(t, base, "/jobs/5/kick", withToken()); code != http.StatusSeeOther {
		t.Fatalf("kick job 5: %d %s", code, msg)
	}
	if code, _, msg := post(t, base, "/jobs/1/delete", withToken()); code != http.StatusSeeOther {
		t.Fatalf("delete job 1: %d %s", code, msg)
	}
	mustSend(t, c, "peek 1\r\n")
	expect(t, c, "NOT_FOUND\r\n")
	// A job reserved by a worker is the worker's.
	if code, _, msg := post(t, base, "/jobs/6/delete", withToken()); code != http.StatusConflict || !strings.Contains(msg, "reserved") {
		t.Fatalf("delete of a reserved job: %d %q", code, msg)
	}
	// move: a new job in the other tube, the old one gone.
	code, loc, msg = post(t, base, "/jobs/2/move", withToken("tube", "retry"))
	if code != http.StatusSeeOther || !strings.Contains(loc, "as+job+7") {
		t.Fatalf("move: %d %q %q", code, loc, msg)
	}
	mustSend(t, c, "peek 7\r\n")
	expect(t, c, "FOUND 7 9\r\nready two\r\n")
	if st := statsJob(t, c, 7); st["tube"] != `"retry"` || st["pri"] != "20" {
		t.Fatalf("moved job: %v", st)
	}
	// pause, then unpause.
	if code, _, msg := post(t, base, "/tube/pause?name=q", withToken("seconds", "600")); code != http.StatusSeeOther {
		t.Fatalf("pause: %d %s", code, msg)
	}
	if st := statsTube(t, c, "q"); st["pause"] != "600" {
		t.Fatalf("after pause: pause %s", st["pause"])
	}
	post(t, base, "/tube/pause?name=q", withToken("seconds", "0"))
	if st := statsTube(t, c, "q"); st["pause"] != "0" {
		t.Fatalf("after unpause: pause %s", st["pause"])
	}
	// flush by state: delayed only, then all; the reserved job stays.
	if code, _, msg := post(t, base, "/tube/flush?name=q", withToken("state", "delayed")); code != http.StatusSeeOther {
		t.Fatalf("flush delayed: %d %s", code, msg)
	}
	if got := counts(t, c, "q"); got != "2/0/0/1" {
		t.Fatalf("after flushing delayed: %s, want 2/0/0/1", got)
	}
	code, loc, _ = post(t, base, "/tube/flush?name=q", withToken("state", "all"))
	if code != http.StatusSeeOther || loc != "/tube?name=q&msg=flushed+2+all+jobs" {
		t.Fatalf("flush all: %d %q", code, loc)
	}
	if got := counts(t, c, "q"); got != "0/0/0/1" {
		t.Fatalf("after flushing all: %s, want 0/0/0/1", got)
	}
}

// Bad input: a clear error, the right status, and nothing changed.
func TestDashboardRefusesBadInputAndChangesNothing(t *testing.T) {
	t.Parallel()
	s, base := startDashboard(t)
	c := s.dial(t)
	fill(t, c)
	before := stats(t, c)
	for _, tc := range []struct {
		name, path string
		form       url.Values
		hdr        []string
		code       int
		msg        string
	}{
		{"no token", "/tube/kick?name=q", url.Values{"n": {"1"}}, nil, 401, "needs the token"},
		{"wrong token", "/tube/kick?name=q", url.Values{"n": {"1"}, "token": {"nope"}}, nil, 403, "wrong token"},
		{"wrong bearer", "/jobs/4/delete", url.Values{}, []string{"Authorization", "Bearer nope"}, 403, "wrong token"},
		{"another origin", "/jobs/4/delete", withToken(), []string{"Origin", "http://evil.example"}, 403, "not from this dashboard"},
		{"unknown tube", "/tube/kick?name=nope", withToken("n", "1"), nil, 404, "no such tube"},
		{"bad tube name", "/tube/kick?name=-bad", withToken("n", "1"), nil, 400, "not a tube name"},
		{"bad id", "/jobs/x1/delete", withToken(), nil, 400, "not a job id"},
		{"no job", "/jobs/999/delete", withToken(), nil, 404, "no job 999"},
		{"kick of a ready job", "/jobs/1/kick", withToken(), nil, 409, "not in a state"},
		{"kick zero", "/tube/kick?name=q", withToken("n", "0"), nil, 400, "n: want"},
		{"pause junk", "/tube/pause?name=q", withToken("seconds", "-1"), nil, 400, "seconds: want"},
		{"flush what", "/tube/flush?name=q", withToken("state", "reserved"), nil, 400, "want ready, delayed, buried or all"},
		{"move nowhere", "/jobs/4/move", withToken("tube", ""), nil, 400, "not a tube name"},
		{"move to itself", "/jobs/4/move", withToken("tube", "q"), nil, 409, "in that tube already"},
		{"no such action", "/tube/explode?name=q", withToken(), nil, 404, "no action"},
		{"oversized form", "/tube/kick?name=q", withToken("n", "1", "pad", strings.Repeat("x", 5000)), nil, 413, "over 4096 bytes"},
	} {
		code, _, msg := post(t, base, tc.path, tc.form, tc.hdr...)
		if code != tc.code || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: %d %q, want %d and %q", tc.name, code, msg, tc.code, tc.msg)
		}
	}
	after := stats(t, c)
	for _, k := range []string{"current-jobs-ready", "current-jobs-delayed", "current-jobs-buried", "current-jobs-reserved", "total-jobs", "current-tubes"} {
		if before[k] != after[k] {
			t.Errorf("%s went from %s to %s after refused actions", k, before[k], after[k])
		}
	}
	for _, p := range []string{"/tube?name=nope", "/tube?name=q&state=reserved", "/tube?name=q&page=0"} {
		if code, _ := httpGet(t, base+p); code != 404 && code != 400 {
			t.Errorf("GET %s: %d, want an error", p, code)
		}
	}
}

func TestDashboardWithoutATokenIsReadOnly(t *testing.T) {
	t.Parallel()
	skipUnlessBeanpole(t, "the dashboard is beanpole's")
	s, base := startHTTPServer(t)
	c := s.dial(t)
	fill(t, c)
	code, _, msg := post(t, base, "/tube/flush?name=q", withToken("state", "all"))
	if code != http.StatusForbidden || !strings.Contains(msg, "read-only") {
		t.Fatalf("an action on a read-only dashboard: %d %q", code, msg)
	}
	if got := counts(t, c, "q"); got != "2/1/2/1" {
		t.Fatalf("a refused flush changed the tube: %s", got)
	}
	code, body := httpGet(t, base+"/tube?name=q")
	if code != 200 || strings.Contains(body, "<form") || !strings.Contains(body, "Read-only") {
		t.Fatalf("the read-only tube page: %d, forms shown: %v", code, strings.Contains(body, "<form"))
	}
}

// With -b, what the dashboard did is in the binlog like any command.
func TestDashboardActionsSurviveARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, base := startDashboard(t, "-b", dir)
	c := s.dial(t)
	fill(t, c)
	for _, a := range []struct {
		path string
		form url.Values
		loc  string
	}{
		{"/tube/flush?name=q", withToken("state", "buried"), "/tube?name=q&msg=flushed+2+buried+jobs"},
		{"/jobs/2/move", withToken("tube", "retry"), "/tube?name=q&msg=moved+job+2+to+retry+as+job+7"},
		{"/jobs/1/delete", withToken(), "/tube?name=q&msg=deleted+job+1"},
	} {
		if code, loc, msg := post(t, base, a.path, a.form); code != http.StatusSeeOther || loc != a.loc {
			t.Fatalf("%s: %d %q %q, want 303 to %q", a.path, code, loc, msg, a.loc)
		}
	}
	s.stop() // kill -9: the actions were durable when they answered

	s2 := startServer(t, "-b", dir)
	c2 := s2.dial(t)
	// 6 was reserved when the server stopped: back to ready.
	if got := counts(t, c2, "q"); got != "1/1/0/0" {
		t.Fatalf("q after a restart: %s, want 1/1/0/0", got)
	}
	mustSend(t, c2, "peek 7\r\n")
	expect(t, c2, "FOUND 7 9\r\nready two\r\n")
	for _, id := range []string{"1", "2", "4", "5"} {
		mustSend(t, c2, "peek "+id+"\r\n")
		expect(t, c2, "NOT_FOUND\r\n")
	}
}

// A tube's page shows how many of its jobs ran out of TTR and the
// percentiles of its ready→reserve and reserve→delete latencies, the
// histograms /metrics exports.
func TestDashboardTubePageShowsTimeoutsAndLatencies(t *testing.T) {
	t.Parallel()
	s, base := startDashboard(t)
	c := s.dial(t)
	mustSend(t, c, "use slow\r\nwatch slow\r\nignore default\r\n")
	expect(t, c, "USING slow\r\nWATCHING 2\r\nWATCHING 1\r\n")
	put(t, c, 0, 0, 1, "x", 1)
	mustSend(t, c, "reserve\r\n")
	expect(t, c, "RESERVED 1 1\r\nx\r\n")
	waitFor(t, 10*time.Second, "job 1's TTR to run out", func() bool { return statsJob(t, c, 1)["timeouts"] == "1" })
	mustSend(t, c, "reserve\r\n")
	expect(t, c, "RESERVED 1 1\r\nx\r\n")
	mustSend(t, c, "delete 1\r\n")
	expect(t, c, "DELETED\r\n")
	code, page := httpGet(t, base+"/tube?name=slow")
	if code != http.StatusOK {
		t.Fatalf("tube page: %d", code)
	}
	for _, want := range []string{`<b id="timeouts">1</b>`, `id="lat-wait" title="2 reserved"`, `id="lat-run" title="1 deleted"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the tube page lacks %q", want)
		}
	}
	// The run took about the time between the second reserve and the
	// delete: under 5 s on any machine, so never "–" nor "> 1h".
	_, run, _ := strings.Cut(page, `id="lat-run"`)
	_, run, _ = strings.Cut(run, "<b>")
	if p50, _, ok := strings.Cut(run, "</b>"); !ok || p50 == "–" || strings.HasPrefix(p50, "&gt;") {
		t.Errorf("reserve → delete p50: %q", p50)
	}
	// A tube that has had no reserve shows no percentiles.
	mustSend(t, c, "use idle\r\n")
	expect(t, c, "USING idle\r\n")
	put(t, c, 0, 0, 60, "y", 2)
	if _, page := httpGet(t, base+"/tube?name=idle"); !strings.Contains(page, `<b id="timeouts">0</b>`) || !strings.Contains(page, `<b>–</b><small>p50</small>`) {
		t.Errorf("the idle tube's page shows figures it has not got")
	}
}

// A tube's page opens on a list with jobs: ready, else delayed, else
// buried.
func TestDashboardTubePageOpensOnAListWithJobs(t *testing.T) {
	t.Parallel()
	s, base := startDashboard(t)
	c := s.dial(t)
	mustSend(t, c, "use t\r\n")
	expect(t, c, "USING t\r\n")
	put(t, c, 0, 3600, 60, "later", 1)
	if _, page := httpGet(t, base+"/tube?name=t"); !strings.Contains(page, `class="on">delayed</a>`) || !strings.Contains(page, `<tr data-id="1">`) {
		t.Errorf("a tube with only a delayed job opens on another list")
	}
	mustSend(t, c, "watch t\r\nput 0 0 60 1\r\nx\r\nreserve\r\n")
	expect(t, c, "WATCHING 2\r\nINSERTED 2\r\nRESERVED 2 1\r\nx\r\n")
	mustSend(t, c, "bury 2 0\r\nkick-job 1\r\n")
	expect(t, c, "BURIED\r\nKICKED\r\n")
	if _, page := httpGet(t, base+"/tube?name=t"); !strings.Contains(page, `class="on">ready</a>`) {
		t.Errorf("a tube with a ready job opens on another list")
	}
	mustSend(t, c, "delete 1\r\n")
	expect(t, c, "DELETED\r\n")
	if _, page := httpGet(t, base+"/tube?name=t"); !strings.Contains(page, `class="on">buried</a>`) || !strings.Contains(page, `<tr data-id="2">`) {
		t.Errorf("a tube with only a buried job opens on another list")
	}
}

// The overview shows each tube's puts/s and deletes/s from its first
// paint: the page the server sends has them (against a reading a second
// before, when no page was open), and /api/overview has them against the
// last overview's reading, at least a second old.
func TestDashboardTubeRatesFromTheFirstPaint(t *testing.T) {
	t.Parallel()
	s, base := startDashboard(t)
	c := s.dial(t)
	mustSend(t, c, "use q\r\n")
	expect(t, c, "USING q\r\n")
	for i := range 3 {
		put(t, c, 0, 0, 60, "x", uint64(i+1))
	}
	code, page := httpGet(t, base+"/")
	row := regexp.MustCompile(`<tr data-tube="q">(.*)</tr>`).FindStringSubmatch(page)
	if code != http.StatusOK || row == nil {
		t.Fatalf("GET /: %d, no row for q in\n%s", code, page)
	}
	cells := regexp.MustCompile(`<td>([^<]*)</td>`).FindAllStringSubmatch(row[1], -1)
	if n := len(cells); n < 2 || cells[n-2][1] != "0.0" || cells[n-1][1] != "0.0" {
		t.Fatalf("the first paint's puts/s and deletes/s of q: %q, want 0.0 and 0.0 (nothing since the page was asked for)", cells)
	}

	for i := range 20 {
		put(t, c, 0, 0, 60, "x", uint64(4+i))
	}
	for id := 1; id <= 4; id++ {
		mustSend(t, c, fmt.Sprintf("delete %d\r\n", id))
		expect(t, c, "DELETED\r\n")
	}
	done := time.Now()
	code, body := httpGet(t, base+"/api/overview")
	var o struct {
		Time       int64 `json:"time_ms"`
		RatesSince int64 `json:"rates_since_ms"`
		Tubes      []struct {
			Name      string
			TotalJobs uint64   `json:"total_jobs"`
			Puts      *float64 `json:"puts_per_sec"`
			Deletes   *float64 `json:"deletes_per_sec"`
		}
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &o) != nil {
		t.Fatalf("/api/overview: %d %s", code, body)
	}
	// The page's reading is the baseline, unless over 30 s passed and the
	// answer read the tubes twice itself (after the puts).
	wantPuts, wantDels := 20.0, 4.0
	if o.RatesSince >= done.UnixMilli() {
		wantPuts, wantDels = 0, 0
	}
	secs := float64(o.Time-o.RatesSince) / 1000
	for _, tb := range o.Tubes {
		if tb.Name != "q" {
			continue
		}
		if tb.Puts == nil || tb.Deletes == nil || secs < 1 {
			t.Fatalf("q: puts/s %v deletes/s %v over %v s", tb.Puts, tb.Deletes, secs)
		}
		// time_ms is cut to the millisecond: within 1 %.
		if math.Abs(*tb.Puts*secs-wantPuts) > wantPuts/100 || math.Abs(*tb.Deletes*secs-wantDels) > wantDels/100 {
			t.Fatalf("q: %v puts/s and %v deletes/s over %v s, want %v puts and %v deletes", *tb.Puts, *tb.Deletes, secs, wantPuts, wantDels)
		}
		return
	}
	t.Fatalf("no tube q in %s", body)
}
