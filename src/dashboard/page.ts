/**
 * The operator dashboard: one static HTML page with inline CSS and JS (no framework, no external
 * assets), polling `GET /admin/overview` every 2 s with the session cookie. All data is written with
 * textContent / DOM APIs, never as HTML. The script is a plain string (not a serialised function)
 * so bundlers cannot inject helpers into it.
 */

const STYLE = `
:root { --fg:#1d2330; --muted:#667085; --line:#e4e7ec; --bg:#f7f8fa; --ok:#12805c; --bad:#c4320a; --warn:#b54708; --accent:#2e5bff; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif; color:var(--fg); background:var(--bg); }
header { display:flex; gap:16px; align-items:center; padding:12px 20px; background:#fff; border-bottom:1px solid var(--line); }
header h1 { font-size:18px; margin:0; }
header .muted { margin-left:auto; }
main { padding:16px 20px; display:grid; gap:16px; }
.cards { display:grid; grid-template-columns:repeat(auto-fit,minmax(170px,1fr)); gap:12px; }
.card, section.panel { background:#fff; border:1px solid var(--line); border-radius:8px; padding:12px 14px; }
.card .label { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.04em; }
.card .value { font-size:26px; font-weight:600; margin-top:2px; }
.card .sub { color:var(--muted); font-size:12px; }
h2 { font-size:14px; margin:0 0 8px; }
table { width:100%; border-collapse:collapse; font-variant-numeric:tabular-nums; }
th, td { text-align:left; padding:5px 8px; border-bottom:1px solid var(--line); white-space:nowrap; }
th { color:var(--muted); font-weight:500; font-size:12px; }
td.reason { white-space:normal; }
.muted { color:var(--muted); }
.pill { display:inline-block; padding:1px 8px; border-radius:10px; font-size:12px; background:#eef2ff; }
.up { color:var(--ok); } .down { color:var(--bad); } .draining { color:var(--warn); }
code { font:12px ui-monospace,SFMono-Regular,Menlo,monospace; }
.legend span { margin-right:14px; font-size:12px; }
.sw { display:inline-block; width:10px; height:10px; border-radius:2px; margin-right:4px; vertical-align:-1px; }
.sw-prompt { background:#eef1f6; } svg.short { height:140px; margin-top:4px; } .legend { margin-bottom:10px; }
.sw-actual { background:#2e5bff; } .sw-predicted { background:#98a2b3; } .sw-requests { background:#dfe6ff; }
dl { display:grid; grid-template-columns:max-content 1fr; gap:4px 16px; margin:0; } dt { color:var(--muted); } dd { margin:0; }
svg { width:100%; height:180px; display:block; }
`;

