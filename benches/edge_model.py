"""Pure: issue 39's rows (what people put nginx in front for), their marks, the verdicts and
the markdown (benches/edge.py measures; this decides what the figures say).

Cells, each measured with one server process pinned to CPU 1 and ``tines bench`` on CPU 0:

- ``static-4k``, ``static-1m``: one file of 4 KiB / 1 MiB from a mount, Tines
  (``--static /static=DIR``) against nginx (``sendfile on``, the same directory);
- ``blog-gzip``: the blog's index page with ``Accept-Encoding: gzip``, compressed by Tines
  (``--compression gzip``), by nginx ``gzip on`` proxying to an uncompressing Tines (both
  pinned to CPU 1: their CPU is summed), and not compressed at all; CPU per request and bytes
  on the wire per response;
- ``hello-rate-limit``: hello keep-alive with the rate limiter on (a rate never reached, the
  load generator's address not allowlisted) against off.

A *round* measures every row of a cell once, the order turned by one each round; two rows of
one round form a *pair* and a mark is judged by the median of the per-pair ratios
(benches/paired_model.py's rules: within 15% of the mark the clock cannot tell on this 2-core VM and
callgrind's instructions per request judge). The rate limiter's mark is absolute (0.5 µs more
per request) and judged by instructions: the extra instructions per request are turned into
µs at the off row's own pace (its CPU µs per request over its instructions per request).

Callgrind counts user-space instructions only: for a static file most of the work is the
kernel's (sendfile's copy, the socket), which CPU time includes and the count does not; the
report says so beside the static rows.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from paired_model import Mark as ClockMark
from paired_model import (count_text, failures_text, fmt, fmt_share, judged_text, median_field,
                          medians, noise_lines, order, pair_ratios, ratios_text)
from paired_model import verdict as clock_verdict

STATIC_4K = "static-4k"
STATIC_1M = "static-1m"
BLOG = "blog-gzip"
HELLO = "hello-rate-limit"
CELLS = (STATIC_4K, STATIC_1M, BLOG, HELLO)

TINES_STATIC = "tines-static"
NGINX_SENDFILE = "nginx-sendfile"
TINES_GZIP = "tines-gzip"
NGINX_GZIP = "nginx-gzip-proxy"
TINES_IDENTITY = "tines-identity"
RATE_LIMIT_ON = "tines-rate-limit-on"
RATE_LIMIT_OFF = "tines-rate-limit-off"

ROWS: dict[str, tuple[str, ...]] = {
    STATIC_4K: (TINES_STATIC, NGINX_SENDFILE),
    STATIC_1M: (TINES_STATIC, NGINX_SENDFILE),
    BLOG: (TINES_GZIP, NGINX_GZIP, TINES_IDENTITY),
    HELLO: (RATE_LIMIT_ON, RATE_LIMIT_OFF),
}
"""The rows of each cell, the Tines row first."""

NEEDS = {TINES_STATIC: "static", TINES_GZIP: "compression", RATE_LIMIT_ON: "rate_limit"}
"""The setting a row needs from this build of Tines (``tines serve --help`` must know its flag)."""

FILES = {STATIC_4K: ("4k.bin", 4 * 1024), STATIC_1M: ("1m.bin", 1024 * 1024)}
"""Each static cell's file name under the mount and its size in bytes."""

CONNECTIONS = {STATIC_4K: 50, STATIC_1M: 10, BLOG: 50, HELLO: 50}
"""Keep-alive connections per cell (1 MiB answers: fewer, so the socket buffers stay the
bottleneck's size, not the count's)."""

RATE_LIMIT = "1000000/s"
"""The rate of the rate-limited row: far above what one worker serves, so never reached."""

GZIP_LEVEL = 5
"""gzip level of both the Tines and the nginx row (Tines' default ``compression_gzip_level``;
nginx's own default is 1, so its row sets ``gzip_comp_level`` to this)."""


@dataclass(frozen=True)
class Mark:
    """A target of issue 39: ``row``'s CPU per request at most ``ratio`` times ``peer``'s in
    ``cell`` (``extra_us`` set: at most that many µs more, judged by instructions)."""

    cell: str
    row: str
    peer: str
    ratio: float = 0.0
    extra_us: float | None = None


MARKS = (
    Mark(STATIC_4K, TINES_STATIC, NGINX_SENDFILE, 1.15),
    Mark(STATIC_1M, TINES_STATIC, NGINX_SENDFILE, 1.15),
    Mark(HELLO, RATE_LIMIT_ON, RATE_LIMIT_OFF, extra_us=0.5),
)

COMPARISONS = ((BLOG, TINES_GZIP, NGINX_GZIP), (BLOG, TINES_GZIP, TINES_IDENTITY))
"""Figures the issue asks for without a mark: reported as ratios, no verdict."""


def extra_us(on: float, off: float, off_cpu_us: float) -> float:
    """µs per request the ``on`` row's extra instructions cost at the ``off`` row's pace."""
    return (on - off) * off_cpu_us / off


