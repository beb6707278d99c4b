package main

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"time"
)

// Command codes carried in Expect.Op.
const (
	opPing uint8 = iota + 1
	opPut
	opReserve
	opDelete
	opUse
	opWatch
	opIgnore
)

const (
	jobPri = 1024
	jobTTR = 120 // long enough that no job times out during a run
)

// meter measures one window: wall time, this process's CPU and the
// server's CPU.
type meter struct {
	l        *Loop
	srv      *Server
	on, done bool
	t0, t1   int64
	c0, c1   float64
	s0, s1   float64
	// fs counts the server's fsyncs in this window: the first window of
	// a run whose variant counts them.
	fs *fsyncCounter
}

func newMeter(l *Loop, srv *Server) *meter { return &meter{l: l, srv: srv} }

func (m *meter) start() {
	m.on, m.t0, m.c0, m.s0 = true, m.l.Time(), selfCPU(), m.srv.CPU()
	if m.srv.fsyncs.enable() {
		m.fs = m.srv.fsyncs
	}
}

func (m *meter) stop() {
	if !m.on || m.done {
		return
	}
	m.done, m.t1, m.c1, m.s1 = true, m.l.Time(), selfCPU(), m.srv.CPU()
	m.fs.finish()
}

func (m *meter) active() bool { return m.on && !m.done }

// fill stores the standard figures under key: rate (ops/s), ops, wall
// (s), cpu (client CPU, % of one core), srvcpu (server CPU %), srvus
// (server CPU µs per op), cliUs (client CPU µs per op), p50/p99/p999 (µs),
// and fsyncs (fsync and fdatasync calls per op) when m counted them.
func (m *meter) fill(mx Metrics, key string, ops float64, h *Hist) error {
	if !m.done {
		return fmt.Errorf("measurement window never closed")
	}
	wall := float64(m.t1-m.t0) / 1e9
	if wall <= 0 {
		return fmt.Errorf("empty measurement window")
	}
	mx[key+"ops"] = ops
	mx[key+"wall"] = wall
	mx[key+"rate"] = ops / wall
	mx[key+"cpu"] = (m.c1 - m.c0) / wall * 100
	mx[key+"srvcpu"] = (m.s1 - m.s0) / wall * 100
	if ops > 0 {
		mx[key+"srvus"] = (m.s1 - m.s0) / ops * 1e6
		mx[key+"cliUs"] = (m.c1 - m.c0) / ops * 1e6
		if n, ok := m.fs.count(); ok {
			mx[key+"fsyncs"] = float64(n) / ops
		}
	}
	if h != nil && h.Count() > 0 {
		mx[key+"p50"] = h.Quantile(0.50) / 1e3
		mx[key+"p99"] = h.Quantile(0.99) / 1e3
		mx[key+"p999"] = h.Quantile(0.999) / 1e3
		mx[key+"max"] = float64(h.Max()) / 1e3
	}
	return nil
}

// windowTicker returns an OnTick that starts m after warmup and stops it
// (calling onEnd) after dur.
func windowTicker(l *Loop, m *meter, warmup, dur time.Duration, onEnd func()) func() {
	ws := l.Now() + int64(warmup)
	we := ws + int64(dur)
	return func() {
		now := l.Time()
		if !m.on && now >= ws {
			m.start()
		}
		if m.active() && now >= we {
			m.stop()
			onEnd()
		}
	}
}

// ---------------------------------------------------------------- dialing

// dialer opens n connections, at most max handshakes+first replies at a
// time, and pings each ("list-tube-used" → "USING default") so that a
// connection only counts once the server has accepted and served it.
// Connection i goes to ports[i mod len(ports)], or with no ports to the
// loop's.
type dialer struct {
	l                 *Loop
	ports             []int
	n, max            int
	started, inflight int
	ready             int
	conns             []*Conn
}

func (d *dialer) Connected(c *Conn) error {
	c.Send([]byte("list-tube-used\r\n"), Expect{Op: opPing})
	return nil
}

func (d *dialer) Reply(c *Conn, e Expect, r *Reply) error {
	if r.Kind != KUsing || string(r.Name) != "default" {
		return unexpected("list-tube-used on a new connection (want USING default)", r)
	}
	d.ready++
	d.inflight--
	d.more()
	return nil
}

func (d *dialer) more() {
	for d.inflight < d.max && d.started < d.n {
		port := d.l.addr.Port
		if len(d.ports) > 0 {
			port = d.ports[d.started%len(d.ports)]
		}
		c, err := d.l.DialPort(d, d.started, port)
		if err != nil {
			d.l.Fail(fmt.Errorf("connection %d of %d: %w", d.started+1, d.n, err))
			return
		}
		d.conns = append(d.conns, c)
		d.started++
		d.inflight++
	}
}

