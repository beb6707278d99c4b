package admin

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/rs/zerolog"
)

// Scrapes.
//
// A scrape of many tubes is tens of megabytes of text, so its memory must
// not grow with the number of scrapers, least of all with scrapers that
// never read: each scrape is rendered once into an immutable buffer, and
// every scraper is sent that same buffer (and the same gzip of it). One
// rendering runs at a time; a scraper is sent a rendering that started
// after it asked, so a scrape never shows figures older than the request,
// and scrapers that ask during a rendering share the next one.
//
// A buffer lives while a scraper is still being sent it. A client that
// does not read keeps it until the write timeout, so once maxRetired
// replaced buffers are still being sent, no new rendering is made and
// scrapers are sent the latest one, however old: the memory of all
// scrapes is then bounded by maxRetired+1 buffers and one rendering.

// maxRetired is how many replaced buffers may still be being sent before
// scrapers are sent the latest buffer instead of a new rendering.
const maxRetired = 2

// scrapeBuf is one rendering, never changed once made (gz is added once,
// under scraper.mu).
type scrapeBuf struct {
	text    []byte
	gz      []byte
	started time.Time
	senders int  // scrapers being sent it; guarded by scraper.mu
	retired bool // replaced while being sent
}

// scraper renders the registry's metrics, at most once at a time.
type scraper struct {
	reg     prometheus.Gatherer // the server-wide series
	tubes   *collector          // writes the per-tube series itself
	log     zerolog.Logger
	mu      sync.Mutex
	cur     *scrapeBuf
	retired int // retired buffers still being sent
}

var textFormat = string(expfmt.NewFormat(expfmt.TypeTextPlain))

func (s *scraper) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	gz := acceptsGzip(r)
	b, body, err := s.get(time.Now(), gz)
	if err != nil {
		s.log.Error().Err(err).Msg("metrics: rendering failed")
		http.Error(w, "rendering the metrics failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer s.release(b)
	h := w.Header()
	h.Set("Content-Type", textFormat)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Vary", "Accept-Encoding")
	if gz {
		h.Set("Content-Encoding", "gzip")
	}
	_, _ = w.Write(body)
}

// get returns the buffer to send a scraper that asked at asked, and its
// body (gzipped if gz), counting the scraper as one of its senders: call
// release when done.
func (s *scraper) get(asked time.Time, gz bool) (*scrapeBuf, []byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.cur; c == nil || (c.started.Before(asked) && s.retired < maxRetired) {
		b, err := s.render()
		if err != nil {
			return nil, nil, err
		}
		if c != nil && c.senders > 0 {
			c.retired = true
			s.retired++
		}
		s.cur = b
	}
	b := s.cur
	b.senders++
	if !gz {
		return b, b.text, nil
	}
	if b.gz == nil {
		var out bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&out, gzip.BestSpeed)
		_, _ = zw.Write(b.text)
		_ = zw.Close()
		b.gz = out.Bytes()
	}
	return b, b.gz, nil
}

// release: the scraper is done with b.
func (s *scraper) release(b *scrapeBuf) {
	s.mu.Lock()
	b.senders--
	if b.senders == 0 && b.retired {
		b.retired = false
		s.retired--
	}
	s.mu.Unlock()
}

// render gathers and writes the metrics in the text format.
func (s *scraper) render() (*scrapeBuf, error) {
	b := &scrapeBuf{started: time.Now()}
	fams, err := s.reg.Gather()
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for _, mf := range fams {
		if _, err := expfmt.MetricFamilyToText(&out, mf); err != nil {
			return nil, err
		}
	}
	s.tubes.writeTubes(&out)
	b.text = out.Bytes()
	return b, nil
}

// acceptsGzip: the request's Accept-Encoding lists gzip with a non-zero
// weight.
func acceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for _, part := range strings.Split(v, ",") {
			enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			if !strings.EqualFold(strings.TrimSpace(enc), "gzip") {
				continue
			}
			q, ok := strings.CutPrefix(strings.ReplaceAll(params, " ", ""), "q=")
			if !ok {
				return true
			}
			f, err := strconv.ParseFloat(q, 64)
			return err == nil && f > 0
		}
	}
	return false
}
