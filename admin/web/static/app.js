// beanpole's dashboard: draws the overview's charts from the server's last
// hour (/api/history), then refreshes the overview from /api/overview and
// adds each refresh to the charts; on every page, adds the operator's token to action
// forms (kept in this tab's sessionStorage, never in a cookie); on a tube
// page whose bodies need the token, fetches them with it.
"use strict";

const SPAN = 3600 * 1000; // the charts show at most the last hour
const MIN_SPAN = 10 * 1000; // and at least 10 s, on a server just started
const PERIOD = 2000;
// samples: the server's history (/api/history) then this page's own
// refreshes, oldest first, each {t, ready, reserved, delayed, buried,
// connections, waiting, puts, reserves, deletes}; the counters are
// cumulative.
const samples = [];

// fmtDur is the server's fmtDur: "42s", "2m50s", "1h5m".
function fmtDur(s) {
  s = Math.round(s);
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + (s % 60) + "s";
  return Math.floor(s / 3600) + "h" + Math.floor((s % 3600) / 60) + "m";
}

function rate(now, prev, get) {
  if (!prev) return null;
  const dt = (now.time_ms - prev.time_ms) / 1000;
  const d = get(now) - get(prev);
  return dt > 0 && d >= 0 ? d / dt : null;
}

// fmtRate is the server's fmtRate.
function fmtRate(r) { return r === null || r === undefined ? "–" : r < 10 ? r.toFixed(1) : Math.round(r).toString(); }

// fmtNum: 950, 21k, 1.5M.
function fmtNum(v) {
  if (v >= 1e6) return +(v / 1e6).toFixed(1) + "M";
  if (v >= 1e3) return +(v / 1e3).toFixed(1) + "k";
  return +v.toFixed(1) + "";
}

function cell(text) { const td = document.createElement("td"); td.textContent = text; return td; }

function sampleOf(o) {
  const s = o.server;
  return { t: o.time_ms, ready: s["current-jobs-ready"], reserved: s["current-jobs-reserved"],
    delayed: s["current-jobs-delayed"], buried: s["current-jobs-buried"], connections: s["current-connections"],
    waiting: s["current-waiting"], puts: s["cmd-put"], reserves: s["cmd-reserve"] + s["cmd-reserve-with-timeout"],
    deletes: s["cmd-delete"] };
}

function addSample(x) {
  if (samples.length && x.t <= samples[samples.length - 1].t) return;
  samples.push(x);
  while (samples.length && samples[0].t < x.t - SPAN) samples.shift();
}

// loadHistory fills samples with the server's last hour.
async function loadHistory() {
  try {
    const r = await fetch("/api/history", { cache: "no-store" });
    if (!r.ok) return;
    const h = await r.json();
    h.time_ms.forEach((t, i) => addSample({ t, ready: h.ready[i], reserved: h.reserved[i], delayed: h.delayed[i],
      buried: h.buried[i], connections: h.connections[i], waiting: h.waiting[i], puts: h.cmd_put[i],
      reserves: h.reserves[i], deletes: h.cmd_delete[i] }));
  } catch (e) { /* no history: the charts start from this page's refreshes */ }
}

function render(o) {
  addSample(sampleOf(o));
  for (const el of document.querySelectorAll("[data-stat]")) {
    const v = o.server[el.dataset.stat];
    el.textContent = el.dataset.fmt === "dur" ? fmtDur(v) : v;
  }
  // The cards' rates: over the last two samples, the history's last one
  // and this refresh on a page just opened.
  const [older, newer] = samples.length < 2 ? [null, null] : samples.slice(-2).map(x => ({ time_ms: x.t, x }));
  document.getElementById("put-rate").textContent = fmtRate(newer && rate(newer, older, s => s.x.puts));
  document.getElementById("delete-rate").textContent = fmtRate(newer && rate(newer, older, s => s.x.deletes));
  const body = document.querySelector("#tubes tbody");
  body.replaceChildren(...o.tubes.map(t => {
    const tr = document.createElement("tr");
    tr.dataset.tube = t.name;
    const name = document.createElement("td"), a = document.createElement("a");
    a.href = "/tube?name=" + encodeURIComponent(t.name);
    a.textContent = t.name;
    name.append(a);
    // The tube's rates come with it (the server keeps the readings they
    // are taken against), from the first answer on.
    tr.append(name, cell(t.ready), cell(t.delayed), cell(t.reserved), cell(t.buried), cell(t.waiting),
      cell(t.pause ? t.pause_time_left + "s left" : "no"), cell(t.ready ? fmtDur(t.oldest_ready_seconds) : "–"),
      cell(fmtRate(t.puts_per_sec)), cell(fmtRate(t.deletes_per_sec)));
    return tr;
  }));
  document.getElementById("tube-count").textContent = `${o.tubes.length} of ${o.tubes_total}, most jobs first`;
  const css = getComputedStyle(document.documentElement);
  const color = k => css.getPropertyValue("--" + k).trim();
  draw("chart-ready", [[color("ready"), series("ready", false)]]);
  draw("chart-depth", ["reserved", "delayed", "buried"].map(k => [color(k), series(k, false)]));
  draw("chart-rate", [[color("put"), series("puts", true)], [color("res"), series("reserves", true)],
    [color("del"), series("deletes", true)]]);
  draw("chart-conns", [[color("conns"), series("connections", false)], [color("waiting"), series("waiting", false)]]);
}

