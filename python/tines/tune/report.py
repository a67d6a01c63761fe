"""What ``tines tune`` writes: the text summary, the commented ``tines.toml``, the HTML report.

Owns: formatting a :class:`~tines.tune.recommend.Recommendation` and its measurements document
for people (text, HTML with inline SVG plots: no script, no network, readable offline and
checked by a test in headless chromium) and for ``tines serve -c`` (the TOML). Pure functions
of their inputs.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from typing import Any

from tines import __version__
from tines.config import SETTINGS, format_value, load
from tines.memory import format_size
from tines.serve_cli import serve_parser
from tines.tune.recommend import Recommendation, RequestCost, cost_text, knee, peak, request_costs, us

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")


def value_text(value: Any) -> str:
    return "not needed" if value is None else format_value(value)


def text(rec: Recommendation, doc: dict[str, Any]) -> str:
    """The summary printed at the end: the recommendation first, the evidence below."""
    lines = [f"tines tune {__version__}: {doc['app']} ({doc['interface'].upper()}), "
             f"{doc['elapsed_s']:.0f} s of a {doc['options']['budget_s']:.0f} s budget"
             + (", interrupted" if doc.get("interrupted") else ""), "", "Recommended settings:"]
    width = max((len(item.setting) for item in rec.items), default=10)
    for item in rec.items:
        shown = value_text(item.value) if item.in_toml or item.value is None else f"({value_text(item.value)})"
        lines.append(f"  {item.setting:<{width}}  {shown}")
    summary = rec.summary
    if summary.get("peak_rps"):
        lines += ["", f"Expected: about {summary['expected_rps']:,.0f} requests/s on "
                      f"{doc['machine']['target_cpus']} CPUs (measured {summary['peak_rps']:,.0f} on "
                      f"{summary['measured_cpus']}), p99 {us(summary['knee_p99_us'])} at the knee "
                      f"({summary['knee_concurrency']} connections)."]
    lines += ["", "Why:"]
    for item in rec.items:
        lines.append(f"  {item.setting}: {item.why}")
    costs = {cost.label: cost for cost in request_costs(doc)}
    lines += ["", "Measured (closed-loop sweeps: requests/s and p99 by connections):"]
    probe = next((cost for cost in costs.values() if cost.label.startswith("probe, ")), None)
    if probe:
        lines.append(f"  {probe.label}: {cost_text(probe)}")
    for config in doc.get("configs", []):
        name = config["shape"]["name"]
        if config.get("error"):
            lines.append(f"  {name}: failed: {config['error']}")
            continue
        cells = ", ".join(f"{s['concurrency']}: {s['rps']:,.0f}/s p99 {us(s['latency_us']['p99'])}"
                          + (" (disturbed)" if s.get("disturbed") else "")
                          for s in config["sweep"])
        lines.append(f"  {name}: {cells}")
        if cost := costs.get(name):
            lines.append(f"    {cost_text(cost)}")
        lines.append(f"    worker USS / PSS / shared: {worker_memory(config.get('memory_start'))} at start, "
                     f"{worker_memory(config.get('memory_after'))} after the sweep")
        for run in config.get("open_loop", []):
            lines.append(f"    open loop at {run['fraction']:.0%} of the peak ({run['rate']:,.0f}/s): "
                         f"p50 {us(run['latency_us']['p50'])}, p99 {us(run['latency_us']['p99'])}, "
                         f"errors {run['errors']}")
    for variant in doc.get("memory", []):
        if variant.get("error"):
            lines.append(f"  memory, {variant['shape']['name']}: failed: {variant['error']}")
            continue
        workers = variant["after"]["workers"]
        if workers:
            lines.append(f"  memory, {variant['shape']['name']}: worker USS "
                         f"{format_size(variant['start']['workers'][0]['uss']) if variant['start']['workers'] else '?'}"
                         f" at start, {format_size(max(w['uss'] for w in workers))} after "
                         f"{variant['requests']:,} requests; shared {format_size(max(w['shared'] for w in workers))}")
    leak = doc.get("leak")
    if leak and leak.get("samples"):
        first, last = leak["samples"][0], leak["samples"][-1]
        lines.append(f"  leak run, {leak['shape']['name']}: USS {format_size(first['uss'])} -> "
                     f"{format_size(last['uss'])} over {last['requests']:,} requests")
    if rec.notes:
        lines += ["", "Notes:"] + [f"  {note}" for note in rec.notes]
    return "\n".join(lines) + "\n"


def serve_settings(doc: dict[str, Any]) -> dict[str, Any]:
    """The settings the tuned app was served with (APP, the flags after ``--`` and a config
    file's), as values."""
    arguments, _ = serve_parser().parse_known_args([doc["app"], *doc.get("serve_args", [])])
    cfg = load(arguments, environ={})
    # Given on the command line or in a config file (-c after --, or ./tines.toml).
    return {name: getattr(cfg, name) for name in SETTINGS if cfg.source(name) != "default"}


def toml(rec: Recommendation, doc: dict[str, Any]) -> str:
    """A commented ``tines.toml``: the app's own settings, then each recommendation with its
    reason; the "not needed" ones as comments."""
    lines = [f"# tines.toml written by tines tune {__version__} for {doc['app']}",
             f"# from {doc['elapsed_s']:.0f} s of measurements on {doc['machine']['cpus']} CPUs, for "
             f"{doc['machine']['target_cpus']} CPUs and a memory budget of "
             f"{format_size(int(doc['machine']['memory_budget']))}.",
             "# Use it with: tines serve -c tines.toml (from the directory tines tune ran in).", ""]
    recommended = {item.setting for item in rec.items}
    for name, value in serve_settings(doc).items():
        if name not in recommended:
            lines.append(f"{name} = {format_value(list(value) if isinstance(value, tuple) else value)}")
    lines.append("")
    for item in rec.items:
        for chunk in wrap(item.why, 96):
            lines.append(f"# {chunk}")
        if item.value is None:
            lines.append(f"# {item.setting}: not needed")
        elif item.in_toml:
            lines.append(f"{item.setting} = {format_value(item.value)}")
        else:
            instead = ("the fixed count, workers, is set instead; tines tune --bursty proposes a dynamic pool"
                       if item.setting == "max_workers" else "the dynamic pool below replaces a fixed count")
            lines.append(f"# {item.setting} = {format_value(item.value)}  ({instead})")
        lines.append("")
    return "\n".join(lines)


def wrap(text_: str, width: int) -> list[str]:
    words, lines, line = text_.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    if line:
        lines.append(line)
    return lines


# --- HTML ---------------------------------------------------------------------------------------


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        high = low + 1
    step = 10 ** math.floor(math.log10((high - low) / count))
    for factor in (1, 2, 5, 10):
        if (high - low) / (step * factor) <= count:
            step *= factor
            break
    first = math.floor(low / step) * step
    return [first + i * step for i in range(int((high - first) / step) + 2) if first + i * step <= high * 1.0001]


def fmt(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:g}M"
    if value >= 1e3:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


def line_chart(series: Sequence[tuple[str, Sequence[tuple[float, float]]]], x_label: str, y_label: str,
               log_x: bool = False, title: str = "") -> str:
    """An SVG line chart; ``log_x`` for concurrency (doubling steps)."""
    width, height, left, right, top, bottom = 640, 300, 64, 16, 28, 44
    points = [p for _, pts in series for p in pts]
    if not points:
        return f'<p class="empty">{html.escape(title)}: nothing measured.</p>'

    def tx(x: float) -> float:
        return math.log2(max(x, 1e-9)) if log_x else x

    xs = [tx(x) for x, _ in points]
    x_low, x_high = min(xs), max(xs)
    if x_high == x_low:
        x_high = x_low + 1
    y_high = max(y for _, y in points) * 1.1 or 1.0
    plot_w, plot_h = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (tx(x) - x_low) / (x_high - x_low) * plot_w

    def py(y: float) -> float:
        return top + plot_h - y / y_high * plot_h

    out = [f'<svg role="img" aria-label="{html.escape(title)}" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" class="plot">']
    for tick in nice_ticks(0, y_high):
        y = py(tick)
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e4e4e4"/>'
                   f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="axis">{fmt(tick)}</text>')
    x_ticks = sorted({x for x, _ in points}) if log_x else nice_ticks(min(x for x, _ in points), max(x for x, _ in points))
    for tick in x_ticks:
        x = px(tick)
        out.append(f'<text x="{x:.1f}" y="{height - bottom + 16}" text-anchor="middle" class="axis">{fmt(tick)}</text>')
    out.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}" stroke="#888"/>'
               f'<line x1="{left}" x2="{width - right}" y1="{top + plot_h}" y2="{top + plot_h}" stroke="#888"/>'
               f'<text x="{left + plot_w / 2}" y="{height - 6}" text-anchor="middle" class="axis">{html.escape(x_label)}</text>'
               f'<text x="14" y="{top + plot_h / 2}" transform="rotate(-90 14 {top + plot_h / 2})" '
               f'text-anchor="middle" class="axis">{html.escape(y_label)}</text>')
    for index, (name, pts) in enumerate(series):
        colour = COLOURS[index % len(COLOURS)]
        ordered = sorted(pts)
        if not ordered:
            continue
        path = " ".join(f"{'M' if i == 0 else 'L'}{px(x):.1f},{py(y):.1f}" for i, (x, y) in enumerate(ordered))
        out.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2.5"/>')
        out += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{colour}"/>' for x, y in ordered]
        out.append(f'<text x="{left + 10 + (index % 3) * 200}" y="{14 + (index // 3) * 14}" class="legend" '
                   f'fill="{colour}">{html.escape(name)}</text>')
    out.append("</svg>")
    return "".join(out)


