package main

import (
	"fmt"
	"strconv"
	"time"
)

// The cross-group reserve run: workers that each watch one tube of every
// data group (default ignored) and loop reserve → delete, and one
// producer per tube. It has two phases on the same cluster:
//
//   - busy: the producers keep xresBacklog jobs queued in every tube, so a
//     reserve finds jobs in every group (docs/cluster.md, "Reserve over
//     tubes of several groups": it asks every group, compares the offers'
//     priorities and puts the others back); the row's latency is the
//     reserve's, from its sending to RESERVED;
//   - wait: once every job of the first phase is deleted, the workers wait
//     in reserve and the producers put one job at a time, round the tubes,
//     each once the previous one is acknowledged and reserved; the row's
//     latency is from the put's sending to the worker's RESERVED.
type xres struct {
	l         *Loop
	led       *Ledger
	m         *meter
	names     []string // tube t's name
	prods     []*Conn  // prods[t] puts into tube t
	hdr       []byte
	scratch   []byte
	wait      bool // the wait phase
	stopping  bool
	setupLeft int
	queued    []int // busy: per tube, jobs put (or on their way) and not yet reserved
	prodBusy  int   // puts in flight
	// wait: the job in flight (-1: none), whether its put is acknowledged
	// and when, and whether it is reserved.
	cur           int
	ackAt         int64
	acked, served bool
	next          int // wait: the tube of the next put
	ops           int64
	hist, ackHist Hist
}

// xresBacklog is the busy phase's queue per tube: more than the workers
// that may hold an offer of each group at once.
const xresBacklog = 32

func (x *xres) Connected(c *Conn) error { return nil }

// produce tops up tube t's queue (busy) or puts the next job (wait).
func (x *xres) produce(t int) {
	if x.stopping {
		return
	}
	if !x.wait {
		for x.queued[t] < xresBacklog {
			x.scratch = sendPut(x.prods[t], x.led, x.hdr, x.scratch, t, opPut)
			x.queued[t]++
			x.prodBusy++
		}
		return
	}
	x.cur, x.acked, x.served = x.led.Count(), false, false
	x.scratch = sendPut(x.prods[t], x.led, x.hdr, x.scratch, t, opPut)
	x.prodBusy++
}

// waitNext puts the next job of the wait phase once the one in flight is
// acknowledged and reserved.
func (x *xres) waitNext() {
	if x.acked && x.served {
		x.cur = -1
		x.next = (x.next + 1) % len(x.names)
		x.produce(x.next)
	}
}

func (x *xres) Reply(c *Conn, e Expect, r *Reply) error {
	now := x.l.Time()
	switch e.Op {
	case opUse:
		if r.Kind != KUsing || string(r.Name) != x.names[e.Seq] {
			return unexpected("use "+x.names[e.Seq], r)
		}
		x.setupLeft--
	case opWatch:
		if r.Kind != KWatching || r.N != uint64(e.Seq+2) {
			return unexpected("watch "+x.names[e.Seq]+" (want WATCHING "+strconv.Itoa(e.Seq+2)+")", r)
		}
		x.setupLeft--
	case opIgnore:
		if r.Kind != KWatching || r.N != uint64(len(x.names)) {
			return unexpected("ignore default (want WATCHING "+strconv.Itoa(len(x.names))+")", r)
		}
		x.setupLeft--
	case opPut:
		if r.Kind != KInserted {
			return unexpected("put", r)
		}
		if err := x.led.Inserted(e.Seq, r.ID); err != nil {
			return err
		}
		x.prodBusy--
		if x.wait && e.Seq == x.cur {
			x.acked, x.ackAt = true, now
			x.waitNext()
		}
	case opReserve:
		if r.Kind != KReserved {
			return unexpected("reserve", r)
		}
		seq, err := x.led.Reserved(r.ID, r.Body)
		if err != nil {
			return err
		}
		rec := x.m.active()
		t := int(x.led.Rec(seq).tube)
		switch {
		case !x.wait:
			if rec {
				x.hist.Record(now - e.T0)
			}
			x.queued[t]--
			x.produce(t)
		case seq == x.cur:
			if rec {
				x.hist.Record(now - x.led.Rec(seq).t0)
				if x.acked {
					x.ackHist.Record(now - x.ackAt)
				} else {
					x.ackHist.Record(0)
				}
			}
			x.served = true
			x.waitNext()
		default:
			return fmt.Errorf("waiting workers: job %d reserved, not the one in flight", r.ID)
		}
		if rec {
			x.ops++
		}
		x.scratch = appendIDCmd(x.scratch[:0], "delete", r.ID)
		c.Send(x.scratch, Expect{Op: opDelete, Seq: seq, ID: r.ID})
	case opDelete:
		if r.Kind != KDeleted {
			return unexpected("delete "+strconv.FormatUint(e.ID, 10), r)
		}
		if err := x.led.Deleted(e.Seq); err != nil {
			return err
		}
		c.Send([]byte("reserve\r\n"), Expect{Op: opReserve, T0: now})
	default:
		return fmt.Errorf("cross-group reserve: unexpected op %d", e.Op)
	}
	return nil
}