// dialAll opens n served connections.
func dialAll(l *Loop, n int, timeout time.Duration) ([]*Conn, error) {
	return dialOver(l, nil, n, timeout)
}

// dialOver opens n served connections, connection i to
// 127.0.0.1:ports[i mod len(ports)] (with no ports, to the loop's).
func dialOver(l *Loop, ports []int, n int, timeout time.Duration) ([]*Conn, error) {
	d := &dialer{l: l, ports: ports, n: n, max: 256}
	d.more()
	err := l.Run(func() bool { return d.ready == d.n }, l.Now()+int64(timeout), fmt.Sprintf("%d connections (%d ready)", n, d.ready))
	if err != nil {
		return nil, fmt.Errorf("opening %d connections (%d ready): %w", n, d.ready, err)
	}
	return d.conns, nil
}

// dialRun opens the n connections of a round-trip or pipeline run: all to
// the server or, with rc.Spread, connection i to node i mod k of the
// cluster's k nodes, using and watching a tube of its own (spreadTube)
// with default ignored.
func dialRun(rc *RunCtx, n int) ([]*Conn, error) {
	if rc.Spread == 0 {
		return dialAll(rc.L, n, 60*time.Second)
	}
	ports := rc.Srv.ports()
	cs, err := dialOver(rc.L, ports, n, 60*time.Second)
	if err != nil {
		return nil, err
	}
	s := &tubeSetup{}
	for i, c := range cs {
		name := spreadTube(i, len(ports), rc.Spread)
		s.names = append(s.names, name)
		c.SetHandler(s)
		c.WriteString("use " + name + "\r\nwatch " + name + "\r\nignore default\r\n")
		c.Expect(Expect{Op: opUse})
		c.Expect(Expect{Op: opWatch})
		c.Expect(Expect{Op: opIgnore})
		s.left += 3
	}
	if err := rc.L.Run(func() bool { return s.left == 0 }, rc.L.Now()+int64(60*time.Second), "use/watch set-up"); err != nil {
		return nil, err
	}
	return cs, nil
}

// tubeSetup checks the replies to dialRun's set-up of each connection's
// tube (names, by the connection's Idx).
type tubeSetup struct {
	names []string
	left  int
}

func (s *tubeSetup) Connected(c *Conn) error { return nil }

func (s *tubeSetup) Reply(c *Conn, e Expect, r *Reply) error {
	name := s.names[c.Idx]
	switch {
	case e.Op == opUse && (r.Kind != KUsing || string(r.Name) != name):
		return unexpected("use "+name, r)
	case e.Op == opWatch && (r.Kind != KWatching || r.N != 2):
		return unexpected("watch "+name+" (want WATCHING 2)", r)
	case e.Op == opIgnore && (r.Kind != KWatching || r.N != 1):
		return unexpected("ignore default (want WATCHING 1)", r)
	}
	s.left--
	return nil
}

// spreadTube is the tube of connection i of a run spread over nodes nodes
// and groups data groups: a tube of its own, in the group (i + i/nodes)
// mod groups (counting from 0), so that each nodes×groups connections
// pair every node with every group once, whichever node leads which group.
func spreadTube(i, nodes, groups int) string {
	return tubeInGroup("bench.c"+strconv.Itoa(i), (i+i/nodes)%groups, groups)
}

// tubeInGroup is the first name prefix.K (K = 0, 1, ...) that --groups n
// places in data group g+1: a tube lives in group 1 + FNV-1a(name) mod n
// (route.GroupOfTube).
func tubeInGroup(prefix string, g, n int) string {
	for k := 0; ; k++ {
		name := prefix + "." + strconv.Itoa(k)
		h := fnv.New32a()
		_, _ = h.Write([]byte(name))
		if int(h.Sum32()%uint32(n)) == g {
			return name
		}
	}
}

// ------------------------------------------------------------- round trip

// rtWorker runs put → reserve → delete cycles, one command in flight per
// connection.
type rtWorker struct {
	l        *Loop
	led      *Ledger
	m        *meter
	own      bool // each connection has a tube of its own (ownTube)
	hdr      []byte
	scratch  []byte
	stopping bool
	busy     int
	cycles   int64
	hist     Hist
}