const SCRIPT = String.raw`
"use strict";
var selected = null;
var SVGNS = "http://www.w3.org/2000/svg";
function $(id) { return document.getElementById(id); }
function pct(x) { return x === null || x === undefined ? "–" : (x * 100).toFixed(1) + "%"; }
function num(x) { return x === null || x === undefined ? "–" : Number(x).toLocaleString("en-US"); }
function ms(s) { return s === null ? "–" : (s * 1000 < 10 ? (s * 1000).toFixed(2) : (s * 1000).toFixed(0)) + " ms"; }
function ago(t, now) { var d = Math.max(0, Math.round((now - t) / 1000)); return d < 60 ? d + "s ago" : Math.round(d / 60) + "m ago"; }
function setText(id, text, value) { var e = $(id); e.textContent = text; if (value !== undefined) e.setAttribute("data-value", String(value)); }
function cell(tr, text, cls) { var td = document.createElement("td"); td.textContent = text; if (cls) td.className = cls; tr.appendChild(td); return td; }
function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); }
function quantile(h, q) {
  if (!h || h.count === 0) return null;
  var rank = q * h.count, cum = 0, lower = 0;
  for (var i = 0; i < h.bounds.length; i++) {
    var c = h.counts[i];
    if (cum + c >= rank && c > 0) return lower + (h.bounds[i] - lower) * ((rank - cum) / c);
    cum += c; lower = h.bounds[i];
  }
  return h.bounds.length ? h.bounds[h.bounds.length - 1] : null;
}
function totals(receipts) {
  var t = { ok: 0, error: 0, unreported: 0, promptTokens: 0, predictedCachedTokens: 0, actualCachedTokens: 0 };
  Object.keys(receipts).forEach(function (k) { var r = receipts[k]; Object.keys(t).forEach(function (f) { t[f] += r[f]; }); });
  return t;
}
function renderWorkers(s, drift, now) {
  var body = $("workers").querySelector("tbody"); clear(body);
  s.workers.forEach(function (w) {
    var tr = document.createElement("tr"); tr.setAttribute("data-worker", w.workerId);
    var r = s.recorder.receipts[w.workerId];
    cell(tr, w.workerId);
    cell(tr, w.status, w.status);
    cell(tr, w.synced ? "yes" : "no");
    cell(tr, num(w.blocks));
    cell(tr, num(w.activeRequests));
    cell(tr, num(w.activePrefillTokens));
    cell(tr, num(w.activeDecodeBlocks));
    cell(tr, r && r.promptTokens > 0 ? pct(r.actualCachedTokens / r.promptTokens) : "–");
    var d = drift[w.workerId]; cell(tr, d ? d.driftEwma.toFixed(2) + (d.drifting ? " drifting" : "") : "–", d && d.drifting ? "down" : "");
    cell(tr, w.contractDigest ? w.contractDigest.slice(0, 12) : "none", "muted").title = w.contractDigest || "this worker publishes no processor contract";
    cell(tr, !w.kvEvents ? "approximate" : w.approximate ? "approximate (events)" : "events", w.approximate ? "down" : "").title = (w.approximateReasons || []).join("; ");
    cell(tr, ago(w.lastSeen, now), "muted");
    body.appendChild(tr);
  });
}
function line(svg, pts, color, dash) {
  if (pts.length === 0) return;
  var p = document.createElementNS(SVGNS, "polyline");
  p.setAttribute("points", pts.join(" ")); p.setAttribute("fill", "none"); p.setAttribute("stroke", color); p.setAttribute("stroke-width", "2");
  if (dash) p.setAttribute("stroke-dasharray", "5 4");
  svg.appendChild(p);
}
function renderChart(series) {
  var svg = $("chart"); clear(svg);
  var W = 1000, H = 180, pad = 4; svg.setAttribute("viewBox", "0 0 " + W + " " + H); svg.setAttribute("preserveAspectRatio", "none");
  var n = series.length, maxReq = 1;
  series.forEach(function (p) { if (p.requests > maxReq) maxReq = p.requests; });
  var step = n > 1 ? (W - 2 * pad) / (n - 1) : 0, bw = Math.max(2, Math.min(24, (W - 2 * pad) / Math.max(n, 1) - 2));
  var actual = [], predicted = [];
  series.forEach(function (p, i) {
    var x = n > 1 ? pad + i * step : W / 2;
    var bh = (p.requests / maxReq) * (H * 0.35);
    var bar = document.createElementNS(SVGNS, "rect");
    bar.setAttribute("x", String(x - bw / 2)); bar.setAttribute("y", String(H - bh)); bar.setAttribute("width", String(bw)); bar.setAttribute("height", String(bh));
    bar.setAttribute("fill", p.errors > 0 ? "#fbd5c8" : "#dfe6ff"); svg.appendChild(bar);
    if (p.promptTokens > 0) {
      actual.push(x + "," + (H - pad - (p.actualCachedTokens / p.promptTokens) * (H - 2 * pad)));
      predicted.push(x + "," + (H - pad - (p.predictedCachedTokens / p.promptTokens) * (H - 2 * pad)));
    }
  });
  line(svg, predicted, "#98a2b3", true);
  line(svg, actual, "#2e5bff", false);
  if (actual.length === 1) {
    var c = document.createElementNS(SVGNS, "circle"); var xy = actual[0].split(",");
    c.setAttribute("cx", xy[0]); c.setAttribute("cy", xy[1]); c.setAttribute("r", "4"); c.setAttribute("fill", "#2e5bff"); svg.appendChild(c);
  }
  setText("chart-range", n ? n + " × 10 s intervals" : "no settled requests yet");
}
function rect(svg, x, y, w, h, color) {
  var r = document.createElementNS(SVGNS, "rect");
  r.setAttribute("x", String(x)); r.setAttribute("y", String(y)); r.setAttribute("width", String(w)); r.setAttribute("height", String(Math.max(0, h))); r.setAttribute("fill", color);
  svg.appendChild(r);
}
function renderReceipts(list) {
  var svg = $("receipts-chart"); clear(svg);
  var W = 1000, H = 140; svg.setAttribute("viewBox", "0 0 " + W + " " + H); svg.setAttribute("preserveAspectRatio", "none");
  var items = list.slice().reverse(), max = 1;
  items.forEach(function (r) { if (r.promptTokens > max) max = r.promptTokens; });
  var slot = W / 50, bw = slot * 0.36;
  items.forEach(function (r, i) {
    var x = i * slot + slot * 0.1;
    rect(svg, x, H - (r.promptTokens / max) * H, slot * 0.8, (r.promptTokens / max) * H, r.outcome === "ok" ? "#eef1f6" : "#fbd5c8");
    rect(svg, x + slot * 0.04, H - (r.predictedCachedTokens / max) * H, bw, (r.predictedCachedTokens / max) * H, "#98a2b3");
    if (r.actualCachedTokens !== null) rect(svg, x + slot * 0.04 + bw, H - (r.actualCachedTokens / max) * H, bw, (r.actualCachedTokens / max) * H, "#2e5bff");
  });
  setText("receipts-range", items.length + " most recent");
}
function renderDecisions(list, now) {
  var body = $("decisions").querySelector("tbody"); clear(body);
  list.slice(0, 20).forEach(function (d) {
    var tr = document.createElement("tr");
    cell(tr, ago(d.at, now), "muted");
    cell(tr, d.workerId);
    cell(tr, d.overlapBlocks + " / " + d.totalBlocks);
    cell(tr, d.mode === "exact" ? "exact" : "text prefix: " + (d.fallbackReason || "?"));
    cell(tr, d.reason, "reason");
    body.appendChild(tr);
  });
  if (list.length === 0) { var tr = document.createElement("tr"); cell(tr, "no routing decisions yet", "muted").colSpan = 5; body.appendChild(tr); }
}
function renderEvents(s) {
  var dl = $("events"); clear(dl);
  function item(k, v) { var dt = document.createElement("dt"); dt.textContent = k; var dd = document.createElement("dd"); dd.textContent = v; dl.appendChild(dt); dl.appendChild(dd); }
  var c = s.counters;
  item("events applied", num(c.eventsApplied));
  item("events dropped", num(c.eventsDropped) + (Object.keys(c.dropReasons).length ? " (" + Object.keys(c.dropReasons).map(function (k) { return k + " " + c.dropReasons[k]; }).join(", ") + ")" : ""));
  item("gaps (resyncs)", num(c.dropReasons.parent_not_found || 0));
  item("dumps", num(c.dumps));
  item("load expired", num(c.expired));
  var fb = s.recorder.fallbacks;
  item("text-prefix fallbacks", Object.keys(fb).length ? Object.keys(fb).map(function (k) { return k + " " + fb[k]; }).join(", ") : "none");
  item("retries", num(s.recorder.retries));
  // HiCache load-back (src/selection/tier-calibration.ts): configured vs estimated from receipts.
  if (s.tierLoadBack) ["host", "storage"].forEach(function (tier) {
    var v = s.tierLoadBack[tier];
    if (v.accepted + v.rejected === 0) return;
    item(tier + " load-back", v.configuredGbps + " GB/s configured, " + (v.estimatedGbps === null ? "estimate after more samples" : v.gbps.toFixed(2) + " GB/s from receipts") + "; measured / predicted " + (v.measuredOverPredicted === null ? "–" : v.measuredOverPredicted.toFixed(2)) + " (" + v.accepted + " samples, " + v.rejected + " refused)");
  });
}
function render(data) {
  var sel = $("model");
  if (sel.options.length !== data.models.length) {
    clear(sel);
    data.models.forEach(function (m) { var o = document.createElement("option"); o.value = m.model; o.textContent = m.model; sel.appendChild(o); });
  }
  if (selected === null && data.models.length) selected = data.models[0].model;
  sel.value = selected;
  var pool = data.models.filter(function (m) { return m.model === selected; })[0];
  var now = data.generatedAt;
  setText("updated", "updated " + new Date(now).toLocaleTimeString());
  if (!pool || !pool.snapshot) { setText("status", "index unavailable for this model"); return; }
  setText("status", "");
  var s = pool.snapshot, t = totals(s.recorder.receipts);
  setText("hit-rate", pct(pool.hitRate), pool.hitRate === null ? "" : pool.hitRate);
  setText("hit-rate-sub", num(t.actualCachedTokens) + " cached / " + num(t.promptTokens) + " prompt tokens");
  setText("predicted", t.promptTokens > 0 ? pct(t.predictedCachedTokens / t.promptTokens) : "–");
  setText("predicted-sub", "predicted; " + (t.unreported ? t.unreported + " without cache report" : "all receipts reported"));
  var rq = s.recorder.requests;
  setText("requests", num(rq.ok), rq.ok);
  setText("requests-sub", num(rq.error) + " errors, " + num(rq.no_worker) + " no worker, " + num(s.activeRequests) + " active");
  var up = s.workers.filter(function (w) { return w.status === "up"; }).length;
  setText("workers-up", up + " / " + s.workers.length, up);
  setText("workers-up-sub", "block size " + (s.blockSize === null ? "?" : s.blockSize) + (s.blockSize !== null && s.blockSize !== pool.configuredBlockSize ? " (config says " + pool.configuredBlockSize + "!)" : ""));
  setText("index-blocks", num(s.indexedBlocks), s.indexedBlocks);
  var co = pool.cohort;
  setText("cohort", co.exactMedia ? "exact" : "text only", co.state);
  setText("cohort-sub", { no_workers: "no workers up", no_contract: "a worker publishes no contract", invalid: "contract not usable: " + co.reason, disagree: co.digests + " different contract digests", agree: "all share " + (co.digest || "").slice(0, 12) }[co.state]);
  var oh = s.recorder.edgeOverheadSeconds;
  setText("overhead", ms(quantile(oh, 0.5)));
  setText("overhead-sub", "p95 " + ms(quantile(oh, 0.95)) + " over " + num(oh.count));
  var drift = {}; s.drift.forEach(function (d) { drift[d.workerId] = d; });
  renderWorkers(s, drift, now);
  renderChart(s.recorder.series);
  renderReceipts(s.recentReceipts);
  renderDecisions(s.recorder.recentDecisions, now);
  renderEvents(s);
  document.body.setAttribute("data-ready", "1");
}
function load() {
  fetch("/admin/overview", { credentials: "same-origin", cache: "no-store" })
    .then(function (r) {
      if (r.status === 401) { location.href = "/dashboard"; throw new Error("signed out"); }
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.json();
    })
    .then(render)
    .catch(function (e) { setText("status", "refresh failed: " + e.message); });
}
$("model").addEventListener("change", function (e) { selected = e.target.value; load(); });
load();
setInterval(load, 2000);
`;

