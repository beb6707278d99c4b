// beanpole's dashboard: refreshes the overview from /api/overview and
// draws its charts; on every page, adds the operator's token to action
// forms (kept in this tab's sessionStorage, never in a cookie); on a tube
// page whose bodies need the token, fetches them with it.
"use strict";

const HISTORY = 150; // samples: 5 minutes at one every 2 s
const PERIOD = 2000;
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

function fmtRate(r) { return r === null ? "–" : r < 10 ? r.toFixed(1) : Math.round(r).toString(); }

function cell(text) { const td = document.createElement("td"); td.textContent = text; return td; }

function render(o) {
  const prev = samples[samples.length - 1];
  samples.push(o);
  if (samples.length > HISTORY) samples.shift();
  for (const el of document.querySelectorAll("[data-stat]")) {
    const v = o.server[el.dataset.stat];
    el.textContent = el.dataset.fmt === "dur" ? fmtDur(v) : v;
  }
  document.getElementById("put-rate").textContent = fmtRate(rate(o, prev, s => s.server["cmd-put"]));
  document.getElementById("delete-rate").textContent = fmtRate(rate(o, prev, s => s.server["cmd-delete"]));
  const before = new Map(prev ? prev.tubes.map(t => [t.name, t]) : []);
  const body = document.querySelector("#tubes tbody");
  body.replaceChildren(...o.tubes.map(t => {
    const tr = document.createElement("tr");
    tr.dataset.tube = t.name;
    const name = document.createElement("td"), a = document.createElement("a");
    a.href = "/tube?name=" + encodeURIComponent(t.name);
    a.textContent = t.name;
    name.append(a);
    const p = before.get(t.name);
    const pair = p ? { time_ms: prev.time_ms, t: p } : null;
    const tr8 = (get) => fmtRate(pair ? rate({ time_ms: o.time_ms, t }, pair, x => get(x.t)) : null);
    tr.append(name, cell(t.ready), cell(t.delayed), cell(t.reserved), cell(t.buried), cell(t.waiting),
      cell(t.pause ? t.pause_time_left + "s left" : "no"), cell(t.ready ? fmtDur(t.oldest_ready_seconds) : "–"),
      cell(tr8(x => x.total_jobs)), cell(tr8(x => x.cmd_delete)));
    return tr;
  }));
  document.getElementById("tube-count").textContent = `${o.tubes.length} of ${o.tubes_total}, most jobs first`;
  draw("chart-rate", [
    [getComputedStyle(document.documentElement).getPropertyValue("--put"), series(s => s.server["cmd-put"], true)],
    [getComputedStyle(document.documentElement).getPropertyValue("--del"), series(s => s.server["cmd-delete"], true)],
  ]);
  const css = getComputedStyle(document.documentElement);
  draw("chart-depth", ["ready", "reserved", "delayed", "buried"].map(k =>
    [css.getPropertyValue("--" + k), series(s => s.server["current-jobs-" + k], false)]));
}

// series is one value per sample, or per pair of samples for a rate.
function series(get, asRate) {
  const out = [];
  for (let i = asRate ? 1 : 0; i < samples.length; i++) {
    out.push(asRate ? rate(samples[i], samples[i - 1], get) ?? 0 : get(samples[i]));
  }
  return out;
}

function draw(id, lines) {
  const c = document.getElementById(id);
  if (!c) return;
  const g = c.getContext("2d"), w = c.width, h = c.height, pad = 4, left = 44;
  g.clearRect(0, 0, w, h);
  const top = Math.max(1, ...lines.flatMap(([, v]) => v));
  g.fillStyle = "#6b7385";
  g.font = "11px system-ui, sans-serif";
  g.fillText(fmtRate(top), 2, 12);
  g.fillText("0", 2, h - pad);
  g.strokeStyle = "#dde1e8";
  g.beginPath(); g.moveTo(left, h - pad); g.lineTo(w, h - pad); g.stroke();
  for (const [color, v] of lines) {
    g.strokeStyle = color.trim() || "#333";
    g.lineWidth = 1.5;
    g.beginPath();
    v.forEach((y, i) => {
      const x = left + (w - left) * (HISTORY - v.length + i) / (HISTORY - 1);
      const yy = h - pad - (h - 2 * pad) * y / top;
      i ? g.lineTo(x, yy) : g.moveTo(x, yy);
    });
    g.stroke();
  }
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
    refresh();
    setInterval(refresh, PERIOD);
  }
  const show = document.getElementById("show-bodies");
  if (show) {
    show.onclick = () => { const tok = askToken(); if (tok) showBodies(tok); };
    const tok = sessionStorage.getItem("beanpole-token");
    if (tok) showBodies(tok);
  }
});