func newRT(l *Loop, m *meter, size int) *rtWorker {
	return &rtWorker{l: l, led: NewLedger(size), m: m, hdr: appendPut(nil, jobPri, 0, jobTTR, max(size, seqDigits))}
}

func (w *rtWorker) start(c *Conn) {
	w.busy++
	c.SetHandler(w)
	w.put(c)
}

// sendPut queues one put of a fresh ledger job in tube on c.
func sendPut(c *Conn, led *Ledger, hdr []byte, scratch []byte, tube int, op uint8) []byte {
	now := c.l.Time()
	seq := led.New(tube, now)
	c.Write(hdr)
	scratch = led.AppendHead(scratch[:0], seq)
	c.Write(scratch)
	if f := led.Filler(seq); len(f) >= 4096 {
		c.WriteRef(f)
	} else {
		c.Write(f)
	}
	c.WriteString("\r\n")
	c.Expect(Expect{Op: op, T0: now, Seq: seq})
	return scratch
}

func (w *rtWorker) put(c *Conn) {
	w.scratch = sendPut(c, w.led, w.hdr, w.scratch, ownTube(w.own, c), opPut)
}

// ownTube is the ledger's tube of the jobs c puts: c's own (its Idx) when
// each connection has a tube of its own (own), else 0 (all share default).
func ownTube(own bool, c *Conn) int {
	if own {
		return c.Idx
	}
	return 0
}

// reservedOwn records the reservation of job id on c in led and, when each
// connection has a tube of its own, checks that the job is from c's.
func reservedOwn(led *Ledger, own bool, c *Conn, r *Reply) (int, error) {
	seq, err := led.Reserved(r.ID, r.Body)
	if err == nil && own && led.Rec(seq).tube != int32(c.Idx) {
		err = fmt.Errorf("connection %d reserved job %d, put in connection %d's tube", c.Idx, r.ID, led.Rec(seq).tube)
	}
	return seq, err
}

func (w *rtWorker) Connected(c *Conn) error { return nil }

func (w *rtWorker) Reply(c *Conn, e Expect, r *Reply) error {
	now := w.l.Time()
	rec := w.m.active()
	switch e.Op {
	case opPut:
		if r.Kind != KInserted {
			return unexpected("put", r)
		}
		if err := w.led.Inserted(e.Seq, r.ID); err != nil {
			return err
		}
		c.Send([]byte("reserve\r\n"), Expect{Op: opReserve, T0: now})
	case opReserve:
		if r.Kind != KReserved {
			return unexpected("reserve", r)
		}
		seq, err := reservedOwn(w.led, w.own, c, r)
		if err != nil {
			return err
		}
		w.scratch = appendIDCmd(w.scratch[:0], "delete", r.ID)
		c.Send(w.scratch, Expect{Op: opDelete, T0: now, Seq: seq, ID: r.ID})
	case opDelete:
		if r.Kind != KDeleted {
			return unexpected("delete "+strconv.FormatUint(e.ID, 10), r)
		}
		if err := w.led.Deleted(e.Seq); err != nil {
			return err
		}
		if rec {
			w.cycles++
		}
		if w.stopping {
			w.busy--
		} else {
			w.put(c)
		}
	default:
		return fmt.Errorf("round trip: unexpected op %d", e.Op)
	}
	if rec {
		w.hist.Record(now - e.T0)
	}
	return nil
}

func runRoundTrip(rc *RunCtx, conns, size int, key string) (Metrics, error) {
	l, o := rc.L, rc.Opt
	cs, err := dialRun(rc, conns)
	if err != nil {
		return nil, err
	}
	m := newMeter(l, rc.Srv)
	w := newRT(l, m, size)
	w.own = rc.Spread > 0
	for _, c := range cs {
		w.start(c)
	}
	l.OnTick = windowTicker(l, m, o.Warmup, o.Duration, func() { w.stopping = true })
	err = l.Run(func() bool { return w.stopping && w.busy == 0 }, l.Now()+int64(o.Warmup+o.Duration+o.Drain), "round trips to finish")
	l.OnTick = nil
	if err != nil {
		return nil, err
	}
	if err := w.led.CheckAllDone(); err != nil {
		return nil, err
	}
	if err := checkStats(rc.Srv.Port, map[string]int64{
		"current-jobs-ready": 0, "current-jobs-reserved": 0, "total-jobs": rc.Srv.jobsBefore + int64(w.led.Count()),
	}); err != nil {
		return nil, err
	}
	mx := Metrics{"conns": float64(conns), "size": float64(size)}
	if err := m.fill(mx, key, float64(w.cycles), &w.hist); err != nil {
		return nil, err
	}
	mx[key+"mbps"] = mx[key+"rate"] * float64(size) / 1e6
	return mx, nil
}