def verdict(mark: Mark, results: list[dict[str, Any]],
            counts: dict[str, dict[str, float]]) -> tuple[str, str]:
    """(verdict, why) of one mark from the rounds and the instruction counts."""
    ratios = pair_ratios(results, mark.cell, mark.row, mark.peer)
    mine = counts.get(mark.row, {}).get(mark.cell)
    theirs = counts.get(mark.peer, {}).get(mark.cell)
    if mark.extra_us is not None:
        off_cpu, _ = medians(results, mark.cell, mark.peer)
        clock = f"; clock median ratio {statistics.median(ratios):.3f}" if ratios else ""
        if mine is None or theirs is None or not off_cpu:
            return "not measured", "no instruction count for both rows" + clock
        extra = extra_us(mine, theirs, off_cpu)
        ok = extra <= mark.extra_us
        return ("pass" if ok else "fail"), (
            f"{mine - theirs:+,.0f} instructions/request = {extra:+.3f} µs at the off row's "
            f"{off_cpu:.2f} µs per {theirs:,.0f} instructions, mark {mark.extra_us} µs{clock}")
    instructions = mine / theirs if mine and theirs else None
    return clock_verdict(ClockMark(mark.cell, mark.peer, mark.ratio), ratios, instructions)


def bytes_per_response(results: list[dict[str, Any]], cell: str, row: str) -> float | None:
    """Median bytes read per response (head and body: what crossed the wire)."""
    values = [float(r["bytes_read"]) / int(r["requests"]) for r in results
              if r["cell"] == cell and r["server"] == row and not r.get("failed")
              and r.get("requests")]
    return statistics.median(values) if values else None


def markdown(results: list[dict[str, Any]], counts: dict[str, dict[str, float]],
             skipped: dict[str, str], meta: dict[str, Any]) -> str:
    """The report: a table per cell, the marks' verdicts, the blog's comparisons, skips."""
    out = [f"# Static files, compression and rate limits (issue 39), {meta.get('started', '')}", ""]
    out += [f"- {line}" for line in meta.get("notes", [])]
    out += noise_lines(results)
    for cell in CELLS:
        out += ["", f"## {cell}", "",
                "| server | CPU µs/request | spread | runs | req/s | bytes/response "
                "| instructions/request | notes |",
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for row in ROWS[cell]:
            key = f"{cell}/{row}"
            runs = [r for r in results if r["cell"] == cell and r["server"] == row]
            if not runs:
                why = skipped.get(key) or skipped.get(row) or "not run"
                out.append(f"| {row} | | | | | | | {why} |")
                continue
            middle, spread = medians(results, cell, row)
            good = [r for r in runs if not r.get("failed")]
            rate = median_field(good, "ok_per_sec")
            count = counts.get(row, {}).get(cell)
            out.append(f"| {row} | {fmt(middle)} | {fmt_share(spread)} | {len(good)} | "
                       f"{fmt(rate)} | {fmt(bytes_per_response(results, cell, row))} | "
                       f"{count_text(count)} | {failures_text(runs)} |")
    out += ["", "## Issue 39's marks", "",
            "| cell | row | against | mark | ratios per round | verdict | why |",
            "| --- | --- | --- | ---: | --- | --- | --- |"]
    for mark in MARKS:
        target = f"+{mark.extra_us} µs" if mark.extra_us is not None else f"{mark.ratio}x"
        missing = [skipped.get(f"{mark.cell}/{r}") or skipped.get(r)
                   for r in (mark.row, mark.peer)]
        if any(missing):
            out.append(f"| {mark.cell} | {mark.row} | {mark.peer} | {target} | | not run | "
                       f"{'; '.join(m for m in missing if m)} |")
            continue
        ratios = pair_ratios(results, mark.cell, mark.row, mark.peer)
        out.append(f"| {mark.cell} | {mark.row} | {mark.peer} | {target} | "
                   + judged_text(ratios, verdict(mark, results, counts)))
    out += ["", "## The blog page, compressed (no mark: CPU and bytes)", "",
            "| row | against | CPU ratios per round | median | bytes/response ratio |",
            "| --- | --- | --- | ---: | ---: |"]
    for cell, row, peer in COMPARISONS:
        ratios = pair_ratios(results, cell, row, peer)
        mine, theirs = bytes_per_response(results, cell, row), bytes_per_response(results, cell, peer)
        size = f"{mine / theirs:.3f}" if mine and theirs else ""
        median = f"{statistics.median(ratios):.3f}" if ratios else ""
        out.append(f"| {row} | {peer} | {ratios_text(ratios)} | {median} | "
                   f"{size} |")
    out.append("")
    return "\n".join(out)


__all__ = ["BLOG", "CELLS", "COMPARISONS", "CONNECTIONS", "FILES", "GZIP_LEVEL", "HELLO",
           "MARKS", "Mark", "NEEDS", "NGINX_GZIP", "NGINX_SENDFILE", "RATE_LIMIT",
           "RATE_LIMIT_OFF", "RATE_LIMIT_ON", "ROWS", "STATIC_1M", "STATIC_4K", "TINES_GZIP",
           "TINES_IDENTITY", "TINES_STATIC", "bytes_per_response", "extra_us", "markdown",
           "order", "verdict"]
