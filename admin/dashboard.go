package admin

import (
	"cmp"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/beanpole/beanpole/codec"
	"github.com/beanpole/beanpole/engine"
	"github.com/rs/zerolog"
)

// The dashboard: an overview at / that draws the last hour from
// /api/history (history.go) and refreshes itself from /api/overview, a page per tube at /tube?name=TUBE, a job's body at
// /api/jobs/{id}, and the actions, each a POST:
//
//	/tube/kick?name=TUBE   n        kick n buried (else delayed) jobs
//	/tube/pause?name=TUBE  seconds  pause the tube (0: unpause)
//	/tube/flush?name=TUBE  state    delete every ready, delayed or buried
//	                                job, or all three ("all"), inside the
//	                                engine
//	/jobs/{id}/kick                 make a buried or delayed job ready
//	/jobs/{id}/delete               delete a ready, delayed or buried job
//	/jobs/{id}/move        tube     move it to another tube (a new id)
//
// A tube's name travels as a query parameter, not as a path segment: a
// path is cleaned before it is routed, and the tubes "." and ".." would
// turn into other pages.
//
// Actions are refused (403) unless the server was given a token
// (--http-token-file), and every action must carry that token, as the
// form field "token" or as "Authorization: Bearer TOKEN"; it is compared
// in constant time. The token travels in the request, never in a cookie,
// so another site cannot make a browser send it (the CSRF defence), and a
// request whose Origin is not this listener is refused as well. Every
// action goes through the engine's Operator, so through the binlog like
// the protocol's commands, and is logged. Wrong tokens are limited per
// client address (see failures).
//
// Job bodies are the queue's payload, so the pages show them only when
// the server was started with --http-public-bodies; otherwise a page
// shows each job's figures and its script fetches the bodies from
// /api/jobs/{id} with the token ("Authorization: Bearer TOKEN").
//
// Browsing walks a tube's jobs in serving order under the tube's lock, so
// a listing reaches only the first engine.MaxBrowse jobs of a state.

//go:embed web
var webFS embed.FS

// staticFS serves web/static/ at /static/.
var staticFS = must(fs.Sub(webFS, "web"))

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"dur":  fmtDur,
	"rate": fmtRate,
	"body": showBody,
	"list": func() []string { return []string{"ready", "delayed", "buried"} },
	"inc":  func(n int) int { return n + 1 },
	"dec":  func(n int) int { return n - 1 },
}).ParseFS(webFS, "web/*.html"))

// maxForm bounds an action's request body.
const maxForm = 4 << 10

// overviewTubes bounds the tubes /api/overview lists (most jobs first).
const overviewTubes = 500

// bodyPeek and bodyList are how many bytes of a body the tube page shows.
const (
	bodyPeek = 1024
	bodyList = 120
)

// dashboard serves the pages and actions for one engine.
type dashboard struct {
	s     *Server
	token []byte // nil: read-only
	// bodies: the pages show job bodies to everyone (--http-public-bodies).
	bodies bool
	fails  *failures
	oldest *oldestCache
	rates  tubeRates
	log    zerolog.Logger
}

func newDashboard(s *Server, opts Options) *dashboard {
	d := &dashboard{s: s, bodies: opts.PublicBodies, fails: newFailures(opts.Log), log: opts.Log}
	if len(opts.Token) > 0 {
		d.token = opts.Token
	}
	d.oldest = newOldestCache(func(tube []byte) (time.Duration, bool) {
		if p := s.src.Load(); p != nil {
			return p.eng.OldestReady(tube)
		}
		return 0, false
	})
	return d
}

func (d *dashboard) routes(mux *http.ServeMux) {
	mux.Handle("GET /static/", http.FileServerFS(staticFS))
	mux.HandleFunc("GET /{$}", d.ready(d.overview))
	mux.HandleFunc("GET /api/overview", d.ready(d.overviewJSON))
	mux.HandleFunc("GET /api/history", d.ready(d.history))
	mux.HandleFunc("GET /api/jobs/{id}", d.ready(d.jobBody))
	mux.HandleFunc("GET /tube", d.ready(d.tube))
	mux.HandleFunc("POST /tube/{action}", d.ready(d.action(d.tubeAction)))
	mux.HandleFunc("POST /jobs/{id}/{action}", d.ready(d.action(d.jobAction)))
	mux.HandleFunc("GET /cluster", d.clusterStatus)
	mux.HandleFunc("GET /cluster/groups", d.clusterGroups)
	mux.HandleFunc("POST /cluster/{action}", d.clusterAction)
}

