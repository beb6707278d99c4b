package main

import (
	"bytes"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"sort"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// The chart has two panels: round-trip throughput vs connections (log x)
// and server RSS vs idle connections. It is drawn with the standard image
// packages and basicfont, no plotting library.

var (
	colBG     = color.RGBA{255, 255, 255, 255}
	colAxis   = color.RGBA{60, 60, 60, 255}
	colGrid   = color.RGBA{225, 225, 225, 255}
	colText   = color.RGBA{20, 20, 20, 255}
	colSeries = [2]color.RGBA{{31, 119, 180, 255}, {255, 127, 14, 255}} // beanpole, beanstalkd
	names     = [2]string{"beanpole", "beanstalkd"}
)

type pt struct{ x, y float64 }

type panel struct {
	title, xlabel, ylabel string
	logX                  bool
	series                [2][]pt
}

func writeChart(path string, results []*VarResult) error {
	thr := panel{title: "put/reserve/delete round trips", xlabel: "connections (log)", ylabel: "jobs/s", logX: true}
	rss := panel{title: "server RSS with idle connections", xlabel: "idle connections", ylabel: "RSS MiB"}
	for _, vr := range results {
		if vr.V.Pinned {
			continue // the charts are of the unpinned runs
		}
		for ci, cr := range vr.Res {
			if cr.Median == nil {
				continue
			}
			switch vr.V.Group {
			case "roundtrip":
				if v, ok := cr.Median["rate"]; ok {
					thr.series[ci] = append(thr.series[ci], pt{cr.Median["conns"], v})
				}
			case "idle":
				if v, ok := cr.Median["rss_mib"]; ok {
					rss.series[ci] = append(rss.series[ci], pt{cr.Median["conns"], v})
					if b, ok := cr.Median["rss0_mib"]; ok {
						rss.series[ci] = append(rss.series[ci], pt{0, b})
					}
				}
			}
		}
	}
	for ci := range rss.series {
		// one baseline point (the smallest) is enough
		s := rss.series[ci]
		sort.Slice(s, func(i, j int) bool { return s[i].x < s[j].x || (s[i].x == s[j].x && s[i].y < s[j].y) })
		var out []pt
		for _, p := range s {
			if len(out) > 0 && out[len(out)-1].x == p.x {
				continue
			}
			out = append(out, p)
		}
		rss.series[ci] = out
		sort.Slice(thr.series[ci], func(i, j int) bool { return thr.series[ci][i].x < thr.series[ci][j].x })
	}
	const W, H = 1200, 500
	img := image.NewRGBA(image.Rect(0, 0, W, H))
	draw.Draw(img, img.Bounds(), &image.Uniform{colBG}, image.Point{}, draw.Src)
	drawPanel(img, image.Rect(0, 0, W/2, H), &thr)
	drawPanel(img, image.Rect(W/2, 0, W, H), &rss)
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return err
	}
	return writeFileAtomic(path, buf.Bytes())
}