// --------------------------------------------------------------- pipeline

type pipeWorker struct {
	l        *Loop
	led      *Ledger
	m        *meter
	window   int
	maxJobs  int
	hdr      []byte
	scratch  []byte
	phase    int // 1 puts, 2 reserve+delete
	stopping bool
	own      bool // each connection has a tube of its own (ownTube)
	resLeft  int  // reserves left to send, the sum of the connections' Aux
	inflight int
	ops      int64
	hist     Hist
}

func (w *pipeWorker) Connected(c *Conn) error { return nil }

// fill tops c's commands in flight up to the window. A connection's Aux
// counts the jobs it put, and then the reserves it has left to send: it
// reserves as many jobs as it put, so that with a tube of its own no
// reserve waits.
func (w *pipeWorker) fill(c *Conn) {
	if w.phase == 1 {
		for c.InFlight() < w.window && !w.stopping && w.led.Count() < w.maxJobs {
			w.scratch = sendPut(c, w.led, w.hdr, w.scratch, ownTube(w.own, c), opPut)
			c.Aux++
			w.inflight++
		}
		return
	}
	for c.InFlight() < w.window && c.Aux > 0 && !w.stopping {
		c.Send([]byte("reserve\r\n"), Expect{Op: opReserve, T0: w.l.Time()})
		c.Aux--
		w.resLeft--
		w.inflight++
	}
}

func (w *pipeWorker) Reply(c *Conn, e Expect, r *Reply) error {
	now := w.l.Time()
	rec := w.m.active()
	w.inflight--
	switch e.Op {
	case opPut:
		if r.Kind != KInserted {
			return unexpected("pipelined put", r)
		}
		if err := w.led.Inserted(e.Seq, r.ID); err != nil {
			return err
		}
		if rec {
			w.ops++
		}
	case opReserve:
		if r.Kind != KReserved {
			return unexpected("pipelined reserve", r)
		}
		seq, err := reservedOwn(w.led, w.own, c, r)
		if err != nil {
			return err
		}
		w.scratch = appendIDCmd(w.scratch[:0], "delete", r.ID)
		c.Send(w.scratch, Expect{Op: opDelete, T0: now, Seq: seq, ID: r.ID})
		w.inflight++
	case opDelete:
		if r.Kind != KDeleted {
			return unexpected("pipelined delete", r)
		}
		if err := w.led.Deleted(e.Seq); err != nil {
			return err
		}
		if rec {
			w.ops++
		}
	default:
		return fmt.Errorf("pipeline: unexpected op %d", e.Op)
	}
	if rec {
		w.hist.Record(now - e.T0)
	}
	w.fill(c)
	return nil
}

func runPipeline(rc *RunCtx, conns int) (Metrics, error) {
	l, o := rc.L, rc.Opt
	cs, err := dialRun(rc, conns)
	if err != nil {
		return nil, err
	}
	mx := Metrics{"conns": float64(conns), "window": float64(o.PipeWindow)}
	// Phase 1: pipelined puts for the window (or until -pipe-max jobs).
	m := newMeter(l, rc.Srv)
	w := &pipeWorker{l: l, led: NewLedger(o.Size), m: m, window: o.PipeWindow, maxJobs: o.PipeMax,
		hdr: appendPut(nil, jobPri, 0, jobTTR, max(o.Size, seqDigits)), phase: 1, own: rc.Spread > 0}
	for _, c := range cs {
		c.SetHandler(w)
		w.fill(c)
	}
	endWindow := windowTicker(l, m, o.Warmup, o.Duration, func() { w.stopping = true })
	l.OnTick = func() {
		// A server that puts half of -pipe-max jobs within the warm-up
		// would put them all before a window opened: the warm-up ends
		// there, and the second half is measured.
		if !m.on && 2*w.led.Count() >= w.maxJobs {
			m.start()
		}
		endWindow()
		if !w.stopping && w.led.Count() >= w.maxJobs && w.inflight == 0 {
			if !m.on {
				m.start()
			}
			m.stop()
			w.stopping = true
		}
	}
	err = l.Run(func() bool { return w.stopping && w.inflight == 0 }, l.Now()+int64(o.Warmup+o.Duration+o.Drain), "pipelined puts to finish")
	l.OnTick = nil
	if err != nil {
		return nil, err
	}
	if err := m.fill(mx, "put.", float64(w.ops), &w.hist); err != nil {
		return nil, err
	}
	mx["put.jobs"] = float64(w.led.Count())

	// Phase 2: pipelined reserve+delete of those jobs (no warmup; ends when
	// all are drained or after the window).
	m2 := newMeter(l, rc.Srv)
	w.m, w.phase, w.stopping, w.ops, w.hist = m2, 2, false, 0, Hist{}
	w.resLeft = w.led.Count()
	m2.start()
	for _, c := range cs {
		w.fill(c)
	}
	ends := l.Now() + int64(o.Duration)
	l.OnTick = func() {
		if !w.stopping && l.Time() >= ends {
			m2.stop()
			w.stopping = true
		}
	}
	err = l.Run(func() bool {
		if w.inflight == 0 && (w.stopping || w.resLeft == 0) {
			m2.stop()
			return true
		}
		return false
	}, ends+int64(o.Drain), "pipelined reserve/delete to finish")
	l.OnTick = nil
	if err != nil {
		return nil, err
	}
	left, err := w.led.CheckConsistent()
	if err != nil {
		return nil, err
	}
	if err := checkStats(rc.Srv.Port, map[string]int64{
		"current-jobs-ready": int64(left), "current-jobs-reserved": 0, "total-jobs": rc.Srv.jobsBefore + int64(w.led.Count()),
	}); err != nil {
		return nil, err
	}
	if err := m2.fill(mx, "drain.", float64(w.ops), &w.hist); err != nil {
		return nil, err
	}
	mx["drain.left"] = float64(left)
	return mx, nil
}