// ready answers 503 while the server has no engine for the dashboard:
// until it serves, or on a cluster node that serves none (one that follows
// its group, or a node of many groups, whose engines are those of the
// groups it leads).
func (d *dashboard) ready(h func(w http.ResponseWriter, r *http.Request, src *sources)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := d.s.src.Load()
		if p == nil {
			msg := stateText[Starting]
			if State(d.s.state.Load()) != Starting {
				msg = noEngineText
			}
			http.Error(w, msg, http.StatusServiceUnavailable)
			return
		}
		h(w, r, p)
	}
}

// noEngineText is the dashboard's answer on a node that serves no engine
// of its own.
const noEngineText = "this node runs no engine to show: it follows its group, or its groups' engines run at their leaders; /metrics, GET /cluster and GET /cluster/groups say what it knows"

// sources is what the dashboard reads and changes.
type sources struct {
	stats Source
	eng   *engine.Engine
	op    *engine.Operator
}

// ---- reading ----

type tubeRow struct {
	Name        string  `json:"name"`
	Ready       uint64  `json:"ready"`
	Urgent      uint64  `json:"urgent"`
	Delayed     uint64  `json:"delayed"`
	Reserved    uint64  `json:"reserved"`
	Buried      uint64  `json:"buried"`
	Waiting     uint64  `json:"waiting"`
	Using       uint64  `json:"using"`
	Watching    uint64  `json:"watching"`
	TotalJobs   uint64  `json:"total_jobs"`
	CmdDelete   uint64  `json:"cmd_delete"`
	Pause       uint64  `json:"pause"`
	PauseLeft   uint64  `json:"pause_time_left"`
	OldestReady float64 `json:"oldest_ready_seconds"`
	// PutRate and DeleteRate are puts and deletes a second (rates.go);
	// nil when unknown.
	PutRate    *float64 `json:"puts_per_sec"`
	DeleteRate *float64 `json:"deletes_per_sec"`
}

func (t *tubeRow) jobs() uint64 { return t.Ready + t.Delayed + t.Reserved + t.Buried }

// rowOf is a tube's row from its stats-tube figures.
func rowOf(name string, ts *codec.TubeStats) tubeRow {
	return tubeRow{Name: name, Ready: ts.CurrentJobsReady, Urgent: ts.CurrentJobsUrgent,
		Delayed: ts.CurrentJobsDelayed, Reserved: ts.CurrentJobsReserved, Buried: ts.CurrentJobsBuried,
		Waiting: ts.CurrentWaiting, Using: ts.CurrentUsing, Watching: ts.CurrentWatching,
		TotalJobs: ts.TotalJobs, CmdDelete: ts.CmdDelete, Pause: ts.Pause, PauseLeft: ts.PauseTimeLeft}
}

type overviewData struct {
	Time       int64          `json:"time_ms"`
	Server     map[string]any `json:"server"`
	Binlog     map[string]any `json:"binlog,omitempty"`
	Cluster    any            `json:"cluster,omitempty"` // the node's view of its group, in cluster mode
	Tubes      []tubeRow      `json:"tubes"`
	TubesTotal int            `json:"tubes_total"`
	// RatesSince is when the counts the tubes' rates are taken against
	// were read (Unix milliseconds).
	RatesSince int64  `json:"rates_since_ms"`
	ReadOnly   bool   `json:"read_only"`
	Msg        string `json:"-"`
}

