package e2e

// The dashboard in a real browser: Debian's chromium, driven by chromedp,
// loads the overview against a server holding jobs in every state, checks
// that the numbers it shows (after its own script has refreshed them) are
// the numbers `stats` and `stats-tube` give, opens a tube's page, performs
// each action through the page's own buttons (the token typed once, kept by
// the page, confirmations accepted) and checks each effect on the wire.
// Another test puts a minute of load through a server and checks that a
// page opened afterwards draws that minute at once, from the server's
// history. BEANPOLE_SCREENSHOTS=DIR saves the pages as PNGs (docs/ holds
// them).

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// chromium finds the browser, or skips: CI installs Debian's chromium.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on a CI machine: .ci/run installs it")
	}
	t.Skip("no chromium here (apt-get install chromium)")
	return ""
}

// browser starts a headless chromium for the test. Every dialog (the
// token prompt, the confirmations) is answered with the token / yes.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)), chromedp.NoSandbox, chromedp.WindowSize(1400, 900),
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog,
				page.HandleJavaScriptDialogParams{Accept: true, PromptText: dashToken})
		}
	}()
	tctx, cancel3 := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancel3)
	return tctx
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("BEANPOLE_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// eval evaluates a JavaScript expression in the page into a T.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

func TestDashboardInABrowser(t *testing.T) {
	t.Parallel()
	s, base := startDashboard(t, "--http-public-bodies")
	ctx := browser(t)
	c := s.dial(t)
	fill(t, c)
	// Some traffic in another tube, for the charts and rates.
	mustSend(t, c, "use mail\r\n")
	expect(t, c, "USING mail\r\n")
	for i := range 40 {
		put(t, c, 100, 0, 60, fmt.Sprintf("mail %d", i), uint64(7+i))
	}

	// The overview, once its script has refreshed it twice (rates need two
	// samples).
	err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(`#tubes tbody tr[data-tube="q"]`),
		chromedp.Poll[chromedp.Void](`document.getElementById("put-rate").textContent !== "–"`, chromedp.WithPollingTimeout(15*time.Second)),
	)
	if err != nil {
		t.Fatalf("overview: %v", err)
	}
	cards := eval[map[string]string](t, ctx, `Object.fromEntries([...document.querySelectorAll("[data-stat]")].map(e => [e.dataset.stat, e.textContent]))`)
	rows := eval[[][]string](t, ctx, `[...document.querySelectorAll("#tubes tbody tr")].map(r => [...r.cells].map(c => c.textContent))`)
	st := stats(t, c)
	for _, k := range []string{"current-jobs-ready", "current-jobs-reserved", "current-jobs-delayed", "current-jobs-buried", "current-connections", "total-jobs"} {
		if cards[k] != st[k] {
			t.Errorf("the overview shows %s = %q, stats says %q", k, cards[k], st[k])
		}
	}
	shown := map[string][]string{}
	for _, r := range rows {
		shown[r[0]] = r
	}
	for _, tube := range []string{"q", "mail", "default"} {
		ts := statsTube(t, c, tube)
		want := []string{tube, ts["current-jobs-ready"], ts["current-jobs-delayed"], ts["current-jobs-reserved"], ts["current-jobs-buried"], ts["current-waiting"]}
		if got := shown[tube]; len(got) < len(want) || strings.Join(got[:len(want)], " ") != strings.Join(want, " ") {
			t.Errorf("the overview's row for %s: %q, want %q", tube, got, want)
		}
	}
	if rows[0][0] != "mail" {
		t.Errorf("the tube with most jobs is not first: %q", rows[0])
	}

	// The tube page: peeks and the buried list.
	err = chromedp.Do(ctx,
		chromedp.Click(`#tubes a[href="/tube?name=q"]`),
		chromedp.WaitVisible(`#tube-name`),
	)
	if err != nil {
		t.Fatalf("tube page: %v", err)
	}
	peeks := eval[map[string]string](t, ctx, `Object.fromEntries([...document.querySelectorAll(".peek")].map(p => [p.id, p.querySelector("pre") ? p.querySelector("pre").textContent : "none"]))`)
	if peeks["peek-ready"] != "ready one" || peeks["peek-delayed"] != "delayed" || peeks["peek-buried"] != "buried first" {
		t.Fatalf("peeks: %v", peeks)
	}
	screenshot(t, ctx, "dashboard-tube.png")

	// Each action through the page's forms; the first asks for the token.
	act := func(what string, actions ...chromedp.Action[chromedp.Void]) string {
		t.Helper()
		// The page an action leaves is a new one: the mark set before the
		// last step (the click) is gone from it.
		last := len(actions) - 1
		steps := append(append([]chromedp.Action[chromedp.Void]{}, actions[:last]...),
			chromedp.Evaluate[chromedp.Void](`window.beforeAction = true`), actions[last])
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			// Errors are the navigation under way: try again.
			done, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!window.beforeAction && document.readyState === "complete"`))
			if err == nil && done {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no new page after 15 s (%v)", what, err)
			}
		}
		msg, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.getElementById("msg") || document.getElementById("error") || {}).textContent || ""`))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return msg
	}
	if msg := act("kick", chromedp.SetValue(`#form-kick input[name=n]`, "1"), chromedp.Click(`#form-kick button`)); msg != "kicked 1" {
		t.Errorf("kick: %q", msg)
	}
	if st := statsJob(t, c, 4); st["state"] != "ready" {
		t.Errorf("kick in the browser: job 4 is %s", st["state"])
	}
	if msg := act("pause", chromedp.SetValue(`#form-pause input[name=seconds]`, "120"), chromedp.Click(`#form-pause button`)); msg != "paused for 120 s" {
		t.Errorf("pause: %q", msg)
	}
	if st := statsTube(t, c, "q"); st["pause"] != "120" {
		t.Errorf("pause in the browser: pause %s", st["pause"])
	}
	if msg := act("unpause", chromedp.Click(`#form-unpause button`)); msg != "unpaused" {
		t.Errorf("unpause: %q", msg)
	}
	// The buried list holds job 5; kick it from its row.
	if msg := act("kick job", chromedp.Navigate(base+"/tube?name=q&state=buried"), chromedp.WaitVisible(`#jobs`),
		chromedp.Click(`#jobs tr[data-id="5"] form[action="/jobs/5/kick"] button`)); msg != "kicked job 5" {
		t.Errorf("kick job: %q", msg)
	}
	// Move job 2 from the ready list, delete job 1.
	if msg := act("move", chromedp.Navigate(base+"/tube?name=q&state=ready"), chromedp.WaitVisible(`#jobs`),
		chromedp.SetValue(`#jobs tr[data-id="2"] input[name=tube]`, "retry"),
		chromedp.Click(`#jobs tr[data-id="2"] form[action="/jobs/2/move"] button`)); !strings.HasPrefix(msg, "moved job 2 to retry as job ") {
		t.Errorf("move: %q", msg)
	}
	if msg := act("delete", chromedp.Navigate(base+"/tube?name=q&state=ready"), chromedp.WaitVisible(`#jobs`),
		chromedp.Click(`#jobs tr[data-id="1"] form[action="/jobs/1/delete"] button`)); msg != "deleted job 1" {
		t.Errorf("delete: %q", msg)
	}
	mustSend(t, c, "peek 1\r\npeek 2\r\n")
	expect(t, c, "NOT_FOUND\r\nNOT_FOUND\r\n")
	if st := statsTube(t, c, "retry"); st["current-jobs-ready"] != "1" {
		t.Errorf("retry after the move: %v", st)
	}
	// Flush everything but the reserved job: 3 delayed, 4 and 5 ready.
	if msg := act("flush", chromedp.SetValue(`#form-flush select`, "all"), chromedp.Click(`#form-flush button`)); msg != "flushed 3 all jobs" {
		t.Errorf("flush: %q", msg)
	}
	if got := counts(t, c, "q"); got != "0/0/0/1" {
		t.Errorf("q after the browser's flush: %s, want 0/0/0/1", got)
	}
}