// ---------------------------------------------------------------- pub/sub

type pubsubCfg struct {
	producers, consumers, tubes int
	perPutUse                   bool // use <tube> before every put (many-tubes scenario)
	watchAll                    bool // consumers watch every tube (else 10 each)
}

type pubsub struct {
	cfg       pubsubCfg
	l         *Loop
	led       *Ledger
	m         *meter
	window    int
	backlog   int
	hdr       []byte
	scratch   []byte
	names     []string
	watch     [][]int32 // per consumer
	stopping  bool
	setupLeft int
	prodBusy  int // producer commands in flight
	delivered int
	parked    []*Conn
	rate      int64
	hist      Hist
	next      int
}

const (
	roleProducer = 1
	roleConsumer = 2
)

func (p *pubsub) Connected(c *Conn) error { return nil }

func (p *pubsub) produce(c *Conn) {
	cmds := 1
	if p.cfg.perPutUse {
		cmds = 2
	}
	for c.InFlight() < p.window*cmds && !p.stopping {
		if p.led.Count()-p.delivered >= p.backlog {
			if c.Aux2 == 0 {
				c.Aux2 = 1
				p.parked = append(p.parked, c)
			}
			return
		}
		tube := c.Aux
		if p.cfg.perPutUse {
			tube = p.next % p.cfg.tubes
			p.next++
			c.WriteString("use " + p.names[tube] + "\r\n")
			c.Expect(Expect{Op: opUse, Seq: tube})
			p.prodBusy++
		}
		p.scratch = sendPut(c, p.led, p.hdr, p.scratch, tube, opPut)
		p.prodBusy++
	}
}

func (p *pubsub) Reply(c *Conn, e Expect, r *Reply) error {
	now := p.l.Time()
	switch e.Op {
	case opUse:
		if r.Kind != KUsing || string(r.Name) != p.names[e.Seq] {
			return unexpected("use "+p.names[e.Seq], r)
		}
		if e.T0 < 0 { // set-up
			p.setupLeft--
		} else {
			p.prodBusy--
		}
	case opWatch:
		if r.Kind != KWatching {
			return unexpected("watch", r)
		}
		p.setupLeft--
	case opIgnore:
		if r.Kind != KWatching || r.N != uint64(len(p.watch[c.Aux])) {
			return unexpected(fmt.Sprintf("ignore default (want WATCHING %d)", len(p.watch[c.Aux])), r)
		}
		p.setupLeft--
	case opPut:
		if r.Kind != KInserted {
			return unexpected("put", r)
		}
		if err := p.led.Inserted(e.Seq, r.ID); err != nil {
			return err
		}
		p.prodBusy--
		p.produce(c)
	case opReserve:
		if r.Kind != KReserved {
			return unexpected("reserve", r)
		}
		seq, err := p.led.Reserved(r.ID, r.Body)
		if err != nil {
			return err
		}
		rec := p.led.Rec(seq)
		if !contains(p.watch[c.Aux], rec.tube) {
			return fmt.Errorf("job %d from tube %s delivered to consumer %d that does not watch it", r.ID, p.names[rec.tube], c.Aux)
		}
		p.delivered++
		if p.m.active() {
			p.rate++
			p.hist.Record(now - rec.t0)
		}
		p.scratch = appendIDCmd(p.scratch[:0], "delete", r.ID)
		c.Send(p.scratch, Expect{Op: opDelete, Seq: seq, ID: r.ID})
		c.Send([]byte("reserve\r\n"), Expect{Op: opReserve})
		for len(p.parked) > 0 && p.led.Count()-p.delivered < p.backlog {
			q := p.parked[len(p.parked)-1]
			p.parked = p.parked[:len(p.parked)-1]
			q.Aux2 = 0
			p.produce(q)
		}
	case opDelete:
		if r.Kind != KDeleted {
			return unexpected("delete", r)
		}
		return p.led.Deleted(e.Seq)
	default:
		return fmt.Errorf("pubsub: unexpected op %d", e.Op)
	}
	return nil
}