def bar_chart(rows: Sequence[tuple[str, Sequence[tuple[str, float]]]], unit: str, title: str,
              figure: Callable[[float], str] | None = None) -> str:
    """Horizontal stacked bars: one row per label, parts (name, value) stacked; ``figure``
    writes a value (as the tables beside the chart write it; default: one decimal and
    ``unit``)."""
    def default_figure(value: float) -> str:
        return f"{value:,.1f} {unit}"

    figure = figure or default_figure
    if not rows:
        return f'<p class="empty">{html.escape(title)}: nothing measured.</p>'
    width, label_w, row_h = 640, 200, 30
    height = 40 + row_h * len(rows)
    total_max = max(sum(v for _, v in parts) for _, parts in rows) or 1.0
    scale = (width - label_w - 130) / total_max
    names = sorted({name for _, parts in rows for name, _ in parts}, key=[n for _, p in rows for n, _ in p].index)
    out = [f'<svg role="img" aria-label="{html.escape(title)}" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" class="plot">']
    for index, name in enumerate(names):
        out.append(f'<rect x="{label_w + index * 150}" y="6" width="12" height="12" fill="{COLOURS[index % len(COLOURS)]}"/>'
                   f'<text x="{label_w + index * 150 + 16}" y="16" class="legend">{html.escape(name)}</text>')
    for row, (label, parts) in enumerate(rows):
        y = 30 + row * row_h
        out.append(f'<text x="{label_w - 8}" y="{y + 17}" text-anchor="end" class="axis">{html.escape(label)}</text>')
        x = float(label_w)
        for name, value in parts:
            w = max(0.0, value * scale)
            out.append(f'<rect x="{x:.1f}" y="{y + 4}" width="{w:.1f}" height="{row_h - 8}" '
                       f'fill="{COLOURS[names.index(name) % len(COLOURS)]}"><title>{html.escape(name)}: '
                       f'{html.escape(figure(value))}</title></rect>')
            x += w
        out.append(f'<text x="{x + 6:.1f}" y="{y + 17}" class="axis">{html.escape(figure(sum(v for _, v in parts)))}</text>')
    out.append("</svg>")
    return "".join(out)


