//! The `--html` report: one self-contained page (inline SVG drawn by inline
//! JavaScript from the embedded JSON document; no network).

use crate::args::Config;
use crate::report;
use crate::Outcome;

const PAGE: &str = r##"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>tines bench report</title>
<style>
body{font:14px system-ui,sans-serif;margin:2em auto;max-width:1000px;color:#222}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:2em}
table{border-collapse:collapse}td,th{padding:2px 10px;text-align:right;border-bottom:1px solid #ddd}
th:first-child,td:first-child{text-align:left}
svg{background:#fafafa;border:1px solid #ddd}
.axis{font-size:11px;fill:#555}.legend{font-size:12px}
</style></head><body>
<h1>tines bench report</h1>
<div id="summary"></div>
<h2>Throughput over time (responses per second)</h2><div id="throughput"></div>
<h2>Latency percentiles over time (ms)</h2><div id="latency"></div>
<h2>Latency distribution (percentile spectrum, ms)</h2><div id="distribution"></div>
<h2>Errors over time (per second)</h2><div id="errors"></div>
<script id="data" type="application/json">__DATA__</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const NS = "http://www.w3.org/2000/svg";
function el(tag, attrs, parent, text) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
function nice(v) { return v >= 100 ? v.toFixed(0) : v >= 1 ? v.toFixed(2) : v.toPrecision(2); }
// series: [{name, color, points: [[x, y], ...]}]; opts: {xlabel, logx, xticks}
function chart(id, series, opts) {
  const W = 960, H = 300, L = 60, R = 20, T = 20, B = 40;
  const svg = el("svg", {width: W, height: H, viewBox: `0 0 ${W} ${H}`}, document.getElementById(id));
  const all = series.flatMap(s => s.points);
  if (all.length === 0) { el("text", {x: W / 2, y: H / 2, class: "axis", "text-anchor": "middle"}, svg, "no data"); return; }
  const fx = opts.logx ? (x => Math.log10(100 / (100 - Math.min(x, 99.9999)))) : (x => x);
  const xs = all.map(p => fx(p[0])), ys = all.map(p => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1), y1 = Math.max(...ys, 1e-9) * 1.1;
  const px = x => L + (fx(x) - x0) / (x1 - x0) * (W - L - R);
  const py = y => H - B - y / y1 * (H - T - B);
  el("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#888"}, svg);
  el("line", {x1: L, y1: T, x2: L, y2: H - B, stroke: "#888"}, svg);
  for (let i = 0; i <= 4; i++) {
    const y = y1 * i / 4;
    el("text", {x: L - 5, y: py(y) + 4, class: "axis", "text-anchor": "end"}, svg, nice(y));
    el("line", {x1: L, y1: py(y), x2: W - R, y2: py(y), stroke: "#eee"}, svg);
  }
  const ticks = opts.xticks || [0, 1, 2, 3, 4, 5].map(i => x0 + (x1 - x0) * i / 5);
  for (const t of ticks) {
    if (fx(t) < x0 - 1e-9 || fx(t) > x1 + 1e-9) continue;
    el("text", {x: px(t), y: H - B + 15, class: "axis", "text-anchor": "middle"}, svg, opts.logx ? t + "%" : nice(t));
  }
  el("text", {x: (W + L) / 2, y: H - 5, class: "axis", "text-anchor": "middle"}, svg, opts.xlabel);
  series.forEach((s, i) => {
    if (s.points.length === 0) return;
    const d = s.points.map((p, j) => (j ? "L" : "M") + px(p[0]).toFixed(1) + "," + py(p[1]).toFixed(1)).join("");
    el("path", {d, fill: "none", stroke: s.color, "stroke-width": 2}, svg);
    el("text", {x: L + 10 + i * 150, y: T + 5, class: "legend", fill: s.color}, svg, s.name);
  });
}
const ms = us => us / 1000;
const tl = D.timeline;
const sum = document.getElementById("summary");
const L = D.latency_us, C = D.config;
sum.innerHTML = `<p>${C.urls.map(u => u.replace(/[<&]/g, "")).join(", ")}<br>` +
  `${C.rate ? "open loop at " + C.rate + " req/s" : "closed loop"}, ${C.connections} connections, ${C.threads} threads, ` +
  `${C.keepalive ? "keep-alive" : "a connection per request"}, pipeline ${C.pipeline}` +
  `${D.interrupted ? " (interrupted)" : ""}</p>` +
  `<table><tr><th>figure</th><th>value</th></tr>` +
  [["elapsed (s)", D.elapsed_s.toFixed(3)], ["requests completed", D.requests], ["ok (2xx/3xx)", D.ok],
   ["requests/s", D.requests_per_sec.toFixed(1)], ["errors", D.errors.total], ["in flight at end", D.in_flight_at_end],
   ["warm-up responses (excluded)", D.warmup_requests],
   ["latency p50 / p99 / p99.9 / max (ms)", [L.p50, L.p99, L.p99_9, L.max].map(v => ms(v).toFixed(3)).join(" / ")]]
    .map(r => `<tr><td>${r[0]}</td><td>${r[1]}</td></tr>`).join("") + `</table>`;
chart("throughput", [{name: "responses/s", color: "#1f77b4", points: tl.map(p => [p.t_s, p.requests])}], {xlabel: "seconds"});
chart("latency", [
  {name: "p50", color: "#2ca02c", points: tl.filter(p => p.requests).map(p => [p.t_s, ms(p.p50_us)])},
  {name: "p99", color: "#d62728", points: tl.filter(p => p.requests).map(p => [p.t_s, ms(p.p99_us)])}], {xlabel: "seconds"});
chart("distribution", [{name: "latency", color: "#9467bd", points: D.latency_distribution.map(p => [p.percentile, ms(p.latency_us)])}],
  {xlabel: "percentile", logx: true, xticks: [0, 90, 99, 99.9, 99.99, 99.999]});
chart("errors", [{name: "errors/s", color: "#d62728", points: tl.map(p => [p.t_s, p.errors])}], {xlabel: "seconds"});
</script></body></html>
"##;

/// The page for this run.
pub fn render(config: &Config, outcome: &Outcome) -> String {
    // `<` is escaped so no string in the data can close the script element.
    let data = report::json(config, outcome)
        .to_string()
        .replace('<', "\\u003c");
    PAGE.replace("__DATA__", &data)
}