// series is [time, value] per sample, or per pair of samples for a rate.
function series(k, asRate) {
  const out = [];
  for (let i = asRate ? 1 : 0; i < samples.length; i++) {
    const s = samples[i];
    if (!asRate) { out.push([s.t, s[k]]); continue; }
    const p = samples[i - 1], dt = (s.t - p.t) / 1000, d = s[k] - p[k];
    if (dt > 0 && d >= 0) out.push([s.t, d / dt]);
  }
  return out;
}

// niceStep is 1, 2 or 5 times a power of ten, about a quarter of top.
function niceStep(top) {
  const raw = top / 4, p = Math.pow(10, Math.floor(Math.log10(raw)));
  return [1, 2, 5, 10].map(m => m * p).find(s => s >= raw);
}

const pad2 = n => String(n).padStart(2, "0");

// TICKS are the time axis's gridline spacings, in seconds.
const TICKS = [5, 10, 15, 30, 60, 120, 300, 600, 900, 1800];

// draw plots lines ([color, [[time, value]...]]) over the time the samples
// span (at most the last hour: the server holds no more; less on a server
// started since), with a time axis (at most 6 gridlines, on round times)
// and a value axis (4 or 5 gridlines). The canvas's data-samples is the
// most points a line has, data-span the seconds the time axis spans.
function draw(id, lines) {
  const c = document.getElementById(id);
  if (!c) return;
  const dpr = window.devicePixelRatio || 1, cw = c.clientWidth, ch = c.clientHeight;
  if (c.width !== Math.round(cw * dpr)) { c.width = Math.round(cw * dpr); c.height = Math.round(ch * dpr); }
  const g = c.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  const w = cw, h = ch, left = 44, right = 8, top0 = 8, bottom = 18;
  const pw = w - left - right, ph = h - top0 - bottom;
  g.clearRect(0, 0, w, h);
  const end = samples.length ? samples[samples.length - 1].t : Date.now();
  const span = Math.min(SPAN, Math.max(MIN_SPAN, samples.length ? end - samples[0].t : 0)), start = end - span;
  const x = t => left + pw * (t - start) / span;
  const max = Math.max(0, ...lines.flatMap(([, v]) => v.map(p => p[1])));
  const step = max > 0 ? niceStep(max) : 1, top = Math.max(step, Math.ceil(max / step) * step);
  const y = v => top0 + ph - ph * v / top;
  g.font = "11px system-ui, sans-serif";
  g.lineWidth = 1;
  g.strokeStyle = "#e6e9ef";
  g.fillStyle = "#6b7385";
  g.textAlign = "right"; g.textBaseline = "middle";
  for (let v = 0; v <= top + step / 2; v += step) {
    g.beginPath(); g.moveTo(left, Math.round(y(v)) + .5); g.lineTo(w - right, Math.round(y(v)) + .5); g.stroke();
    g.fillText(fmtNum(v), left - 4, y(v));
  }
  g.textAlign = "center"; g.textBaseline = "top";
  const tick = 1000 * (TICKS.find(s => span / (1000 * s) <= 6) || 1800);
  for (let t = Math.ceil(start / tick) * tick; t <= end; t += tick) {
    g.beginPath(); g.moveTo(Math.round(x(t)) + .5, top0); g.lineTo(Math.round(x(t)) + .5, top0 + ph); g.stroke();
    const d = new Date(t);
    g.fillText(pad2(d.getHours()) + ":" + pad2(d.getMinutes()) + (tick < 60000 ? ":" + pad2(d.getSeconds()) : ""), x(t), top0 + ph + 4);
  }
  g.lineWidth = 1.5;
  for (const [color, v] of lines) {
    g.strokeStyle = color || "#333";
    g.beginPath();
    v.forEach(([t, val], i) => i ? g.lineTo(x(t), y(val)) : g.moveTo(x(t), y(val)));
    g.stroke();
  }
  c.dataset.samples = Math.max(0, ...lines.map(([, v]) => v.length));
  c.dataset.span = Math.round(span / 1000);
  for (const el of document.querySelectorAll(".since")) el.textContent = fmtDur(span / 1000);
}