def worker_memory(snapshot: dict[str, Any] | None) -> str:
    """``USS / PSS / shared`` of the largest worker of a memory snapshot."""
    workers = (snapshot or {}).get("workers") or []
    if not workers:
        return "n/a"
    w = max(workers, key=lambda x: x["uss"])
    return f"{format_size(w['uss'])} / {format_size(w['pss'])} / {format_size(w['shared'])}"


def config_row(config: dict[str, Any], costs: dict[str, RequestCost]) -> str:
    """One configuration's row of the report's summary table (its CPU per request from
    ``costs``, the figures the text and the chart give)."""
    e = html.escape
    name = e(config["shape"]["name"])
    if config.get("error"):
        return f"<tr><td>{name}</td><td colspan=\"7\">failed: {e(config['error'])}</td></tr>"
    top, bend = peak(config), knee(config)
    errors = sum(s["errors"] for s in config.get("sweep", []))
    cost = costs.get(config["shape"]["name"])
    cpu = us(cost.cpu_us) if cost else "n/a"
    own = f" ({us(cost.server_us)})" if cost and cost.server_us is not None else ""
    return (f"<tr><td>{name}</td><td>{config.get('boot_s', 0):.2f} s</td>"
            f"<td>{top['rps']:,.0f}/s at {top['concurrency']}</td>" if top else f"<tr><td>{name}</td><td></td><td>n/a</td>") + (
            f"<td>{bend['concurrency']} connections, {bend['rps']:,.0f}/s, p99 {us(bend['latency_us']['p99'])}</td>"
            if bend else "<td>n/a</td>") + (
            f"<td>{errors}</td><td>{cpu}{own}</td><td>{worker_memory(config.get('memory_start'))}</td>"
            f"<td>{worker_memory(config.get('memory_after'))}</td></tr>")