func (d *dashboard) snapshot(src *sources, tubes int, now time.Time) overviewData {
	o := overviewData{Time: now.UnixMilli(), Server: map[string]any{}, ReadOnly: d.token == nil}
	var st codec.ServerStats
	src.stats.ServerStats(&st)
	eachStat(codec.AppendStats(nil, &st), func(key string, v float64, s string, isNum bool) {
		if isNum {
			o.Server[key] = v
		} else {
			o.Server[key] = s
		}
	})
	if bs, ok := src.stats.Binlog(); ok {
		o.Binlog = map[string]any{"failed": bs.Failed != nil, "disk_full": bs.DiskFull,
			"oldest_index": bs.OldestIndex, "current_index": bs.CurrentIndex, "segments": bs.Segments,
			"disk_bytes": bs.DiskBytes, "fsyncs": bs.Fsyncs, "bytes_written": bs.BytesWritten}
	}
	if c := d.s.cluster.Load(); c != nil {
		o.Cluster = (*c).Overview()
	}
	names := src.stats.TubeNames(nil)
	o.TubesTotal = len(names)
	rows := make([]tubeRow, 0, len(names))
	var ts codec.TubeStats
	for _, n := range names {
		if !src.stats.TubeStats(n, &ts) {
			continue
		}
		rows = append(rows, rowOf(string(n), &ts))
	}
	slices.SortStableFunc(rows, func(a, b tubeRow) int {
		if c := cmp.Compare(b.jobs(), a.jobs()); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	if len(rows) > tubes {
		rows = rows[:tubes]
	}
	o.Tubes = rows
	return o
}

// addOldest sets the age of each row's oldest ready job.
func (d *dashboard) addOldest(rows []tubeRow, now time.Time) {
	for i := range rows {
		if rows[i].Ready > 0 {
			age, _ := d.oldest.get(rows[i].Name, now)
			rows[i].OldestReady = age.Seconds()
		}
	}
}

func (d *dashboard) overview(w http.ResponseWriter, r *http.Request, src *sources) {
	o, ok := d.rated(r.Context(), src)
	if !ok {
		return // the client went away
	}
	o.Msg = r.URL.Query().Get("msg")
	d.render(w, http.StatusOK, "overview.html", o)
}

func (d *dashboard) overviewJSON(w http.ResponseWriter, r *http.Request, src *sources) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	o, ok := d.rated(r.Context(), src)
	if !ok {
		return // the client went away
	}
	_ = json.NewEncoder(w).Encode(o)
}

type tubePage struct {
	Tube     tubeRow
	Peek     []peek
	State    string
	Jobs     []jobRow
	Total    int
	Page     int
	Pages    int
	Msg      string
	ReadOnly bool
	Bodies   bool // shown on the page; otherwise they need the token
	// Timeouts counts the tube's jobs whose TTR ran out; Wait and Run are
	// the percentiles of the latency histograms /metrics exports.
	Timeouts  uint64
	Wait, Run latencyText
}

// jobRow is a job as a page lists it: its body (Head) is empty unless
// Bodies.
type jobRow struct {
	engine.JobView
	Bodies bool
}

type peek struct {
	State string
	Job   *jobRow
}

// pageSize is how many jobs a page of the tube page lists; maxPage is the
// deepest page, the one that reaches the engine's bound on a listing.
const (
	pageSize = 25
	maxPage  = engine.MaxBrowse / pageSize
)

var browseStates = map[string]engine.State{"ready": engine.Ready, "delayed": engine.Delayed, "buried": engine.Buried}

func (d *dashboard) tube(w http.ResponseWriter, r *http.Request, src *sources) {
	q := r.URL.Query()
	name := q.Get("name")
	var ts codec.TubeStats
	if !codec.ValidTubeName([]byte(name)) || !src.stats.TubeStats([]byte(name), &ts) {
		d.fail(w, http.StatusNotFound, fmt.Sprintf("no tube %q", name))
		return
	}
	p := tubePage{Tube: rowOf(name, &ts), State: firstState(&ts), Page: 1, Msg: q.Get("msg"), ReadOnly: d.token == nil, Bodies: d.bodies}
	p.Timeouts = src.eng.Timeouts([]byte(name))
	if wait, run, ok := src.eng.Latency([]byte(name)); ok {
		p.Wait, p.Run = latencyOf(&wait), latencyOf(&run)
	}
	if s := q.Get("state"); s != "" {
		if _, ok := browseStates[s]; !ok {
			d.fail(w, http.StatusBadRequest, fmt.Sprintf("state %q: want ready, delayed or buried", s))
			return
		}
		p.State = s
	}
	if v := q.Get("page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPage {
			d.fail(w, http.StatusBadRequest, fmt.Sprintf("page %q: want 1 to %d (a listing reaches the first %d jobs in serving order)", v, maxPage, engine.MaxBrowse))
			return
		}
		p.Page = n
	}
	if age, ok := d.oldest.get(name, time.Now()); ok {
		p.Tube.OldestReady = age.Seconds()
	}
	peekHead, listHead := 0, 0
	if d.bodies {
		peekHead, listHead = bodyPeek, bodyList
	}
	for _, s := range []string{"ready", "delayed", "buried"} {
		pk := peek{State: s}
		if jobs, _, _ := src.eng.Browse(name, browseStates[s], 0, 1, peekHead); len(jobs) == 1 {
			pk.Job = &jobRow{jobs[0], d.bodies}
		}
		p.Peek = append(p.Peek, pk)
	}
	jobs, total, _ := src.eng.Browse(name, browseStates[p.State], (p.Page-1)*pageSize, pageSize, listHead)
	for _, j := range jobs {
		p.Jobs = append(p.Jobs, jobRow{j, d.bodies})
	}
	p.Total = total
	p.Pages = max(1, min((p.Total+pageSize-1)/pageSize, maxPage))
	d.render(w, http.StatusOK, "tube.html", p)
}