function card(id: string, label: string): string {
  return `<div class="card"><div class="label">${label}</div><div class="value" id="${id}">–</div><div class="sub" id="${id}-sub"></div></div>`;
}

export function dashboardHtml(nonce: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>kvedge dashboard</title><style nonce="${nonce}">${STYLE}</style></head>
<body>
<header><h1>kvedge</h1><select id="model" aria-label="model pool"></select><span id="status" class="down"></span><span id="updated" class="muted"></span></header>
<main>
<div class="cards">
${card("hit-rate", "Cache hit rate")}
${card("predicted", "Predicted hit rate")}
${card("requests", "Requests ok")}
${card("workers-up", "Workers up")}
${card("index-blocks", "Index blocks")}
${card("cohort", "Cohort contract")}
${card("overhead", "Edge overhead p50")}
</div>
<section class="panel"><h2>Workers</h2><table id="workers"><thead><tr><th>worker</th><th>state</th><th>synced</th><th>blocks</th><th>active</th><th>prefill tokens</th><th>decode blocks</th><th>hit rate</th><th>drift</th><th>contract digest</th><th>mode</th><th>last seen</th></tr></thead><tbody></tbody></table></section>
<section class="panel"><h2>Hit rate and receipts over time <span class="muted" id="chart-range"></span></h2>
<svg id="chart" role="img" aria-label="cache hit rate over time"></svg>
<div class="legend"><span><i class="sw sw-actual"></i>actual cached / prompt</span><span><i class="sw sw-predicted"></i>predicted</span><span><i class="sw sw-requests"></i>requests per interval</span></div>
<h2>Receipts: predicted vs actual cached tokens per request <span class="muted" id="receipts-range"></span></h2>
<svg id="receipts-chart" class="short" role="img" aria-label="recent receipts"></svg>
<div class="legend"><span><i class="sw sw-prompt"></i>prompt tokens</span><span><i class="sw sw-predicted"></i>predicted cached</span><span><i class="sw sw-actual"></i>actual cached</span></div></section>
<section class="panel"><h2>Recent routing decisions</h2><table id="decisions"><thead><tr><th>when</th><th>worker</th><th>overlap / blocks</th><th>mode</th><th>why</th></tr></thead><tbody></tbody></table></section>
<section class="panel"><h2>Index events and fallbacks</h2><dl id="events"></dl></section>
</main>
<script nonce="${nonce}">${SCRIPT}</script>
</body></html>`;
}

/** Shown without a valid session: a form that trades the admin token for the cookie. */
export function dashboardLoginHtml(error: string | null): string {
  const msg = error ? `<p style="color:#c4320a">${error}</p>` : "";
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kvedge dashboard: sign in</title></head>
<body style="font:14px system-ui,sans-serif;max-width:32rem;margin:4rem auto">
<h1 style="font-size:18px">kvedge dashboard</h1>${msg}
<p>Enter the admin token. It is sent once (POST) and exchanged for an HttpOnly session cookie that expires after 12 hours.</p>
<form method="post" action="/dashboard/login"><input type="password" name="token" autocomplete="off" style="width:100%;padding:6px" aria-label="admin token">
<p><button type="submit">Open dashboard</button></p></form>
</body></html>`;
}
