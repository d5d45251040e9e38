// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Optional part (target ax::http): never included by the core headers. Standard library only.
#include <string_view>

namespace ax::http {

/// The Content-Type MetricsServer serves dashboard_html with.
inline constexpr const char* dashboard_content_type = "text/html; charset=utf-8";

/// The live dashboard MetricsServer serves at `GET /`: one self-contained page (inline HTML, CSS
/// and JavaScript; no CDN, fonts or images, nothing fetched but `snapshot.json` from the same
/// server, relative to the page) that polls `snapshot.json` every second and shows the queue per
/// priority with the oldest task's age, workers (current, target, busy, idle), the controller's
/// target and reason, totals, the 30 one-second slots as small SVG charts (incoming, completed,
/// failed, rejected, average duration, queue length), dead letters, the groups and breakers
/// table, and queue-wait / run-time p50 and p99 estimated from the histograms (linear
/// interpolation inside a bucket, as Prometheus' histogram_quantile does).
///
/// Elements carrying live values have stable ids (`workers-current`, `totals-succeeded`,
/// `chart-completed`, `groups-body`, ...) for tests and scrapers; `status` reads "live" after a
/// successful refresh and "error: ..." after a failed one.
inline constexpr std::string_view dashboard_html = R"AXDASHBOARD(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ax scheduler</title>
<style>
  :root { --fg: #1d2330; --muted: #667085; --line: #d9dee7; --card: #ffffff; --bg: #f3f5f9;
          --accent: #2f6fde; --ok: #1f9d55; --bad: #d64545; --warn: #d98a00; }
  * { box-sizing: border-box; }
  body { margin: 0; padding: 16px 20px; font: 14px/1.35 system-ui, -apple-system, "Segoe UI",
         Roboto, "Helvetica Neue", Arial, sans-serif; color: var(--fg); background: var(--bg); }
  header { display: flex; align-items: baseline; gap: 16px; margin-bottom: 12px; }
  h1 { font-size: 20px; margin: 0; }
  h2 { font-size: 13px; margin: 0 0 8px; color: var(--muted); text-transform: uppercase;
       letter-spacing: .04em; }
  #status { font-size: 12px; padding: 2px 8px; border-radius: 10px; background: #e7ecf5; }
  #status.live { background: #dcf3e5; color: var(--ok); }
  #status.error { background: #fbe2e2; color: var(--bad); }
  #updated { color: var(--muted); font-size: 12px; }
  .grid { display: grid; grid-template-columns: repeat(4, minmax(0, 1fr)); gap: 12px; }
  .card { background: var(--card); border: 1px solid var(--line); border-radius: 8px;
          padding: 12px 14px; }
  .wide { grid-column: span 2; }
  .full { grid-column: 1 / -1; }
  .kv { display: grid; grid-template-columns: auto 1fr; gap: 2px 12px; }
  .kv span:nth-child(odd) { color: var(--muted); }
  .kv span:nth-child(even) { text-align: right; font-variant-numeric: tabular-nums;
                             font-weight: 600; }
  .big { font-size: 26px; font-weight: 650; font-variant-numeric: tabular-nums; }
  .sub { color: var(--muted); font-size: 12px; }
  .charts { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 12px; }
  .chart h3 { font-size: 13px; margin: 0; display: flex; justify-content: space-between; }
  .chart h3 span { font-variant-numeric: tabular-nums; color: var(--muted); font-weight: 500; }
  .chart svg { width: 100%; height: 90px; display: block; margin-top: 4px; }
  table { width: 100%; border-collapse: collapse; font-variant-numeric: tabular-nums; }
  th, td { text-align: right; padding: 4px 8px; border-bottom: 1px solid var(--line); }
  th:first-child, td:first-child { text-align: left; }
  th { color: var(--muted); font-weight: 500; }
  .b-closed { color: var(--ok); } .b-open { color: var(--bad); font-weight: 700; }
  .b-half_open { color: var(--warn); font-weight: 700; }
  .none { color: var(--muted); font-style: italic; }
</style>
</head>
<body>
<header>
  <h1>ax scheduler</h1>
  <span id="status">loading</span>
  <span id="updated"></span>
</header>

<div class="grid">
  <section class="card">
    <h2>Queue</h2>
    <div class="big" id="queue-total">–</div>
    <div class="sub">of <span id="queue-capacity">–</span> slots</div>
    <div class="kv" style="margin-top:8px">
      <span>high</span><span id="queue-high">–</span>
      <span>normal</span><span id="queue-normal">–</span>
      <span>low</span><span id="queue-low">–</span>
      <span>oldest high</span><span id="oldest-high">–</span>
      <span>oldest normal</span><span id="oldest-normal">–</span>
      <span>oldest low</span><span id="oldest-low">–</span>
      <span>waiting retry</span><span id="waiting-retry">–</span>
    </div>
  </section>
  <section class="card">
    <h2>Workers</h2>
    <div class="big"><span id="workers-current">–</span>
      <span class="sub">current / target <span id="workers-target">–</span></span></div>
    <div class="kv" style="margin-top:8px">
      <span>busy</span><span id="workers-busy">–</span>
      <span>idle</span><span id="workers-idle">–</span>
      <span>peak</span><span id="workers-peak">–</span>
      <span>orphans</span><span id="workers-orphans">–</span>
      <span>CPU used</span><span id="cpu-utilization">–</span>
    </div>
  </section>
  <section class="card">
    <h2>Controller</h2>
    <div class="big" id="controller-target">–</div>
    <div class="sub">target, policy <span id="controller-policy">–</span></div>
    <div style="margin-top:8px"><b id="controller-reason">–</b>:
      <span id="controller-reason-text">–</span></div>
    <div class="kv" style="margin-top:8px">
      <span>rounds</span><span id="controller-rounds">–</span>
      <span>changes</span><span id="controller-changes">–</span>
      <span>forecast /s</span><span id="controller-forecast">–</span>
    </div>
  </section>
  <section class="card">
    <h2>Outcomes</h2>
    <div class="kv">
      <span>submitted</span><span id="totals-submitted">–</span>
      <span>succeeded</span><span id="totals-succeeded">–</span>
      <span>failed attempts</span><span id="totals-attempts-failed">–</span>
      <span>retries</span><span id="totals-retries">–</span>
      <span>timeouts</span><span id="totals-timeouts">–</span>
      <span>rejected</span><span id="totals-rejected">–</span>
      <span>cancelled</span><span id="totals-cancelled">–</span>
      <span>dead-lettered</span><span id="totals-dead-lettered">–</span>
      <span>dead letters held</span><span id="dead-letters">–</span>
    </div>
  </section>

  <section class="card wide">
    <h2>Latency (estimated from histograms)</h2>
    <table>
      <thead><tr><th></th><th>p50</th><th>p99</th><th>count</th><th>mean</th></tr></thead>
      <tbody>
        <tr><td>run time</td><td id="run-p50">–</td><td id="run-p99">–</td>
          <td id="run-count">–</td><td id="run-mean">–</td></tr>
        <tr><td>queue wait</td><td id="wait-p50">–</td><td id="wait-p99">–</td>
          <td id="wait-count">–</td><td id="wait-mean">–</td></tr>
      </tbody>
    </table>
  </section>
  <section class="card wide">
    <h2>Rates over the window</h2>
    <div class="kv">
      <span>incoming /s</span><span id="rate-incoming">–</span>
      <span>drained /s</span><span id="rate-drain">–</span>
      <span>mean duration</span><span id="average-duration">–</span>
      <span>completed in window</span><span id="window-completed">–</span>
      <span>failed in window</span><span id="window-failed">–</span>
    </div>
  </section>

  <section class="card full">
    <h2>Last <span id="slot-count">30</span> seconds (one bar per second, newest right)</h2>
    <div class="charts">
      <div class="chart"><h3>incoming <span id="chart-incoming-last">–</span></h3>
        <svg id="chart-incoming" viewBox="0 0 300 90" preserveAspectRatio="none"></svg></div>
      <div class="chart"><h3>completed <span id="chart-completed-last">–</span></h3>
        <svg id="chart-completed" viewBox="0 0 300 90" preserveAspectRatio="none"></svg></div>
      <div class="chart"><h3>failed <span id="chart-failed-last">–</span></h3>
        <svg id="chart-failed" viewBox="0 0 300 90" preserveAspectRatio="none"></svg></div>
      <div class="chart"><h3>rejected <span id="chart-rejected-last">–</span></h3>
        <svg id="chart-rejected" viewBox="0 0 300 90" preserveAspectRatio="none"></svg></div>
      <div class="chart"><h3>average duration <span id="chart-duration-last">–</span></h3>
        <svg id="chart-duration" viewBox="0 0 300 90" preserveAspectRatio="none"></svg></div>
      <div class="chart"><h3>queue length <span id="chart-queue-last">–</span></h3>
        <svg id="chart-queue" viewBox="0 0 300 90" preserveAspectRatio="none"></svg></div>
    </div>
  </section>

  <section class="card full">
    <h2>Groups and breakers</h2>
    <table>
      <thead><tr><th>group</th><th>limit</th><th>active</th><th>waiting</th><th>breaker</th>
        <th>recent attempts</th><th>recent failures</th></tr></thead>
      <tbody id="groups-body"><tr><td class="none" colspan="7">no groups</td></tr></tbody>
    </table>
  </section>

  <section class="card full" id="extra" hidden>
    <h2>Extra (MetricsServerOptions::extra_json)</h2>
    <div id="extra-body"></div>
  </section>
</div>

<script>
"use strict";
const SVG = "http://www.w3.org/2000/svg";

function el(id) { return document.getElementById(id); }
function set(id, text) { const e = el(id); if (e) e.textContent = text; }
function num(n) {
  if (typeof n !== "number" || !isFinite(n)) return "–";
  if (Number.isInteger(n)) return n.toLocaleString("en-US");
  return n.toFixed(Math.abs(n) < 10 ? 2 : 1);
}
function dur(s) {
  if (typeof s !== "number" || !isFinite(s)) return "–";
  if (s === 0) return "0";
  if (s < 1e-3) return (s * 1e6).toFixed(0) + " µs";
  if (s < 1) return (s * 1e3).toFixed(s < 0.01 ? 2 : 1) + " ms";
  return s.toFixed(2) + " s";
}

// Prometheus' histogram_quantile over per-bucket counts: find the bucket holding rank q*count
// and interpolate linearly inside it (the first bucket starts at 0; a rank in +Inf answers the
// last finite bound). null without observations.
function quantile(h, q) {
  if (!h || !h.count) return null;
  const bounds = h.upper_bounds_s, buckets = h.buckets;
  const rank = q * h.count;
  let cum = 0;
  for (let i = 0; i < buckets.length; ++i) {
    const prev = cum;
    cum += buckets[i];
    if (cum >= rank && buckets[i] > 0) {
      if (i >= bounds.length) return bounds[bounds.length - 1];
      const lo = i === 0 ? 0 : bounds[i - 1];
      return lo + (bounds[i] - lo) * ((rank - prev) / buckets[i]);
    }
  }
  return bounds[bounds.length - 1];
}

function bars(id, values, color, fmt) {
  const svg = el(id);
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const n = Math.max(values.length, 1), w = 300 / n, h = 90;
  const max = Math.max(...values, 0);
  const base = document.createElementNS(SVG, "line");
  base.setAttribute("x1", "0"); base.setAttribute("x2", "300");
  base.setAttribute("y1", String(h - 0.5)); base.setAttribute("y2", String(h - 0.5));
  base.setAttribute("stroke", "#d9dee7");
  svg.appendChild(base);
  values.forEach((v, i) => {
    const bh = max > 0 ? (v / max) * (h - 4) : 0;
    const r = document.createElementNS(SVG, "rect");
    r.setAttribute("x", (i * w + 0.5).toFixed(2));
    r.setAttribute("width", Math.max(w - 1, 0.5).toFixed(2));
    r.setAttribute("y", (h - bh).toFixed(2));
    r.setAttribute("height", bh.toFixed(2));
    r.setAttribute("fill", color);
    const t = document.createElementNS(SVG, "title");
    t.textContent = fmt(v);
    r.appendChild(t);
    svg.appendChild(r);
  });
  svg.setAttribute("data-max", String(max));
  set(id + "-last", fmt(values.length ? values[values.length - 1] : 0) + "  (max " + fmt(max) + ")");
}

function render(m) {
  const pr = ["high", "normal", "low"];
  set("queue-total", num(m.queue_length_total));
  set("queue-capacity", num(m.queue_capacity));
  for (const p of pr) {
    set("queue-" + p, num(m.queue_length[p]));
    set("oldest-" + p, dur(m.oldest_queued_age_s[p]));
  }
  set("waiting-retry", num(m.waiting_retry));

  const w = m.workers;
  set("workers-current", num(w.current));
  set("workers-target", num(w.target));
  set("workers-busy", num(w.busy));
  set("workers-idle", num(w.idle));
  set("workers-peak", num(w.peak));
  set("workers-orphans", num(w.orphans));
  set("cpu-utilization", (m.cpu_utilization * 100).toFixed(0) + " %");

  const c = m.controller;
  set("controller-target", num(c.target));
  set("controller-policy", c.policy || "–");
  set("controller-reason", c.reason);
  set("controller-reason-text", c.reason_text);
  set("controller-rounds", num(c.rounds));
  set("controller-changes", num(c.changes));
  set("controller-forecast", num(c.forecast_rate));

  const t = m.totals;
  set("totals-submitted", num(t.submitted));
  set("totals-succeeded", num(t.succeeded));
  set("totals-attempts-failed", num(t.attempts_failed));
  set("totals-retries", num(t.retries));
  set("totals-timeouts", num(t.timeouts));
  set("totals-rejected", num(t.rejected));
  set("totals-cancelled", num(t.cancelled));
  set("totals-dead-lettered", num(t.dead_lettered));
  set("dead-letters", num(m.dead_letters));

  for (const [key, h] of [["run", m.run_time], ["wait", m.queue_wait]]) {
    const p50 = quantile(h, 0.5), p99 = quantile(h, 0.99);
    set(key + "-p50", p50 === null ? "no data" : dur(p50));
    set(key + "-p99", p99 === null ? "no data" : dur(p99));
    set(key + "-count", num(h.count));
    set(key + "-mean", h.count ? dur(h.sum_s / h.count) : "no data");
  }

  set("rate-incoming", num(m.incoming_rate));
  set("rate-drain", num(m.drain_rate));
  set("average-duration", dur(m.average_duration_s));
  const s = m.slots;
  set("slot-count", String(s.length));
  set("window-completed", num(s.reduce((a, x) => a + x.completed, 0)));
  set("window-failed", num(s.reduce((a, x) => a + x.failed, 0)));
  bars("chart-incoming", s.map(x => x.incoming), "#2f6fde", num);
  bars("chart-completed", s.map(x => x.completed), "#1f9d55", num);
  bars("chart-failed", s.map(x => x.failed), "#d64545", num);
  bars("chart-rejected", s.map(x => x.rejected), "#d98a00", num);
  bars("chart-duration", s.map(x => x.average_duration_s), "#7a52c7", dur);
  bars("chart-queue", s.map(x => x.average_queue_length), "#4b8b9b", num);

  const body = el("groups-body");
  while (body.firstChild) body.removeChild(body.firstChild);
  if (!m.groups.length) {
    const tr = body.insertRow(), td = tr.insertCell();
    td.colSpan = 7; td.className = "none"; td.textContent = "no groups";
  }
  for (const g of m.groups) {
    const tr = body.insertRow();
    tr.id = "group-" + g.id;
    const cells = [g.name, g.limit ? num(g.limit) : "none", num(g.active), num(g.waiting),
                   g.breaker_enabled ? g.breaker : "off", num(g.recent_attempts),
                   num(g.recent_failures)];
    cells.forEach((v, i) => {
      const td = tr.insertCell();
      td.textContent = v;
      if (i === 4 && g.breaker_enabled) td.className = "b-" + g.breaker;
    });
  }
}

// The snapshot's optional "extra" object (MetricsServerOptions::extra_json, e.g. an ax::pg node's
// stats): its scalar members in a first table, then one key / value table per member object,
// and below it one small table per object nested in that (an object of objects, such as nodes
// by id, as one row per member); deeper levels are shown as JSON text. A number under a key
// ending in "_total" also shows its rate per second since the previous poll.
let extraPrev = null;
const isObj = v => v !== null && typeof v === "object" && !Array.isArray(v);
function renderExtra(x) {
  const section = el("extra"), body = el("extra-body");
  if (!isObj(x)) { section.hidden = true; extraPrev = null; return; }
  section.hidden = false;
  const now = performance.now(), prev = extraPrev;
  extraPrev = { t: now, values: {} };
  while (body.firstChild) body.removeChild(body.firstChild);
  const show = (path, k, v) => {
    if (typeof v === "number") {
      extraPrev.values[path] = v;
      let text = num(v);
      if (k.endsWith("_total") && prev && typeof prev.values[path] === "number" && now > prev.t)
        text += "  (" + num((v - prev.values[path]) * 1000 / (now - prev.t)) + " /s)";
      return text;
    }
    if (v === null || v === undefined) return "–";
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  };
  const table = (title, id) => {
    const h = document.createElement("h3");
    h.textContent = title;
    body.appendChild(h);
    const t = document.createElement("table");
    t.id = id;
    body.appendChild(t);
    return t;
  };
  const kv = (title, id, entries, path) => {
    const t = table(title, id);
    if (!entries.length) {
      const td = t.insertRow().insertCell();
      td.className = "none"; td.textContent = "none";
    }
    for (const [k, v] of entries) {
      const tr = t.insertRow();
      tr.insertCell().textContent = k;
      tr.insertCell().textContent = show(path + "." + k, k, v);
    }
  };
  const rows = (title, id, obj, path) => {
    const t = table(title, id);
    const cols = [...new Set(Object.values(obj).flatMap(v => Object.keys(v)))];
    const head = t.createTHead().insertRow();
    for (const c of ["", ...cols]) {
      const th = document.createElement("th");
      th.textContent = c;
      head.appendChild(th);
    }
    for (const [k, v] of Object.entries(obj)) {
      const tr = t.insertRow();
      tr.insertCell().textContent = k;
      for (const c of cols) tr.insertCell().textContent = show(path + "." + k + "." + c, c, v[c]);
    }
  };
  const top = Object.entries(x);
  const scalars = top.filter(([, v]) => !isObj(v));
  if (scalars.length) kv("values", "extra-values", scalars, "");
  for (const [k, v] of top.filter(([, v]) => isObj(v))) {
    const inner = Object.entries(v);
    kv(k, "extra-" + k, inner.filter(([, y]) => !isObj(y)), k);
    for (const [k2, v2] of inner.filter(([, y]) => isObj(y))) {
      const vals = Object.values(v2);
      if (vals.length && vals.every(isObj))
        rows(k + ": " + k2, "extra-" + k + "-" + k2, v2, k + "." + k2);
      else
        kv(k + ": " + k2, "extra-" + k + "-" + k2, Object.entries(v2), k + "." + k2);
    }
  }
}

async function refresh() {
  const st = el("status");
  try {
    const r = await fetch("snapshot.json", { cache: "no-store" });
    if (!r.ok) throw new Error("HTTP " + r.status);
    const m = await r.json();
    render(m);
    renderExtra(m.extra);
    st.textContent = "live"; st.className = "live";
    set("updated", "updated " + new Date().toLocaleTimeString("en-GB"));
  } catch (e) {
    st.textContent = "error: " + e.message; st.className = "error";
  }
}
refresh();
setInterval(refresh, 1000);
</script>
</body>
</html>
)AXDASHBOARD";

} // namespace ax::http