// firstState is the list a tube's page opens on: the first of ready,
// delayed and buried that has jobs, ready if none has.
func firstState(ts *codec.TubeStats) string {
	switch {
	case ts.CurrentJobsReady == 0 && ts.CurrentJobsDelayed > 0:
		return "delayed"
	case ts.CurrentJobsReady == 0 && ts.CurrentJobsBuried > 0:
		return "buried"
	}
	return "ready"
}

// latencyText is a latency histogram's median and 99th percentile as the
// tube page shows them; N is how many observations it has (0: none, and
// the percentiles are empty).
type latencyText struct {
	N        uint64
	P50, P99 string
}

func latencyOf(h *engine.Histogram) latencyText {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	if n == 0 {
		return latencyText{}
	}
	return latencyText{N: n, P50: quantileText(h, n, 0.5), P99: quantileText(h, n, 0.99)}
}

// quantileText estimates the q-quantile of h's n observations as
// Prometheus's histogram_quantile does: linearly within the bucket that
// holds it. Above the last bound it can only say "> 1h".
func quantileText(h *engine.Histogram, n uint64, q float64) string {
	rank := q * float64(n)
	var below uint64
	for i, c := range h.Counts {
		if c == 0 || float64(below+c) < rank {
			below += c
			continue
		}
		if i == len(engine.LatencyBounds) {
			return "> " + fmtLatency(engine.LatencyBounds[i-1])
		}
		lo := time.Duration(0)
		if i > 0 {
			lo = engine.LatencyBounds[i-1]
		}
		hi := engine.LatencyBounds[i]
		return fmtLatency(lo + time.Duration(float64(hi-lo)*(rank-float64(below))/float64(c)))
	}
	return ""
}

// fmtLatency: "0.4ms", "37ms", "2.5s", "3m10s".
func fmtLatency(d time.Duration) string {
	switch {
	case d < 10*time.Millisecond:
		return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) + "ms"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	return fmtDur(d.Seconds())
}

// jobBody answers a job's body, at most bodyPeek bytes of it, as JSON:
// {"id", "size", "text", "hex", "truncated"}, text being hex when the body
// is not printable. It needs the token unless --http-public-bodies.
func (d *dashboard) jobBody(w http.ResponseWriter, r *http.Request, src *sources) {
	if !d.bodies {
		if d.token == nil {
			d.fail(w, http.StatusForbidden, "job bodies are not shown: start beanpole with --http-token-file FILE to show them with the token, or with --http-public-bodies")
			return
		}
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !d.authorized(w, r, tok, "job bodies need the token") {
			return
		}
	}
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		d.fail(w, http.StatusBadRequest, fmt.Sprintf("%q is not a job id", r.PathValue("id")))
		return
	}
	v, ok := src.eng.Job(id, bodyPeek)
	if !ok {
		d.fail(w, http.StatusNotFound, fmt.Sprintf("no job %d", id))
		return
	}
	b := showBody(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(struct {
		ID        uint64 `json:"id"`
		Size      int    `json:"size"`
		Text      string `json:"text"`
		Hex       bool   `json:"hex"`
		Truncated bool   `json:"truncated"`
	}{id, b.Size, b.Text, b.Hex, b.Truncated})
}

// ---- changing ----

// action checks what every action needs: a token, the right one, a
// request from this listener's own pages or no browser at all, and a
// small form.
func (d *dashboard) action(h func(w http.ResponseWriter, r *http.Request, src *sources)) func(http.ResponseWriter, *http.Request, *sources) {
	return func(w http.ResponseWriter, r *http.Request, src *sources) {
		if d.permit(w, r) {
			h(w, r, src)
		}
	}
}