func drawPanel(img *image.RGBA, r image.Rectangle, p *panel) {
	plot := image.Rect(r.Min.X+75, r.Min.Y+50, r.Max.X-25, r.Max.Y-70)
	text(img, r.Min.X+(r.Dx()-7*len(p.title))/2, r.Min.Y+22, p.title, colText)
	var all []pt
	for _, s := range p.series {
		all = append(all, s...)
	}
	if len(all) == 0 {
		rect(img, plot, colAxis)
		text(img, plot.Min.X+20, plot.Min.Y+plot.Dy()/2, "no data (scenario not run)", colText)
		return
	}
	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymax := 0.0
	for _, q := range all {
		xmin, xmax = math.Min(xmin, q.x), math.Max(xmax, q.x)
		ymax = math.Max(ymax, q.y)
	}
	if p.logX {
		xmin = math.Max(xmin, 1)
	}
	if xmax <= xmin {
		xmax = xmin + 1
	}
	step := niceStep(ymax / 5)
	if step <= 0 {
		step = 1
	}
	ytop := math.Ceil(ymax*1.05/step) * step
	if ytop <= 0 {
		ytop = 1
	}
	fx := func(x float64) int {
		var t float64
		if p.logX {
			t = (math.Log10(math.Max(x, 1)) - math.Log10(xmin)) / (math.Log10(xmax) - math.Log10(xmin))
		} else {
			t = (x - xmin) / (xmax - xmin)
		}
		return plot.Min.X + int(t*float64(plot.Dx()-1)+0.5)
	}
	fy := func(y float64) int {
		return plot.Max.Y - 1 - int(y/ytop*float64(plot.Dy()-1)+0.5)
	}
	// grid and y ticks
	for y := 0.0; y <= ytop+step/2; y += step {
		py := fy(y)
		hline(img, plot.Min.X, plot.Max.X, py, colGrid)
		lbl := tickLabel(y)
		text(img, plot.Min.X-8-7*len(lbl), py+4, lbl, colText)
	}
	// x ticks at the data points
	seen := map[float64]bool{}
	var xs []float64
	for _, q := range all {
		if !seen[q.x] {
			seen[q.x] = true
			xs = append(xs, q.x)
		}
	}
	sort.Float64s(xs)
	lastEnd := -1000
	for _, x := range xs {
		px := fx(x)
		vline(img, px, plot.Min.Y, plot.Max.Y, colGrid)
		lbl := tickLabel(x)
		sx := px - 7*len(lbl)/2
		if sx > lastEnd+4 {
			text(img, sx, plot.Max.Y+16, lbl, colText)
			lastEnd = sx + 7*len(lbl)
		}
	}
	rect(img, plot, colAxis)
	text(img, plot.Min.X+(plot.Dx()-7*len(p.xlabel))/2, plot.Max.Y+36, p.xlabel, colText)
	text(img, r.Min.X+8, plot.Min.Y-12, p.ylabel, colText)
	// series
	for ci, s := range p.series {
		c := colSeries[ci]
		for i, q := range s {
			x, y := fx(q.x), fy(q.y)
			marker(img, x, y, c)
			if i > 0 {
				line(img, fx(s[i-1].x), fy(s[i-1].y), x, y, c)
			}
		}
	}
	// legend
	lx, ly := plot.Min.X+10, r.Max.Y-18
	for ci, n := range names {
		fillRect(img, image.Rect(lx, ly-8, lx+18, ly-2), colSeries[ci])
		text(img, lx+24, ly, n, colText)
		lx += 24 + 7*len(n) + 30
	}
}

// tickLabel formats an axis value compactly: 5000, 12.5k, 25k, 1.5M.
func tickLabel(x float64) string {
	f := func(v float64) string { return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64) }
	switch a := math.Abs(x); {
	case a >= 1e6:
		return f(x/1e6) + "M"
	case a >= 1e4:
		return f(x/1e3) + "k"
	}
	return f(x)
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	e := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*e >= x {
			return m * e
		}
	}
	return 10 * e
}

func text(img *image.RGBA, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func hline(img *image.RGBA, x0, x1, y int, c color.Color) {
	for x := x0; x < x1; x++ {
		img.Set(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.Color) {
	for y := y0; y < y1; y++ {
		img.Set(x, y, c)
	}
}

func rect(img *image.RGBA, r image.Rectangle, c color.Color) {
	hline(img, r.Min.X, r.Max.X, r.Min.Y, c)
	hline(img, r.Min.X, r.Max.X, r.Max.Y-1, c)
	vline(img, r.Min.X, r.Min.Y, r.Max.Y, c)
	vline(img, r.Max.X-1, r.Min.Y, r.Max.Y, c)
}

func fillRect(img *image.RGBA, r image.Rectangle, c color.Color) {
	draw.Draw(img, r, &image.Uniform{c}, image.Point{}, draw.Src)
}

func marker(img *image.RGBA, x, y int, c color.Color) {
	fillRect(img, image.Rect(x-3, y-3, x+4, y+4), c)
}

// line draws a 2-pixel-wide Bresenham line.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := 1, 1
	if x0 > x1 {
		sx = -1
	}
	if y0 > y1 {
		sy = -1
	}
	e := dx + dy
	for {
		img.Set(x0, y0, c)
		img.Set(x0+1, y0, c)
		img.Set(x0, y0+1, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