func contains(xs []int32, x int32) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func runPubSub(rc *RunCtx, cfg pubsubCfg) (Metrics, error) {
	l, o := rc.L, rc.Opt
	if cfg.tubes < 1 {
		cfg.tubes = 1
	}
	cs, err := dialAll(l, cfg.producers+cfg.consumers, 60*time.Second)
	if err != nil {
		return nil, err
	}
	m := newMeter(l, rc.Srv)
	backlog := o.Backlog
	if backlog == 0 {
		backlog = max(2*cfg.consumers, 64)
	}
	p := &pubsub{cfg: cfg, l: l, led: NewLedger(o.Size), m: m, window: o.ProdWindow, backlog: backlog,
		hdr: appendPut(nil, jobPri, 0, jobTTR, max(o.Size, seqDigits))}
	p.names = make([]string, cfg.tubes)
	for i := range p.names {
		p.names[i] = fmt.Sprintf("bench.t%05d", i)
	}
	// Set-up: producers use their tube, consumers watch theirs and ignore
	// default.
	prods, cons := cs[:cfg.producers], cs[cfg.producers:]
	for i, c := range prods {
		c.SetHandler(p)
		c.State, c.Aux = roleProducer, i%cfg.tubes
		c.WriteString("use " + p.names[c.Aux] + "\r\n")
		c.Expect(Expect{Op: opUse, Seq: c.Aux, T0: -1})
		p.setupLeft++
	}
	p.watch = make([][]int32, len(cons))
	for i, c := range cons {
		c.SetHandler(p)
		c.State, c.Aux = roleConsumer, i
		var ts []int32
		if cfg.watchAll {
			for t := 0; t < cfg.tubes; t++ {
				ts = append(ts, int32(t))
			}
		} else {
			for k := 0; k < 10; k++ {
				t := int32((10*i + k) % cfg.tubes)
				if !contains(ts, t) {
					ts = append(ts, t)
				}
			}
		}
		p.watch[i] = ts
		for _, t := range ts {
			c.WriteString("watch " + p.names[t] + "\r\n")
			c.Expect(Expect{Op: opWatch})
			p.setupLeft++
		}
		c.WriteString("ignore default\r\n")
		c.Expect(Expect{Op: opIgnore})
		p.setupLeft++
	}
	for t := 0; t < cfg.tubes; t++ {
		covered := false
		for _, ts := range p.watch {
			if contains(ts, int32(t)) {
				covered = true
				break
			}
		}
		if !covered {
			return nil, fmt.Errorf("pubsub set-up: tube %d has no consumer", t)
		}
	}
	if err := l.Run(func() bool { return p.setupLeft == 0 }, l.Now()+int64(60*time.Second), "use/watch set-up"); err != nil {
		return nil, err
	}
	// Run: consumers reserve; producers put.
	for _, c := range cons {
		c.Send([]byte("reserve\r\n"), Expect{Op: opReserve})
	}
	for _, c := range prods {
		p.produce(c)
	}
	l.OnTick = windowTicker(l, m, o.Warmup, o.Duration, func() { p.stopping = true })
	err = l.Run(func() bool { return p.stopping && p.prodBusy == 0 && p.led.nDel == p.led.Count() },
		l.Now()+int64(o.Warmup+o.Duration+o.Drain), "all jobs to be delivered and deleted")
	l.OnTick = nil
	if err != nil {
		return nil, err
	}
	if err := p.led.CheckAllDone(); err != nil {
		return nil, err
	}
	if err := checkStats(rc.Srv.Port, map[string]int64{
		"current-jobs-ready": 0, "current-jobs-reserved": 0, "total-jobs": int64(p.led.Count()),
	}); err != nil {
		return nil, err
	}
	mx := Metrics{"producers": float64(cfg.producers), "consumers": float64(cfg.consumers), "tubes": float64(cfg.tubes), "backlog": float64(backlog)}
	if err := m.fill(mx, "", float64(p.rate), &p.hist); err != nil {
		return nil, err
	}
	return mx, nil
}