async function refresh() {
  try {
    const r = await fetch("/api/overview", { cache: "no-store" });
    if (r.ok) render(await r.json());
  } catch (e) { /* the server may be restarting: try again next time */ }
}

function tokenStatus() {
  const el = document.getElementById("token-status");
  if (!el) return;
  el.textContent = sessionStorage.getItem("beanpole-token") ? "token set · " : "";
  if (sessionStorage.getItem("beanpole-token")) {
    const a = document.createElement("a");
    a.href = "#"; a.textContent = "forget token";
    a.onclick = (e) => { e.preventDefault(); sessionStorage.removeItem("beanpole-token"); tokenStatus(); };
    el.append(a);
  }
}

// askToken returns the token, asking for it once per tab.
function askToken() {
  let tok = sessionStorage.getItem("beanpole-token");
  if (!tok) {
    tok = prompt("The dashboard's token (from --http-token-file):");
    if (!tok) return null;
    sessionStorage.setItem("beanpole-token", tok);
    tokenStatus();
  }
  return tok;
}

// showBodies fills each sealed body ([data-job]) from /api/jobs/{id},
// which wants the token; a list's cells show the start of it only.
async function showBodies(tok) {
  const note = document.getElementById("bodies-note");
  for (const el of document.querySelectorAll("[data-job]")) {
    let r;
    try {
      r = await fetch("/api/jobs/" + encodeURIComponent(el.dataset.job), { cache: "no-store", headers: { Authorization: "Bearer " + tok } });
    } catch (e) { return; }
    if (r.status === 403 || r.status === 401) {
      sessionStorage.removeItem("beanpole-token");
      tokenStatus();
      if (note) note.textContent = "Job bodies need the token: that one was refused.";
      return;
    }
    if (r.status === 429) {
      if (note) note.textContent = "Too many wrong tokens from this address: try again in " + r.headers.get("Retry-After") + " s.";
      return;
    }
    if (!r.ok) { el.textContent = "gone"; continue; }
    const b = await r.json();
    let text = b.text;
    if (el.tagName === "CODE" && text.length > 120) { text = text.slice(0, 120); b.truncated = true; }
    el.textContent = text + (b.truncated ? " … (" + b.size + " bytes in all)" : "") + (b.hex ? " (binary, as hex)" : "");
    el.classList.remove("sealed");
    el.classList.toggle("hex", b.hex);
  }
  if (note) note.remove();
}

// Every action form carries the token as a field, filled in at submit.
document.addEventListener("submit", (e) => {
  const f = e.target;
  if (f.method !== "post") return;
  if (f.dataset.confirm && !confirm(f.dataset.confirm)) { e.preventDefault(); return; }
  const tok = askToken();
  if (!tok) { e.preventDefault(); return; }
  let input = f.querySelector("input[name=token]");
  if (!input) {
    input = document.createElement("input");
    input.type = "hidden"; input.name = "token";
    f.append(input);
  }
  input.value = tok;
});

document.addEventListener("DOMContentLoaded", () => {
  tokenStatus();
  if (document.getElementById("tubes")) {
    loadHistory().then(() => { refresh(); setInterval(refresh, PERIOD); });
  }
  const show = document.getElementById("show-bodies");
  if (show) {
    show.onclick = () => { const tok = askToken(); if (tok) showBodies(tok); };
    const tok = sessionStorage.getItem("beanpole-token");
    if (tok) showBodies(tok);
  }
});