// permit checks what every action needs and answers when it will not do:
// a token, the right one, a request from this listener's own pages or no
// browser at all, and a small form.
func (d *dashboard) permit(w http.ResponseWriter, r *http.Request) bool {
	if d.token == nil {
		d.fail(w, http.StatusForbidden, "read-only: actions need a token (start beanpole with --http-token-file FILE)")
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err != nil || u.Host != r.Host {
			d.fail(w, http.StatusForbidden, fmt.Sprintf("a request from %q, not from this dashboard", o))
			return false
		}
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		if _, big := errors.AsType[*http.MaxBytesError](err); big {
			d.fail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the form is over %d bytes", maxForm))
			return false
		}
		d.fail(w, http.StatusBadRequest, "bad form: "+err.Error())
		return false
	}
	tok := r.PostForm.Get("token")
	if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		tok = b
	}
	return d.authorized(w, r, tok, "this action needs the token")
}

// authorized checks the token a request carries and answers when it will
// not do: 401 without one (need says why one is needed), 429 when the
// client has had its share of wrong tokens, 403 for a wrong one.
func (d *dashboard) authorized(w http.ResponseWriter, r *http.Request, tok, need string) bool {
	if tok == "" {
		d.fail(w, http.StatusUnauthorized, need)
		return false
	}
	now := time.Now()
	c := clientOf(r.RemoteAddr)
	if wait := d.fails.take(c, now); wait > 0 {
		d.fails.note(now, r, "dashboard: a token refused unchecked: too many wrong ones from this address")
		secs := retryAfter(wait)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		d.fail(w, http.StatusTooManyRequests, fmt.Sprintf("too many wrong tokens from this address: try again in %d s", secs))
		return false
	}
	if subtle.ConstantTimeCompare([]byte(tok), d.token) != 1 {
		d.fails.note(now, r, "dashboard: a wrong token refused")
		d.fail(w, http.StatusForbidden, "wrong token")
		return false
	}
	d.fails.refund(c)
	return true
}

func (d *dashboard) tubeAction(w http.ResponseWriter, r *http.Request, src *sources) {
	name, act := r.URL.Query().Get("name"), r.PathValue("action")
	if !codec.ValidTubeName([]byte(name)) {
		d.fail(w, http.StatusBadRequest, fmt.Sprintf("%q is not a tube name", name))
		return
	}
	var msg string
	var err error
	switch act {
	case "kick":
		n, ok := formUint32(r, "n")
		if !ok || n == 0 {
			d.fail(w, http.StatusBadRequest, "n: want a whole number from 1 to 4294967295")
			return
		}
		var k uint32
		k, err = src.op.Kick(name, n)
		msg = fmt.Sprintf("kicked %d", k)
	case "pause":
		secs, ok := formUint32(r, "seconds")
		if !ok {
			d.fail(w, http.StatusBadRequest, "seconds: want a whole number from 0 to 4294967295")
			return
		}
		err = src.op.Pause(name, time.Duration(secs)*time.Second)
		msg = fmt.Sprintf("paused for %d s", secs)
		if secs == 0 {
			msg = "unpaused"
		}
	case "flush":
		var states []engine.State
		switch s := r.PostForm.Get("state"); s {
		case "ready", "delayed", "buried":
			states = []engine.State{browseStates[s]}
		case "all":
			states = []engine.State{engine.Ready, engine.Delayed, engine.Buried}
		default:
			d.fail(w, http.StatusBadRequest, fmt.Sprintf("state %q: want ready, delayed, buried or all", s))
			return
		}
		var n int
		n, err = src.op.Flush(name, states...)
		d.s.coll.flushed.Add(uint64(n))
		msg = fmt.Sprintf("flushed %d %s jobs", n, r.PostForm.Get("state"))
	default:
		d.fail(w, http.StatusNotFound, fmt.Sprintf("no action %q on a tube", act))
		return
	}
	d.done(w, r, src, name, "tube", name, act, msg, err)
}