// ------------------------------------------------------------------- idle

func runIdle(rc *RunCtx, n int) (Metrics, error) {
	l, o := rc.L, rc.Opt
	if lim := int(rc.Srv.NoFile) - fdMargin; rc.Srv.NoFile > 0 && n > lim {
		return nil, fmt.Errorf("%s allows only %d open files; %d idle connections do not fit", rc.Srv.Name, rc.Srv.NoFile, n)
	}
	rss0, err := rc.Srv.RSS()
	if err != nil {
		return nil, err
	}
	t0, c0, s0 := l.Now(), selfCPU(), rc.Srv.CPU()
	cs, err := dialAll(l, n, 60*time.Second)
	if err != nil {
		return nil, err
	}
	acc, accCli, accSrv := l.Now()-t0, selfCPU()-c0, rc.Srv.CPU()-s0
	// +1: the stats connection itself
	if err := waitStat(rc.Srv.Port, "current-connections", int64(n+1), 30*time.Second); err != nil {
		return nil, err
	}
	time.Sleep(300 * time.Millisecond)
	rss1, err := rc.Srv.RSS()
	if err != nil {
		return nil, err
	}
	// Round-trip latency on one more connection with all of them open.
	extra, err := dialAll(l, 1, 10*time.Second)
	if err != nil {
		return nil, err
	}
	m := newMeter(l, rc.Srv)
	w := newRT(l, m, o.Size)
	w.start(extra[0])
	dur := max(o.Duration/2, time.Second)
	l.OnTick = windowTicker(l, m, o.Warmup/2, dur, func() { w.stopping = true })
	err = l.Run(func() bool { return w.stopping && w.busy == 0 }, l.Now()+int64(o.Warmup+dur+o.Drain), "round trips with idle connections open")
	l.OnTick = nil
	if err != nil {
		return nil, err
	}
	if err := w.led.CheckAllDone(); err != nil {
		return nil, err
	}
	if len(cs) != n || l.Open() != n+1 {
		return nil, fmt.Errorf("%d of %d idle connections still open", l.Open()-1, n)
	}
	mx := Metrics{
		"conns":         float64(n),
		"accept_ms":     float64(acc) / 1e6,
		"accept_rate":   float64(n) / (float64(acc) / 1e9),
		"accept_cpu":    accCli / (float64(acc) / 1e9) * 100,
		"accept_srvcpu": accSrv / (float64(acc) / 1e9) * 100,
		"rss0_mib":      float64(rss0) / (1 << 20),
		"rss_mib":       float64(rss1) / (1 << 20),
		"rss_per_conn":  float64(rss1-rss0) / 1024 / float64(n),
	}
	if err := m.fill(mx, "", float64(w.cycles), &w.hist); err != nil {
		return nil, err
	}
	return mx, nil
}

// fdMargin is the number of descriptors kept free below the open-file limit
// (listening socket, epoll, stdio, stats connections, binlog files, ...).
const fdMargin = 300

// ----------------------------------------------------------------- fan-out

type fanout struct {
	l         *Loop
	led       *Ledger
	m         *meter
	n         int
	t0        int64
	inserted  int
	delivered int
	deleted   int
	hist      Hist
	scratch   []byte
}

func (f *fanout) Connected(c *Conn) error { return nil }

func (f *fanout) Reply(c *Conn, e Expect, r *Reply) error {
	now := f.l.Time()
	switch e.Op {
	case opPut:
		if r.Kind != KInserted {
			return unexpected("put", r)
		}
		f.inserted++
		return f.led.Inserted(e.Seq, r.ID)
	case opReserve:
		if r.Kind != KReserved {
			return unexpected("reserve", r)
		}
		seq, err := f.led.Reserved(r.ID, r.Body)
		if err != nil {
			return err
		}
		c.Aux, c.Aux2 = seq, int(r.ID)
		f.delivered++
		f.hist.Record(now - f.t0)
		if f.delivered == f.n {
			f.m.stop()
		}
	case opDelete:
		if r.Kind != KDeleted {
			return unexpected("delete", r)
		}
		f.deleted++
		return f.led.Deleted(e.Seq)
	default:
		return fmt.Errorf("fanout: unexpected op %d", e.Op)
	}
	return nil
}

