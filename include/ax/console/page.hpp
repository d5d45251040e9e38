// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The cluster console's page (include/ax/console/console.hpp serves it): one self-contained
// HTML document, its script and style inline, nothing fetched but the console's own JSON API
// (relative URLs, so it works under any base path). Every string from the database is put in
// the DOM as text (textContent, createTextNode), never parsed as HTML: a kind, payload, error,
// tag or node name holding markup shows as those characters. Charts are drawn on a canvas.
// The token comes from the address's fragment (#token=..., never sent to a server), is kept in
// sessionStorage and the fragment is stripped at once. {{NONCE}} is replaced by the server with
// the response's Content-Security-Policy nonce.

#include <string_view>

namespace ax::console {

/// The console page (HTML), with `{{NONCE}}` where the server puts each response's CSP nonce.
inline constexpr std::string_view console_page_html = R"AXCONSOLE(<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ax console</title>
<style nonce="{{NONCE}}">
*{box-sizing:border-box}
body{margin:0;font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1d2433;background:#f3f5f8}
header{display:flex;flex-wrap:wrap;gap:8px 16px;align-items:center;padding:10px 16px;background:#1d2433;color:#fff}
header h1{font-size:17px;margin:0}
header .sp{flex:1}
header input{width:12em;max-width:100%}
main{padding:12px;display:grid;gap:12px;grid-template-columns:repeat(auto-fit,minmax(min(100%,560px),1fr))}
section{background:#fff;border:1px solid #dde2ea;border-radius:6px;padding:10px 12px;min-width:0}
section.wide{grid-column:1/-1}
h2{font-size:15px;margin:0 0 8px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(110px,1fr));gap:8px}
.card{border:1px solid #dde2ea;border-radius:5px;padding:6px 8px}
.card b{display:block;font-size:20px}
.card span{color:#5b6478;font-size:12px}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:4px 6px;border-bottom:1px solid #eceff4;vertical-align:top;overflow-wrap:anywhere}
th{font-size:12px;color:#5b6478;font-weight:600;white-space:nowrap;overflow-wrap:normal}
tr.row{cursor:pointer}
tr.row:hover{background:#eef3fb}
form{display:flex;flex-wrap:wrap;gap:6px;align-items:end;margin-bottom:8px}
label{display:flex;flex-direction:column;font-size:12px;color:#5b6478;min-width:0}
input,select,button{font:inherit;padding:4px 6px;border:1px solid #c4cbd8;border-radius:4px;max-width:100%}
button{background:#fff;cursor:pointer;white-space:nowrap}
button.primary{background:#2457c5;color:#fff;border-color:#2457c5}
button.danger{background:#b3261e;color:#fff;border-color:#b3261e}
button:disabled{opacity:.45;cursor:default}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f6f7f9;border:1px solid #eceff4;padding:6px;margin:4px 0;max-height:300px;overflow:auto}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:0}
dt{color:#5b6478}dd{margin:0;overflow-wrap:anywhere}
canvas{width:100%;height:160px;display:block}
.legend span{margin-right:12px;font-size:12px}
.ok{color:#1a7f37}.bad{color:#b3261e}.muted{color:#5b6478}
#msg{min-height:1.4em;font-weight:600}
.tag{display:inline-block;background:#eef1f6;border-radius:3px;padding:0 4px;margin:1px 2px 1px 0;font-size:12px}
.actions{display:flex;flex-wrap:wrap;gap:6px;margin:8px 0}
</style></head>
<body>
<header><h1>ax console</h1><span id="mode" class="muted"></span><span class="sp"></span>
<label>token<input id="token" type="password" autocomplete="off" placeholder="for actions"></label>
<span id="updated"></span></header>
<main>
<section class="wide"><div id="msg" role="status"></div><div class="cards" id="cards"></div></section>
<section><h2>Throughput, last hour (per minute)</h2><canvas id="chart" width="600" height="160"></canvas>
<div class="legend"><span class="ok">&#9632; succeeded</span><span class="bad">&#9632; failed (dead letters)</span><span class="muted">&#9632; cancelled</span></div></section>
<section><h2>Nodes</h2><div class="scroll"><table id="nodes"></table></div></section>
<section><h2>Kinds</h2><div class="scroll"><table id="kinds"></table></div><div id="paused"></div></section>
<section><h2>Schedules</h2><div class="scroll"><table id="schedules"></table></div><div id="unclaimable"></div></section>
<section><h2>Limits</h2><div class="scroll"><table id="limits"></table></div><h2>Key weights</h2><div class="scroll"><table id="weights"></table></div></section>
<section><h2>Flows</h2><div id="flows-note" class="muted"></div><div class="scroll"><table id="flows"></table></div></section>
<section class="wide"><h2>Tasks</h2>
<form id="filter">
<label>state<select id="f-state"><option value="">any</option><option>pending</option><option>scheduled</option><option>claimed</option><option>succeeded</option><option>cancelled</option><option>dead_lettered</option><option>discarded</option></select></label>
<label>kind<input id="f-kind" size="12"></label>
<label>tag<input id="f-tag" size="8"></label>
<label>lane<select id="f-lane"><option value="">any</option><option>high</option><option>normal</option><option>low</option></select></label>
<label>key<input id="f-key" size="10"></label>
<label>older than (s)<input id="f-older" size="6" inputmode="numeric"></label>
<label>newer than (s)<input id="f-newer" size="6" inputmode="numeric"></label>
<label>order<select id="f-order"><option value="oldest">oldest first</option><option value="newest">newest first</option></select></label>
<button class="primary" id="f-search" type="submit">Search</button>
</form>
<div class="scroll"><table id="tasks"></table></div>
<div class="actions"><button id="prev" type="button">&larr; Prev</button><button id="next" type="button">Next &rarr;</button>
<span class="sp"></span>
<select id="bulk-action"><option value="cancel">cancel</option><option value="retry">retry now</option><option value="replay">replay dead letters</option><option value="discard">discard dead letters</option></select>
<label>up to<input id="bulk-limit" size="5" value="1000" inputmode="numeric"></label>
<button class="danger" id="bulk" type="button">Apply to all matching&hellip;</button></div>
</section>
<section class="wide" id="task-section"><h2 id="task-title">Task</h2><div id="task" class="muted">Pick a task in the list.</div></section>
</main>
<script nonce="{{NONCE}}">
"use strict";
(function () {
  var token = "";
  var config = {actions: false, read_only: true};
  var cursors = [0];
  var page = 0;
  var lastNext = 0;
  var overviewData = null;
  var shownTask = 0;

  // The token: from the fragment once (then stripped from the address bar and history), else
  // from this tab's sessionStorage, else typed in.
  var m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (m) {
    token = decodeURIComponent(m[1]);
    history.replaceState(null, "", location.pathname + location.search);
  } else {
    try { token = sessionStorage.getItem("ax-console-token") || ""; } catch (e) {}
  }
  function keepToken() { try { sessionStorage.setItem("ax-console-token", token); } catch (e) {} }
  if (token) keepToken();
  var tokenBox = document.getElementById("token");
  tokenBox.value = token ? "********" : "";
  tokenBox.addEventListener("change", function () { token = tokenBox.value; keepToken(); });

  function $(id) { return document.getElementById(id); }
  // Builds an element; string children become text nodes (never markup).
  function el(tag, attrs) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) {
      if (k === "text") e.textContent = attrs[k];
      else if (k === "cls") e.className = attrs[k];
      else if (k === "on") e.addEventListener("click", attrs[k]);
      else e.setAttribute(k, attrs[k]);
    }
    for (var i = 2; i < arguments.length; i++) {
      var c = arguments[i];
      if (c === null || c === undefined) continue;
      e.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
    }
    return e;
  }
  function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); return e; }
  function msg(text, good) { var e = $("msg"); e.textContent = text; e.className = good ? "ok" : "bad"; }
  function ago(t) {
    if (!t) return "-";
    var s = Date.now() / 1000 - t, a = Math.abs(s), u;
    u = a < 90 ? Math.round(a) + " s" : a < 5400 ? Math.round(a / 60) + " min" : a < 172800 ? Math.round(a / 3600) + " h" : Math.round(a / 86400) + " d";
    return s >= 0 ? u + " ago" : "in " + u;
  }
  function when(t) { return t ? new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC (" + ago(t) + ")" : "-"; }
  function tags(list) { var s = el("span"); (list || []).forEach(function (t) { s.appendChild(el("span", {cls: "tag", text: t})); }); return s; }
  function headers(json) {
    var h = {};
    if (json) h["Content-Type"] = "application/json";
    if (token) h["Authorization"] = "Bearer " + token;
    return h;
  }
  function api(path, body) {
    var opts = {headers: headers(!!body), cache: "no-store", credentials: "omit"};
    if (body) { opts.method = "POST"; opts.body = JSON.stringify(body); }
    return fetch(path, opts).then(function (r) {
      return r.json().catch(function () { return {error: "HTTP " + r.status}; }).then(function (j) {
        if (!r.ok) throw new Error((j && j.error) || ("HTTP " + r.status));
        return j;
      });
    });
  }
  function table(t, head, rows) {
    clear(t);
    var tr = el("tr");
    head.forEach(function (h) { tr.appendChild(el("th", {text: h})); });
    t.appendChild(el("thead", null, tr));
    var tb = el("tbody");
    rows.forEach(function (r) { tb.appendChild(r); });
    t.appendChild(tb);
  }
  function row(cells, attrs) {
    var tr = el("tr", attrs);
    cells.forEach(function (c) { tr.appendChild(el("td", null, c)); });
    return tr;
  }
  function sum3(o) { return o.high + o.normal + o.low; }

  function drawChart(pm) {
    var c = $("chart"), dpr = window.devicePixelRatio || 1;
    var w = c.clientWidth || 300, h = c.clientHeight || 160;
    c.width = Math.round(w * dpr); c.height = Math.round(h * dpr);
    var g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    var n = pm.succeeded.length, max = 1;
    for (var i = 0; i < n; i++) max = Math.max(max, pm.succeeded[i] + pm.cancelled[i], pm.failed[i]);
    var left = 34, bottom = h - 16, top = 6, bw = (w - left - 4) / n;
    g.fillStyle = "#5b6478"; g.font = "11px sans-serif";
    g.fillText(String(max), 2, top + 9); g.fillText("0", 2, bottom);
    g.fillText("-60 min", left, h - 3); g.fillText("now", w - 24, h - 3);
    g.strokeStyle = "#dde2ea"; g.beginPath(); g.moveTo(left, bottom + 0.5); g.lineTo(w, bottom + 0.5); g.stroke();
    for (i = 0; i < n; i++) {
      var x = left + i * bw, sh = (bottom - top) * pm.succeeded[i] / max, ch = (bottom - top) * pm.cancelled[i] / max;
      g.fillStyle = "#1a7f37"; g.fillRect(x, bottom - sh, Math.max(1, bw - 1), sh);
      g.fillStyle = "#9aa3b5"; g.fillRect(x, bottom - sh - ch, Math.max(1, bw - 1), ch);
      if (pm.failed[i] > 0) {
        var fh = (bottom - top) * pm.failed[i] / max;
        g.fillStyle = "#b3261e"; g.fillRect(x + bw / 4, bottom - fh, Math.max(1, bw / 2), fh);
      }
    }
  }

  function pauseButton(kind, paused) {
    if (!config.actions) return paused ? "paused" : "";
    return el("button", {type: "button", text: paused ? "resume" : "pause", "data-kind": kind, on: function () {
      var action = paused ? "resume" : "pause";
      if (!confirm(action + " kind " + JSON.stringify(kind) + " on every node?")) return;
      api("api/action", {action: action, kind: kind}).then(function (r) {
        msg(action + " " + JSON.stringify(kind) + ": " + (r.changed ? "done" : "no change"), true);
        loadOverview();
      }).catch(function (e) { msg(e.message); });
    }});
  }

  function renderOverview(o) {
    overviewData = o;
    var k = o.counts, cards = clear($("cards"));
    [["pending", sum3(k.pending)], ["scheduled", sum3(k.scheduled)], ["running", sum3(k.claimed)],
     ["waiting (flows)", sum3(k.waiting)], ["dead letters", k.dead_letters], ["succeeded", k.succeeded], ["cancelled", k.cancelled],
     ["discarded", k.discarded], ["oldest pending", Math.round(o.oldest_pending_age_s) + " s"]].forEach(function (c) {
      cards.appendChild(el("div", {cls: "card"}, el("b", {text: String(c[1])}), el("span", {text: c[0]})));
    });
    ["high", "normal", "low"].forEach(function (l) {
      cards.appendChild(el("div", {cls: "card"}, el("b", {text: k.pending[l] + " / " + k.scheduled[l] + " / " + k.claimed[l]}), el("span", {text: "lane " + l + " (pend/sched/run)"})));
    });
    drawChart(o.per_minute);
    var pausedKinds = {};
    o.paused.forEach(function (p) { if (p.scope === "kind") pausedKinds[p.name] = true; });
    table($("nodes"), ["#", "name", "host", "lease", "tags", "running"], o.nodes.map(function (n) {
      var run = el("span");
      n.running.forEach(function (r) { run.appendChild(el("span", {cls: "tag", text: r.kind + " \u00d7" + r.tasks})); });
      return row([String(n.id), n.name, n.host + " pid " + n.pid,
        el("span", {cls: n.lease_left_s >= 0 ? "ok" : "bad", text: n.lease_left_s >= 0 ? n.lease_left_s.toFixed(1) + " s left" : "expired"}),
        tags(n.tags), run]);
    }));
    table($("kinds"), ["kind", "pending", "scheduled", "running", "dead", ""], o.kinds.map(function (x) {
      return row([x.kind, String(x.pending), String(x.scheduled), String(x.claimed), String(x.dead_letters), pauseButton(x.kind, !!pausedKinds[x.kind])]);
    }));
    var p = clear($("paused"));
    if (o.paused.length) {
      p.appendChild(el("h2", {text: "Paused"}));
      o.paused.forEach(function (x) {
        p.appendChild(el("div", null, el("span", {cls: "tag", text: x.scope + " " + x.name}), " since " + ago(o.now - x.age_s) + " ",
          x.scope === "kind" ? pauseButton(x.name, true) : null));
      });
    }
    table($("schedules"), ["name", "cron", "kind", "next", "fired", "error"], o.schedules.map(function (s) {
      return row([s.name, s.cron + " " + s.time_zone, s.kind + (s.group ? " [" + s.group + (s.group_key ? "/" + s.group_key : "") + "]" : ""), when(s.next_at), String(s.fired), el("span", {cls: "bad", text: s.error})]);
    }));
    var u = clear($("unclaimable"));
    o.unclaimable.forEach(function (x) { u.appendChild(el("div", {cls: "bad", text: x.tasks + " unclaimable: " + x.reason})); });
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  }
  function loadOverview() {
    return api("api/overview").then(renderOverview).catch(function (e) { msg("overview: " + e.message); });
  }

  // Group limits (read-only: set with Client::set_limit or `ax-pg limits`) and key weights.
  function renderLimits(r) {
    table($("limits"), ["group", "limits", "running", "queued", "keys", "next rate slot"], r.limits.map(function (l) {
      var what = [];
      if (l.max_running !== null) what.push("running \u2264 " + l.max_running);
      if (l.rate_n !== null) what.push("rate " + l.rate_n + " / " + l.rate_period_ms + " ms");
      return row([el("span", {cls: "tag", text: l.group}), what.join(", ") + (l.per_key ? " per key" : ""),
        String(l.running), String(l.queued), String(l.keys), l.next_slot_s === null ? "-" : "in " + l.next_slot_s.toFixed(3) + " s"]);
    }));
    if (!r.limits.length) $("limits").appendChild(el("tbody", null, row(["no group is limited"])));
    table($("weights"), ["group", "key", "weight"], r.key_weights.map(function (w) {
      return row([el("span", {cls: "tag", text: w.group}), w.key, String(w.weight)]);
    }));
    if (!r.key_weights.length) $("weights").appendChild(el("tbody", null, row(["every key weighs 1"])));
  }
  function loadLimits() {
    return api("api/limits").then(renderLimits).catch(function (e) { msg("limits: " + e.message); });
  }
  // The newest flows; the unfinished ones are shown with their progress.
  function renderFlows(r) {
    var open = r.flows.filter(function (f) { return !f.finished; });
    $("flows-note").textContent = open.length + " of the newest " + r.flows.length + " flows unfinished";
    table($("flows"), ["#", "name", "enqueued", "progress", "waiting", "pending", "running", "succeeded", "cancelled", "dead"], open.map(function (f) {
      var done = f.succeeded + f.cancelled + f.dead_lettered + f.other;
      var bar = el("progress", {max: String(Math.max(1, f.tasks)), value: String(done)});
      return row([String(f.id), f.name, ago(f.created_at), el("span", null, bar, " " + done + "/" + f.tasks),
        String(f.waiting), String(f.pending), String(f.running), String(f.succeeded), String(f.cancelled),
        el("span", {cls: f.dead_lettered ? "bad" : "", text: String(f.dead_lettered)})]);
    }));
  }
  function loadFlows() {
    return api("api/flows?limit=20").then(renderFlows).catch(function (e) { msg("flows: " + e.message); });
  }

  function filterFields() {
    var f = {};
    var v = function (id) { return $(id).value.trim(); };
    if (v("f-state")) f.state = v("f-state");
    if (v("f-kind")) f.kind = v("f-kind");
    if (v("f-tag")) f.tag = v("f-tag");
    if (v("f-lane")) f.lane = v("f-lane");
    if (v("f-key")) f.key = v("f-key");
    if (v("f-older")) f.older_than = v("f-older");
    if (v("f-newer")) f.newer_than = v("f-newer");
    return f;
  }
  function query(f) {
    return Object.keys(f).map(function (k) { return encodeURIComponent(k) + "=" + encodeURIComponent(f[k]); }).join("&");
  }
  function loadTasks() {
    var f = filterFields();
    f.order = $("f-order").value;
    f.after = String(cursors[page]);
    f.limit = "50";
    return api("api/tasks?" + query(f)).then(function (r) {
      lastNext = r.next;
      $("next").disabled = !r.next;
      $("prev").disabled = page === 0;
      table($("tasks"), ["id", "state", "kind", "lane", "attempts", "node", "tags", "enqueued", "payload"], r.tasks.map(function (t) {
        return row([String(t.id), el("span", {cls: t.state === "dead_lettered" ? "bad" : t.state === "succeeded" ? "ok" : "", text: t.state}), t.kind, t.lane,
          String(t.attempts) + (t.errors ? " (" + t.errors + " err)" : ""), t.node_id ? "#" + t.node_id : "-", tags(t.tags), ago(t.enqueued_at),
          t.payload_bytes < 0 ? "-" : t.payload_bytes + " B"], {cls: "row", "data-id": String(t.id), on: function () { openTask(t.id); }});
      }));
      if (!r.tasks.length) $("tasks").appendChild(el("tbody", null, row(["no task matches"])));
    }).catch(function (e) { msg("tasks: " + e.message); });
  }

  function actionButton(id, action, label, cls) {
    return el("button", {type: "button", id: "act-" + action, cls: cls || "", text: label, on: function () {
      if (!confirm(label + " task #" + id + "?")) return;
      api("api/action", {action: action, ids: [id]}).then(function (r) {
        msg("#" + id + ": " + r.results[0].result, true);
        openTask(id); loadTasks(); loadOverview();
      }).catch(function (e) { msg(label + ": " + e.message); });
    }});
  }

  function openTask(id) {
    shownTask = id;
    return api("api/task/" + id + "?preview=1024").then(function (t) {
      if (shownTask !== id) return;
      $("task-title").textContent = "Task #" + t.id;
      var box = clear($("task"));
      box.className = "";
      var live = t.state === "pending" || t.state === "scheduled" || t.state === "claimed";
      if (config.actions) {
        var bar = el("div", {cls: "actions"});
        if (live) bar.appendChild(actionButton(t.id, "cancel", "Cancel", "danger"));
        if (t.state === "scheduled") bar.appendChild(actionButton(t.id, "retry", "Retry now"));
        if (t.state === "dead_lettered") {
          bar.appendChild(actionButton(t.id, "replay", "Replay", "primary"));
          bar.appendChild(actionButton(t.id, "discard", "Discard", "danger"));
        }
        box.appendChild(bar);
      }
      var dl = el("dl");
      function item(k, v) { dl.appendChild(el("dt", {text: k})); dl.appendChild(el("dd", null, v)); }
      item("state", t.state + (t.cancel_requested ? " (cancel requested)" : ""));
      item("kind", t.kind);
      item("lane", t.lane);
      item("attempts", t.attempts + (t.max_attempts ? " of " + t.max_attempts : ""));
      item("node", t.node_id ? "#" + t.node_id : "-");
      item("tags", tags(t.tags));
      item("key", t.key || "-");
      if (t.reason) item("reason", t.reason);
      t.timeline.forEach(function (e) { item(e.event, when(e.at)); });
      box.appendChild(dl);
      box.appendChild(el("h2", {text: "Payload"}));
      if (t.payload) {
        box.appendChild(el("div", {cls: "muted", text: t.payload.bytes + " bytes, " + t.payload.encoding + (t.payload.truncated ? ", first " + t.payload.shown + " shown" : "")}));
        box.appendChild(el("pre", {id: "payload", text: t.payload.preview}));
      } else box.appendChild(el("div", {cls: "muted", text: "not kept after the task finished"}));
      box.appendChild(el("h2", {text: "Attempts' errors"}));
      var ol = el("ol", {id: "errors"});
      (t.error_list || []).forEach(function (e) { ol.appendChild(el("li", null, el("pre", {text: e}))); });
      box.appendChild(t.error_list && t.error_list.length ? ol : el("div", {cls: "muted", text: "none"}));
      if (t.result) {
        box.appendChild(el("h2", {text: "Result"}));
        if (t.result.preview !== undefined) box.appendChild(el("pre", {text: t.result.preview}));
        if (t.result.error) box.appendChild(el("pre", {cls: "bad", text: t.result.error}));
      }
      $("task-section").scrollIntoView({block: "nearest"});
    }).catch(function (e) { msg("task #" + id + ": " + e.message); });
  }

  $("filter").addEventListener("submit", function (e) { e.preventDefault(); cursors = [0]; page = 0; loadTasks(); });
  $("next").addEventListener("click", function () { if (!lastNext) return; cursors[page + 1] = lastNext; page++; loadTasks(); });
  $("prev").addEventListener("click", function () { if (page > 0) { page--; loadTasks(); } });
  $("bulk").addEventListener("click", function () {
    var action = $("bulk-action").value, f = filterFields(), limit = parseInt($("bulk-limit").value, 10) || 0;
    if (limit < 1 || limit > 1000) { msg("bulk: up to 1..1000 tasks"); return; }
    if (!confirm(action + " up to " + limit + " tasks matching " + JSON.stringify(f) + "?")) return;
    api("api/bulk", {action: action, filter: f, limit: limit}).then(function (r) {
      var parts = Object.keys(r.counts).map(function (k) { return r.counts[k] + " " + k; });
      msg("bulk " + action + ": " + r.matched + " matched" + (parts.length ? " (" + parts.join(", ") + ")" : "") + (r.more ? "; more match: run it again" : ""), true);
      loadTasks(); loadOverview();
    }).catch(function (e) { msg("bulk: " + e.message); });
  });
  window.addEventListener("resize", function () { if (overviewData) drawChart(overviewData.per_minute); });

  api("api/config").then(function (c) {
    config = c;
    $("mode").textContent = c.read_only ? "read-only" : c.actions ? "actions enabled (token needed)" : "read-only (no token configured)";
    $("bulk").disabled = !c.actions;
    $("bulk-action").disabled = !c.actions;
  }).catch(function (e) { msg("config: " + e.message); }).then(function () {
    loadOverview(); loadLimits(); loadFlows(); loadTasks();
    setInterval(function () { loadOverview(); loadLimits(); loadFlows(); }, 5000);
  });
})();
</script>
</body></html>
)AXCONSOLE";

} // namespace ax::console
