//! The `--html` report: one self-contained page (inline SVG drawn by inline
//! JavaScript; no network). The page embeds the JSON document and the plots:
//! what each chart shows (series of points, or the sentence that stands in
//! for an empty chart) is decided here, so the script only draws.

use serde_json::{json, Value};

use crate::args::Config;
use crate::report;
use crate::stats::TimelinePoint;
use crate::Outcome;

/// The shortest timeline point plotted as a rate. The last point ends when the
/// run stopped, often a fraction of a millisecond into its second (a `-d` run
/// stops at its deadline): a handful of responses over such a sliver makes a
/// meaningless rate, so it is left out of the charts (not out of the JSON).
const MIN_PLOTTED_DURATION_S: f64 = 0.1;

const PAGE: &str = r##"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>tines bench report</title>
<style>
body{font:14px system-ui,sans-serif;margin:2em auto;max-width:1000px;color:#222}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:2em}
table{border-collapse:collapse}td,th{padding:2px 10px;text-align:right;border-bottom:1px solid #ddd}
th:first-child,td:first-child{text-align:left}
svg{background:#fafafa;border:1px solid #ddd}
.axis{font-size:11px;fill:#555}.legend{font-size:12px}
.warning{background:#fff3cd;border:1px solid #e0c36b;padding:6px 10px}
</style></head><body>
<h1>tines bench report</h1>
<div id="summary"></div>
<h2>Throughput over time (responses per second)</h2><div id="throughput"></div>
<h2>Latency percentiles over time (ms)</h2><div id="latency"></div>
<h2>Latency distribution (percentile spectrum, ms)</h2><div id="distribution"></div>
<h2>Errors over time (per second)</h2><div id="errors"></div>
<script id="data" type="application/json">__DATA__</script>
<script id="plots" type="application/json">__PLOTS__</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const P = JSON.parse(document.getElementById("plots").textContent);
const NS = "http://www.w3.org/2000/svg";
function el(tag, attrs, parent, text) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
function nice(v) { return v >= 100 ? v.toFixed(0) : v >= 1 ? v.toFixed(2) : v.toPrecision(2); }
// P[id]: {series: [{name, color, points: [[x, y], ...]}], empty: "shown when there are no points"};
// opts: {xlabel, logx, xticks}
function chart(id, opts) {
  const series = P[id].series;
  const W = 960, H = 300, L = 60, R = 20, T = 20, B = 40;
  const svg = el("svg", {width: W, height: H, viewBox: `0 0 ${W} ${H}`}, document.getElementById(id));
  const all = series.flatMap(s => s.points);
  if (all.length === 0) { el("text", {x: W / 2, y: H / 2, class: "axis", "text-anchor": "middle"}, svg, P[id].empty); return; }
  const fx = opts.logx ? (x => Math.log10(100 / (100 - Math.min(x, 99.9999)))) : (x => x);
  const xs = all.map(p => fx(p[0])), ys = all.map(p => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1), y1 = (Math.max(...ys) || 1) * 1.1;
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
const text = s => String(s).replace(/[<&]/g, "");
const sum = document.getElementById("summary");
const L = D.latency_us, C = D.config;
const codes = Object.entries(D.status_counts).sort((a, b) => a[0] - b[0]);
sum.innerHTML = D.warnings.map(w => `<p class="warning">Warning: ${text(w)}</p>`).join("") +
  `<p>${C.urls.map(text).join(", ")}<br>` +
  `${C.rate ? "open loop at " + C.rate + " req/s" : "closed loop"}, ${C.connections} connections, ${C.threads} threads, ` +
  `${C.keepalive ? "keep-alive" : "a connection per request"}, pipeline ${C.pipeline}` +
  `${D.interrupted ? " (interrupted)" : ""}</p>` +
  `<table><tr><th>figure</th><th>value</th></tr>` +
  [["elapsed (s)", D.elapsed_s.toFixed(3)], ["requests completed", D.requests], ["ok (2xx/3xx)", D.ok],
   ["requests/s", D.requests_per_sec.toFixed(1)], ["errors", D.errors.total], ["in flight at end", D.in_flight_at_end],
   ["warm-up responses (excluded)", D.warmup_requests],
   ["latency p50 / p99 / p99.9 / max (ms)", [L.p50, L.p99, L.p99_9, L.max].map(v => ms(v).toFixed(3)).join(" / ")]]
    .map(r => `<tr><td>${r[0]}</td><td>${r[1]}</td></tr>`).join("") + `</table>` +
  `<h2>Status codes</h2>` + (codes.length === 0 ? `<p>no responses</p>` :
  `<table><tr><th>status</th><th>responses</th><th>share</th></tr>` +
  codes.map(([code, n]) => `<tr><td>${code}</td><td>${n}</td><td>${(100 * n / D.requests).toFixed(1)}%</td></tr>`).join("") +
  `</table>`);
chart("throughput", {xlabel: "seconds"});
chart("latency", {xlabel: "seconds"});
chart("distribution", {xlabel: "percentile", logx: true, xticks: [0, 90, 99, 99.9, 99.99, 99.999]});
chart("errors", {xlabel: "seconds"});
</script></body></html>
"##;

/// The timeline points the charts show: every point but a last one too short
/// to make a rate (a run shorter than that keeps its one point).
fn plotted_timeline(timeline: &[TimelinePoint]) -> Vec<&TimelinePoint> {
    timeline
        .iter()
        .filter(|point| {
            point.duration_s >= MIN_PLOTTED_DURATION_S
                || (timeline.len() == 1 && point.duration_s > 0.0)
        })
        .collect()
}

fn series(name: &str, color: &str, points: Vec<(f64, f64)>) -> Value {
    json!({"name": name, "color": color, "points": points})
}

/// What each chart of the page shows: rates are counts over each point's
/// duration, so a partial last second does not drop to zero; a chart with
/// nothing to show says so in words.
pub fn plots(outcome: &Outcome) -> Value {
    let timeline = plotted_timeline(&outcome.timeline);
    let rate = |count: u64, point: &TimelinePoint| count as f64 / point.duration_s;
    let answered: Vec<&&TimelinePoint> = timeline.iter().filter(|p| p.requests > 0).collect();
    let throughput: Vec<(f64, f64)> = timeline
        .iter()
        .map(|p| (p.t_s, rate(p.requests, p)))
        .collect();
    let errors: Vec<(f64, f64)> = if outcome.stats.total_errors() == 0 {
        Vec::new()
    } else {
        timeline
            .iter()
            .map(|p| (p.t_s, rate(p.errors, p)))
            .collect()
    };
    let distribution: Vec<(f64, f64)> = report::distribution(&outcome.stats.latency)
        .into_iter()
        .map(|(percentile, us)| (percentile, us as f64 / 1000.0))
        .collect();
    json!({
        "throughput": {
            "series": [series("responses/s", "#1f77b4", throughput)],
            "empty": "no responses",
        },
        "latency": {
            "series": [
                series("p50", "#2ca02c", answered.iter().map(|p| (p.t_s, p.p50_us / 1000.0)).collect()),
                series("p99", "#d62728", answered.iter().map(|p| (p.t_s, p.p99_us / 1000.0)).collect()),
            ],
            "empty": "no responses",
        },
        "distribution": {
            "series": [series("latency", "#9467bd", distribution)],
            "empty": "no responses",
        },
        "errors": {
            "series": [series("errors/s", "#d62728", errors)],
            "empty": "no errors",
        },
    })
}

/// The page for this run.
pub fn render(config: &Config, outcome: &Outcome) -> String {
    // `<` is escaped so no string in the data can close the script element.
    let embed = |value: Value| value.to_string().replace('<', "\\u003c");
    // The plots first: the data holds user strings (URLs) that could spell `__PLOTS__`.
    PAGE.replace("__PLOTS__", &embed(plots(outcome)))
        .replace("__DATA__", &embed(report::json(config, outcome)))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;

    use super::*;
    use crate::stats::{record_us, ErrorKind, Stats};
    use crate::Args;

    fn point(t_s: f64, duration_s: f64, requests: u64, errors: u64) -> TimelinePoint {
        TimelinePoint {
            t_s,
            duration_s,
            requests,
            errors,
            p50_us: 1000.0,
            p99_us: 2000.0,
        }
    }

    /// The page of a run with this timeline (the totals follow from it).
    fn page(timeline: Vec<TimelinePoint>) -> String {
        let mut stats = Stats::default();
        for p in &timeline {
            stats.requests += p.requests;
            stats.ok += p.requests;
            stats.status[200] += p.requests;
            stats.errors[ErrorKind::Reset as usize] += p.errors;
            for _ in 0..p.requests {
                record_us(&mut stats.latency, 1000);
            }
        }
        let elapsed = timeline.last().map_or(0.0, |p| p.t_s + p.duration_s);
        let outcome = Outcome {
            stats,
            timeline,
            elapsed: Duration::from_secs_f64(elapsed),
            interrupted: false,
        };
        let args = Args::try_parse_from(["tines-bench", "http://127.0.0.1:1/"]).unwrap();
        render(&Config::from_args(&args).unwrap(), &outcome)
    }

    /// The points the page draws in `chart`'s first series, and its empty-chart sentence.
    fn drawn(page: &str, chart: &str) -> (Vec<(f64, f64)>, String) {
        let start = r#"<script id="plots" type="application/json">"#;
        let plots = &page[page.find(start).expect("the page embeds its plots") + start.len()..];
        let plots: Value =
            serde_json::from_str(&plots[..plots.find("</script>").unwrap()]).unwrap();
        let points = plots[chart]["series"][0]["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_f64().unwrap(), p[1].as_f64().unwrap()))
            .collect();
        (points, plots[chart]["empty"].as_str().unwrap().to_string())
    }

    #[test]
    fn a_partial_last_second_is_plotted_as_a_rate_not_as_a_drop() {
        let page = page(vec![
            point(0.0, 1.0, 1000, 0),
            point(1.0, 1.0, 1000, 0),
            point(2.0, 0.5, 500, 0),
        ]);
        let (throughput, _) = drawn(&page, "throughput");
        assert_eq!(
            throughput,
            vec![(0.0, 1000.0), (1.0, 1000.0), (2.0, 1000.0)]
        );
    }

    #[test]
    fn a_sliver_of_a_last_second_is_left_out_of_the_charts() {
        let page = page(vec![
            point(0.0, 1.0, 1000, 2),
            point(1.0, 1.0, 1000, 0),
            point(2.0, 0.0004, 1, 0),
        ]);
        for chart in ["throughput", "latency", "errors"] {
            let (points, _) = drawn(&page, chart);
            let seconds: Vec<f64> = points.iter().map(|p| p.0).collect();
            assert_eq!(seconds, vec![0.0, 1.0], "{chart}");
        }
    }

    #[test]
    fn a_run_shorter_than_the_sliver_keeps_its_one_point() {
        let (throughput, _) = drawn(&page(vec![point(0.0, 0.05, 10, 0)]), "throughput");
        assert_eq!(throughput, vec![(0.0, 200.0)]);
    }

    #[test]
    fn with_no_errors_the_errors_chart_says_no_errors() {
        let page = page(vec![point(0.0, 1.0, 1000, 0), point(1.0, 0.5, 500, 0)]);
        assert_eq!(drawn(&page, "errors"), (vec![], "no errors".to_string()));
    }

    #[test]
    fn errors_are_plotted_per_second_of_each_point() {
        let page = page(vec![point(0.0, 1.0, 1000, 3), point(1.0, 0.5, 500, 1)]);
        assert_eq!(drawn(&page, "errors").0, vec![(0.0, 3.0), (1.0, 2.0)]);
    }
}