def report_html(rec: Recommendation, doc: dict[str, Any]) -> str:
    """The self-contained HTML report."""
    e = html.escape
    configs = [c for c in doc.get("configs", []) if c.get("sweep")]
    throughput = line_chart([(c["shape"]["name"], [(s["concurrency"], s["rps"]) for s in c["sweep"]]) for c in configs],
                            "connections (closed loop)", "requests/s", log_x=True, title="throughput by concurrency")
    latency = line_chart([(c["shape"]["name"], [(s["concurrency"], s["latency_us"]["p99"] / 1000) for s in c["sweep"]])
                          for c in configs], "connections (closed loop)", "p99 latency, ms", log_x=True,
                         title="p99 latency by concurrency")
    leak = doc.get("leak") or {}
    samples = [s for s in leak.get("samples", []) if s.get("uss") is not None]
    memory_chart = line_chart([("USS", [(s["requests"], s["uss"] / 2**20) for s in samples]),
                               ("PSS", [(s["requests"], s["pss"] / 2**20) for s in samples])],
                              "requests served by the worker", "MiB", title="memory per worker over requests")
    costs = request_costs(doc)
    by_label = {cost.label: cost for cost in costs}
    split_rows = []
    for cost in costs:
        # Uncalibrated, the server's share is unknown: one bar of all the request's CPU (the
        # table's and the text's CPU figure), not the app's share capped at its wall time.
        parts = ([("server (Tines)", cost.server_us), ("app CPU", cost.app_cpu_us)] if cost.server_us is not None
                 else [("server + app CPU", cost.cpu_us)])
        if cost.wait_us > 0:
            parts.append(("app waiting", cost.wait_us))
        split_rows.append((f"{cost.label} ({cost.connections} conn.)", parts))
    split = bar_chart(split_rows, "µs/request", "time per request, app and server", figure=us)
    cost_rows = "".join(
        f"<tr><td>{e(c.label)}</td><td>{c.connections}</td><td>{us(c.cpu_us)}</td><td>{us(c.server_us)}</td>"
        f"<td>{us(c.app_cpu_us)}</td><td>{us(c.wait_us)}</td></tr>" for c in costs)
    mem_rows = []
    for variant in doc.get("memory", []):
        if variant.get("after") and variant["after"]["workers"]:
            w = max(variant["after"]["workers"], key=lambda x: x["uss"])
            mem_rows.append((variant["shape"]["name"], [("USS (own)", w["uss"] / 2**20), ("shared", w["shared"] / 2**20)]))
    memory_bars = bar_chart(mem_rows, "MiB", "memory per worker by variant")
    items = "".join(
        f"<tr><td><code>{e(i.setting)}</code></td><td><code>{e(value_text(i.value))}</code>"
        f"{'' if i.in_toml or i.value is None else ' <small>(not set: see why)</small>'}</td><td>{e(i.why)}</td></tr>"
        for i in rec.items)
    sweep_rows = "".join(
        f"<tr><td>{e(c['shape']['name'])}</td><td>{s['concurrency']}</td><td>{s['rps']:,.0f}</td>"
        f"<td>{us(s['latency_us']['p50'])}</td><td>{us(s['latency_us']['p99'])}</td><td>{s['errors']}</td>"
        f"<td>{us(s['cpu_us_per_request'])}</td><td>{us(s['app_us_per_request'])}</td>"
        f"<td>{s['noise']:.0%}{' disturbed' if s.get('disturbed') else ''}</td></tr>"
        for c in configs for s in c["sweep"])
    open_rows = "".join(
        f"<tr><td>{e(c['shape']['name'])}</td><td>{r['fraction']:.0%}</td><td>{r['rate']:,.0f}</td>"
        f"<td>{r['rps']:,.0f}</td><td>{us(r['latency_us']['p50'])}</td><td>{us(r['latency_us']['p99'])}</td>"
        f"<td>{us(r['latency_us']['p99_9'])}</td><td>{r['errors']}</td></tr>"
        for c in configs for r in c.get("open_loop", []))
    config_rows = "".join(config_row(c, by_label) for c in doc.get("configs", []))
    knees = "".join(f"<li>{e(c['shape']['name'])}: knee at {k['concurrency']} connections, "
                    f"{k['rps']:,.0f} requests/s</li>" for c in configs if (k := knee(c)))
    notes = "".join(f"<li>{e(n)}</li>" for n in rec.notes)
    machine = doc["machine"]
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tines tune: {e(doc['app'])}</title>
<style>
body{{font:14px system-ui,sans-serif;margin:2em auto;max-width:1000px;color:#222;padding:0 1em}}
h1{{font-size:1.4em}}h2{{font-size:1.1em;margin-top:2em}}
table{{border-collapse:collapse;margin:.5em 0}}td,th{{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}}
th{{background:#f3f3f3}}svg{{background:#fafafa;border:1px solid #ddd;max-width:100%;height:auto}}
.axis{{font-size:11px;fill:#555}}.legend{{font-size:12px}}.empty{{color:#777}}
.warning{{background:#fff3cd;border:1px solid #e0c36b;padding:6px 10px}}
</style></head><body>
<h1>tines tune: {e(doc['app'])}</h1>
<p>{e(doc['interface'].upper())} app; {doc['elapsed_s']:.0f} s of a {doc['options']['budget_s']:.0f} s
budget{' (interrupted)' if doc.get('interrupted') else ''}; measured on {machine['cpus']} CPUs (server on CPUs
{e(str(machine['server_cpus']))}, load generator on {e(str(machine['load_cpus']))}), recommended for
{machine['target_cpus']} CPUs and a memory budget of {e(format_size(int(machine['memory_budget'])))}.
tines {e(__version__)}.</p>
{f'<ul class="warning">{notes}</ul>' if notes else ''}
<h2>Recommendation</h2>
<table><tr><th>setting</th><th>value</th><th>why</th></tr>{items}</table>
<h2>Configurations</h2>
<table><tr><th>configuration</th><th>ready in</th><th>peak</th><th>knee</th><th>errors</th>
<th>server CPU/request at the peak (own)</th><th>worker USS / PSS / shared at start</th>
<th>after the sweep</th></tr>{config_rows}</table>
<h2>Throughput by concurrency</h2>{throughput}<ul>{knees}</ul>
<h2>p99 latency by concurrency</h2>{latency}
<h2>Time per request: server and app</h2>{split}
<table><tr><th>measured</th><th>connections</th><th>CPU/request</th><th>server (Tines)</th><th>app CPU</th>
<th>app waiting</th></tr>{cost_rows}</table>
<p>The probe (one connection at a time: the figures the recommendation's W/C rests on), then each
configuration at its peak, where a batch of requests shares the server's wake-ups and syscalls (so a
request costs less CPU there than one at a time). "server (Tines)" is the same configuration under a no-op
app (the framework penalty); "app waiting" is the app's wall time (from the scoreboard) beyond its CPU.</p>
<h2>Memory per worker over requests</h2>{memory_chart}
<p>One worker of the chosen configuration under steady load ({e(str(leak.get('shape', {}).get('name', 'not run')))}).</p>
<h2>Memory per worker by variant</h2>{memory_bars}
<h2>Sweeps</h2>
<table><tr><th>configuration</th><th>connections</th><th>requests/s</th><th>p50</th><th>p99</th><th>errors</th>
<th>server CPU/request</th><th>app time/request</th><th>noise</th></tr>{sweep_rows}</table>
<h2>Open loop (latency from the intended send time)</h2>
<table><tr><th>configuration</th><th>of peak</th><th>rate asked</th><th>rate served</th><th>p50</th><th>p99</th>
<th>p99.9</th><th>errors</th></tr>{open_rows}</table>
</body></html>
"""