// runXRes runs the workers, spread over the nodes (worker i on node i mod
// k), against a producer per tube (on the nodes in turn); the tubes are
// one of each of rc.Spread data groups, with the same names for either
// contender.
func runXRes(rc *RunCtx, workers int) (Metrics, error) {
	l, o := rc.L, rc.Opt
	g := max(rc.Spread, 1)
	x := &xres{l: l, led: NewLedger(o.Size), m: newMeter(l, rc.Srv), cur: -1, queued: make([]int, g),
		hdr: appendPut(nil, jobPri, 0, jobTTR, max(o.Size, seqDigits))}
	for t := range g {
		x.names = append(x.names, tubeInGroup("bench.x", t, g))
	}
	cs, err := dialOver(l, rc.Srv.ports(), workers+g, 60*time.Second)
	if err != nil {
		return nil, err
	}
	ws := cs[:workers]
	x.prods = cs[workers:]
	for _, c := range cs {
		c.SetHandler(x)
	}
	for t, c := range x.prods {
		c.WriteString("use " + x.names[t] + "\r\n")
		c.Expect(Expect{Op: opUse, Seq: t})
		x.setupLeft++
	}
	for _, c := range ws {
		for t, name := range x.names {
			c.WriteString("watch " + name + "\r\n")
			c.Expect(Expect{Op: opWatch, Seq: t})
		}
		c.WriteString("ignore default\r\n")
		c.Expect(Expect{Op: opIgnore})
		x.setupLeft += g + 1
	}
	if err := l.Run(func() bool { return x.setupLeft == 0 }, l.Now()+int64(60*time.Second), "use/watch set-up"); err != nil {
		return nil, err
	}
	mx := Metrics{"workers": float64(workers), "tubes": float64(g), "backlog": float64(xresBacklog)}
	// phase runs one phase: the window after the warm-up, then every job
	// delivered and deleted.
	phase := func(key string, start func()) error {
		x.stopping, x.ops, x.hist, x.ackHist = false, 0, Hist{}, Hist{}
		start()
		l.OnTick = windowTicker(l, x.m, o.Warmup, o.Duration, func() { x.stopping = true })
		err := l.Run(func() bool { return x.stopping && x.prodBusy == 0 && x.led.nDel == x.led.Count() },
			l.Now()+int64(o.Warmup+o.Duration+o.Drain), "every job to be reserved and deleted")
		l.OnTick = nil
		if err != nil {
			return err
		}
		return x.m.fill(mx, key, float64(x.ops), &x.hist)
	}
	if err := phase("busy.", func() {
		for t := range g {
			x.produce(t)
		}
		for _, c := range ws {
			c.Send([]byte("reserve\r\n"), Expect{Op: opReserve, T0: l.Time()})
		}
	}); err != nil {
		return nil, err
	}
	// The workers now wait in reserve, each at every group.
	x.wait, x.m = true, newMeter(l, rc.Srv)
	if err := phase("wait.", func() { x.produce(x.next) }); err != nil {
		return nil, err
	}
	if x.ackHist.Count() > 0 {
		mx["wait.ack_p50"] = x.ackHist.Quantile(0.50) / 1e3
		mx["wait.ack_p99"] = x.ackHist.Quantile(0.99) / 1e3
	}
	if err := x.led.CheckAllDone(); err != nil {
		return nil, err
	}
	if err := checkStats(rc.Srv.Port, map[string]int64{
		"current-jobs-ready": 0, "current-jobs-reserved": 0, "total-jobs": rc.Srv.jobsBefore + int64(x.led.Count()),
	}); err != nil {
		return nil, err
	}
	return mx, nil
}