// historyLen is how many samples /api/history holds.
func historyLen(t *testing.T, base string) int {
	t.Helper()
	code, body := httpGet(t, base+"/api/history")
	var h struct {
		Time []int64 `json:"time_ms"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &h) != nil {
		t.Fatalf("/api/history: %d %s", code, body)
	}
	return len(h.Time)
}

// A page opened after 20 s of load draws those seconds at its first
// paint: the charts come from the server's history (one sample per 5 s),
// not from the page's own refreshes (one per 2 s, from when it opened).
// And at 1,400 pixels every card of the overview sits on its first row.
func TestDashboardDrawsTheServersHistoryAtFirstPaint(t *testing.T) {
	t.Parallel()
	s, base := startDashboard(t)
	chromium(t)
	c := s.dial(t)
	mustSend(t, c, "use work\r\nwatch work\r\nignore default\r\n")
	expect(t, c, "USING work\r\nWATCHING 2\r\nWATCHING 1\r\n")
	// Batches of load until the history holds 5 samples (20 s at least):
	// each puts 30 jobs and a delayed one, reserves 20, deletes 18 and
	// buries 2, so ready, delayed and buried grow and the rates are not 0.
	// The pause between batches paces the load; it synchronises nothing.
	const want = 5
	id := uint64(0)
	start := time.Now()
	for n := 0; n < want; n = historyLen(t, base) {
		if time.Since(start) > 3*time.Minute {
			t.Fatalf("the history holds %d samples after %v, want %d", n, time.Since(start), want)
		}
		for range 30 {
			id++
			put(t, c, 100, 0, 60, "job", id)
		}
		id++
		put(t, c, 100, 3600, 60, "later", id)
		for i := range 20 {
			mustSend(t, c, "reserve-with-timeout 0\r\n")
			var rid, size int
			if _, err := fmt.Sscanf(readLine(t, c), "RESERVED %d %d", &rid, &size); err != nil {
				t.Fatalf("reserve: %v", err)
			}
			expectLine(t, c, "job")
			if i < 2 {
				mustSend(t, c, fmt.Sprintf("bury %d 0\r\n", rid))
				expect(t, c, "BURIED\r\n")
				continue
			}
			mustSend(t, c, fmt.Sprintf("delete %d\r\n", rid))
			expect(t, c, "DELETED\r\n")
		}
		time.Sleep(200 * time.Millisecond)
	}
	had := historyLen(t, base)

	ctx := browser(t)
	err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.Poll[chromedp.Void](`document.getElementById("chart-ready").dataset.samples !== undefined`,
			chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(10*time.Millisecond)),
	)
	if err != nil {
		t.Fatalf("overview: %v", err)
	}
	drawn := eval[map[string]int](t, ctx, `Object.fromEntries([...document.querySelectorAll("canvas")].map(c => [c.id, +c.dataset.samples]))`)
	// Each level chart has every sample of the history and the page's
	// first refresh; the rate chart one point per pair of them.
	for _, id := range []string{"chart-ready", "chart-depth", "chart-conns"} {
		if drawn[id] < had+1 {
			t.Errorf("%s draws %d points at first paint, want the %d of the history and 1 of the page", id, drawn[id], had)
		}
	}
	if drawn["chart-rate"] < had {
		t.Errorf("chart-rate draws %d points at first paint, want %d", drawn["chart-rate"], had)
	}
	// The time axis spans the samples the server holds (since it started,
	// less than an hour ago), not an hour with them squeezed to the right.
	spans := eval[map[string]int](t, ctx, `Object.fromEntries([...document.querySelectorAll("canvas")].map(c => [c.id, +c.dataset.span]))`)
	uptime, _ := strconv.Atoi(stats(t, c)["uptime"])
	for id, span := range spans {
		if span < 5*(had-1) || span > uptime+1 {
			t.Errorf("%s spans %d s; the history covers at least %d s, the server is up %d s", id, span, 5*(had-1), uptime)
		}
	}
	// The tube's puts/s and deletes/s are figures from the first paint.
	work := eval[[]string](t, ctx, `[...document.querySelector('#tubes tbody tr[data-tube="work"]').cells].map(c => c.textContent)`)
	if n := len(work); n < 2 || work[n-2] == "–" || work[n-1] == "–" {
		t.Errorf("the first paint's row of tube work: %q, want puts/s and deletes/s", work)
	}
	rows := eval[[]string](t, ctx, `[...new Set([...document.querySelectorAll("#server .card")].map(c => c.querySelector("h3").textContent + "@" + c.offsetTop))]`)
	for _, r := range rows {
		if !strings.HasSuffix(r, "@"+strings.Split(rows[0], "@")[1]) {
			t.Errorf("at 1,400 px the cards are on more than one row: %q", rows)
			break
		}
	}
	screenshot(t, ctx, "dashboard.png")
}