func runFanout(rc *RunCtx, n int) (Metrics, error) {
	l, o := rc.L, rc.Opt
	cs, err := dialAll(l, n+1, 60*time.Second)
	if err != nil {
		return nil, err
	}
	prod, cons := cs[n], cs[:n]
	m := newMeter(l, rc.Srv)
	f := &fanout{l: l, led: NewLedger(o.Size), m: m, n: n}
	for _, c := range cs {
		c.SetHandler(f)
	}
	for _, c := range cons {
		c.Send([]byte("reserve\r\n"), Expect{Op: opReserve})
	}
	if err := l.Run(l.Idle, l.Now()+int64(30*time.Second), "reserve commands to be sent"); err != nil {
		return nil, err
	}
	if err := waitStat(rc.Srv.Port, "current-waiting", int64(n), 60*time.Second); err != nil {
		return nil, err
	}
	if f.delivered != 0 {
		return nil, fmt.Errorf("a reserve returned before any put")
	}
	// Go: all puts at once on one connection.
	f.t0 = l.Now()
	l.now = f.t0
	m.start()
	hdr := appendPut(nil, jobPri, 0, jobTTR, max(o.Size, seqDigits))
	for i := 0; i < n; i++ {
		f.scratch = sendPut(prod, f.led, hdr, f.scratch, 0, opPut)
	}
	if err := l.Run(func() bool { return f.delivered == n && f.inserted == n }, l.Now()+int64(60*time.Second+o.Drain),
		fmt.Sprintf("fan-out (%d/%d delivered)", f.delivered, n)); err != nil {
		return nil, fmt.Errorf("fan-out: %d of %d delivered, %d inserted: %w", f.delivered, n, f.inserted, err)
	}
	for _, c := range cons {
		c.Send(appendIDCmd(nil, "delete", uint64(c.Aux2)), Expect{Op: opDelete, Seq: c.Aux})
	}
	if err := l.Run(func() bool { return f.deleted == n }, l.Now()+int64(60*time.Second), "deletes"); err != nil {
		return nil, err
	}
	if err := f.led.CheckAllDone(); err != nil {
		return nil, err
	}
	if err := checkStats(rc.Srv.Port, map[string]int64{
		"current-jobs-ready": 0, "current-jobs-reserved": 0, "total-jobs": int64(n), "current-waiting": 0,
	}); err != nil {
		return nil, err
	}
	mx := Metrics{"conns": float64(n)}
	if err := m.fill(mx, "", float64(n), &f.hist); err != nil {
		return nil, err
	}
	mx["fanout_ms"] = mx["wall"] * 1e3
	return mx, nil
}

// ----------------------------------------------------------------- memory

// memJobSize is the body size of the memory scenario's jobs.
const memJobSize = 100

// runMemory queues n ready jobs with pipelined puts on four connections and
// reports the server's RSS growth per job, measured once they are all in.
func runMemory(rc *RunCtx, n int) (Metrics, error) {
	l := rc.L
	cs, err := dialAll(l, 4, 60*time.Second)
	if err != nil {
		return nil, err
	}
	rss0, err := rc.Srv.RSS()
	if err != nil {
		return nil, err
	}
	m := newMeter(l, rc.Srv)
	w := &pipeWorker{l: l, led: NewLedger(memJobSize), m: m, window: 64, maxJobs: n,
		hdr: appendPut(nil, jobPri, 0, jobTTR, memJobSize), phase: 1}
	m.start()
	for _, c := range cs {
		c.SetHandler(w)
		w.fill(c)
	}
	err = l.Run(func() bool { return w.led.Count() >= n && w.inflight == 0 }, l.Now()+int64(5*time.Minute), fmt.Sprintf("queueing %d jobs", n))
	m.stop()
	if err != nil {
		return nil, err
	}
	if err := checkStats(rc.Srv.Port, map[string]int64{"current-jobs-ready": int64(n)}); err != nil {
		return nil, err
	}
	time.Sleep(300 * time.Millisecond)
	rss1, err := rc.Srv.RSS()
	if err != nil {
		return nil, err
	}
	mx := Metrics{"jobs": float64(n), "rss_per_job": float64(rss1-rss0) / float64(n)}
	if err := m.fill(mx, "", float64(w.ops), &w.hist); err != nil {
		return nil, err
	}
	return mx, nil
}