func (d *dashboard) jobAction(w http.ResponseWriter, r *http.Request, src *sources) {
	act := r.PathValue("action")
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		d.fail(w, http.StatusBadRequest, fmt.Sprintf("%q is not a job id", r.PathValue("id")))
		return
	}
	v, ok := src.eng.Job(id, 0)
	if !ok {
		d.fail(w, http.StatusNotFound, fmt.Sprintf("no job %d", id))
		return
	}
	var msg string
	switch act {
	case "kick":
		err = src.op.KickJob(id)
		msg = fmt.Sprintf("kicked job %d", id)
	case "delete":
		err = src.op.Delete(id)
		msg = fmt.Sprintf("deleted job %d", id)
	case "move":
		to := r.PostForm.Get("tube")
		if !codec.ValidTubeName([]byte(to)) {
			d.fail(w, http.StatusBadRequest, fmt.Sprintf("%q is not a tube name", to))
			return
		}
		var nid uint64
		nid, err = src.op.Move(id, to)
		msg = fmt.Sprintf("moved job %d to %s as job %d", id, to, nid)
	default:
		d.fail(w, http.StatusNotFound, fmt.Sprintf("no action %q on a job", act))
		return
	}
	d.done(w, r, src, v.Tube, "job", strconv.FormatUint(id, 10), act, msg, err)
}

// done logs an action and answers it: back to the tube's page, with what
// happened, or the error.
//
// Actions are logged at warning level, so that they show without -V: each
// one is an operator's hand on the queue.
func (d *dashboard) done(w http.ResponseWriter, r *http.Request, src *sources, tube, kind, what, act, msg string, err error) {
	ev := d.log.Warn().Str("remote", r.RemoteAddr).Str(kind, what).Str("action", act)
	if err != nil {
		ev.Err(err).Msg("dashboard: action failed")
	} else {
		ev.Msg("dashboard: " + msg)
	}
	if err != nil {
		code := http.StatusConflict
		switch {
		case errors.Is(err, engine.ErrNoTube), errors.Is(err, engine.ErrNoJob):
			code = http.StatusNotFound
		case errors.Is(err, engine.ErrNoRoom), errors.Is(err, engine.ErrLogFailed), errors.Is(err, engine.ErrNoMemory),
			errors.Is(err, engine.ErrNoIDs):
			code = http.StatusServiceUnavailable
		}
		d.fail(w, code, act+": "+err.Error())
		return
	}
	back := "/tube?name=" + url.QueryEscape(tube) + "&"
	var ts codec.TubeStats
	if !src.stats.TubeStats([]byte(tube), &ts) {
		back = "/?" // emptied and used by nobody: the tube is gone
	}
	http.Redirect(w, r, back+"msg="+url.QueryEscape(msg), http.StatusSeeOther)
}

func formUint32(r *http.Request, key string) (uint32, bool) {
	n, err := strconv.ParseUint(strings.TrimSpace(r.PostForm.Get(key)), 10, 32)
	return uint32(n), err == nil
}

// ---- answering ----

func (d *dashboard) render(w http.ResponseWriter, code int, page string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	if err := pages.ExecuteTemplate(w, page, data); err != nil {
		d.log.Error().Err(err).Str("page", page).Msg("dashboard: template failed")
	}
}

// fail answers with an error page, its message in plain words.
func (d *dashboard) fail(w http.ResponseWriter, code int, msg string) {
	d.render(w, code, "error.html", struct {
		Code   int
		Status string
		Msg    string
	}{code, http.StatusText(code), msg})
}

// fmtDur shows a duration the way the page's script does: "42s", "2m50s",
// "1h5m".
// fmtRate is the page's fmtRate: "–" when unknown, one decimal below 10.
func fmtRate(r *float64) string {
	switch {
	case r == nil:
		return "–"
	case *r < 10:
		return strconv.FormatFloat(*r, 'f', 1, 64)
	}
	return strconv.FormatFloat(math.Round(*r), 'f', 0, 64)
}

func fmtDur(secs float64) string {
	s := int64(math.Round(secs))
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%dm", s/3600, s%3600/60)
}

// shownBody is a body as the page shows it: text when it is printable
// UTF-8, otherwise hex.
type shownBody struct {
	Text      string
	Hex       bool
	Truncated bool
	Size      int
}

func showBody(v engine.JobView) shownBody {
	b := shownBody{Size: v.Size, Truncated: len(v.Head) < v.Size}
	if printable(v.Head) {
		b.Text = string(v.Head)
		return b
	}
	b.Hex = true
	var sb strings.Builder
	for i, c := range v.Head {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%02x", c)
	}
	b.Text = sb.String()
	return b
}

// printable: valid UTF-8 with no control characters but tab and newlines.
// A body cut in the middle of a rune still counts as text.
func printable(b []byte) bool {
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n <= 1 {
			return len(b) < utf8.UTFMax && !utf8.FullRune(b)
		}
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7f {
			return false
		}
		b = b[n:]
	}
	return true
}
