"""Pure: the HTTP/2 rows' plan, issue 38's marks, their verdicts, and the markdown
(benches/http2.py measures; this decides what the figures say).

Every row serves hello (examples/hello.py; Hypercorn the ASGI hello, nginx its static ``OK``)
with one worker. A *round* measures every row once, the rows' order turned by one each round;
a Tines row and a peer measured in the same round form a *pair*, and a mark is judged by the
median of the per-pair ratios of server CPU per request (benches/paired_model.py's rules: within
15% of the mark the clock cannot tell on this noisy machine and callgrind's instructions per
request judge). The mark against Tines' own HTTP/1.1 is an aim the issue judges by instructions per
request: with a count it is the judge, without one the clock's ratio is reported as such.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from paired_model import Mark as ClockMark
from paired_model import (closing, count_text, failures_text, fmt, fmt_share, instruction_ratio,
                          judged_text, median_field, medians, noise_lines, order, pair_ratios)
from paired_model import verdict as clock_verdict

CELL = "hello"
TINES_H2C = "tines-event-h2c"
TINES_H2 = "tines-event-h2"
TINES_H1 = "tines-event-h1"
TINES_ROWS = (TINES_H2C, TINES_H2, TINES_H1)
TINES_H2_ROWS = (TINES_H2C, TINES_H2)
PEER_ROWS = ("granian-h2c", "granian-h2", "hypercorn-h2c", "gunicorn-h2c", "nginx-h2")
ROWS = (*TINES_ROWS, *PEER_ROWS)

STREAMS = 10
"""Streams in flight per HTTP/2 connection (the issue's "10 streams per connection")."""
H2_CONNECTIONS = 5
H1_CONNECTIONS = H2_CONNECTIONS * STREAMS
"""HTTP/1.1 keep-alive connections of the baseline: as many requests in flight as the HTTP/2
rows have (one per connection, no pipelining)."""

PROTOCOLS = {TINES_H2C: "h2c", TINES_H2: "h2", TINES_H1: "HTTP/1.1", "granian-h2c": "h2c",
             "granian-h2": "h2", "hypercorn-h2c": "h2c", "gunicorn-h2c": "h2c",
             "nginx-h2": "h2"}
"""How each row is reached: h2c (prior knowledge), h2 (TLS, ALPN) or HTTP/1.1 keep-alive."""


@dataclass(frozen=True)
class Mark:
    """Issue 38's target: ``row``'s figure at most ``ratio`` times ``peer``'s; ``judge`` is
    "clock" (benches/paired_model.py's rule) or "instructions" (the count judges whenever
    there is one)."""

    row: str
    peer: str
    ratio: float
    judge: str


MARKS = (
    Mark(TINES_H2C, "granian-h2c", 0.6, "clock"),
    Mark(TINES_H2C, TINES_H1, 1.3, "instructions"),
)


def verdict(mark: Mark, ratios: list[float], instructions: float | None) -> tuple[str, str]:
    """(verdict, why) for one mark."""
    if mark.judge == "instructions" and instructions is not None:
        ok = instructions <= mark.ratio
        clock = f"; clock median {statistics.median(ratios):.3f}" if ratios else ""
        return ("pass" if ok else "fail"), (f"instructions ratio {instructions:.3f} vs "
                                            f"{mark.ratio}{clock}")
    result, why = clock_verdict(ClockMark(CELL, mark.peer, mark.ratio), ratios, instructions)
    if mark.judge == "instructions" and result in ("pass", "fail"):
        why += "; no instruction count (the issue judges this one by instructions)"
    return result, why


def load_cpu_per_request(result: dict[str, Any]) -> float | None:
    """The load generator's CPU µs per request of one run (what ``tines bench`` itself costs)."""
    requests = int(result.get("requests") or 0)
    seconds = result.get("load_cpu_seconds")
    if result.get("failed") or not requests or seconds is None:
        return None
    return float(seconds) * 1e6 / requests


def markdown(results: list[dict[str, Any]], counts: dict[str, float],
             skipped: dict[str, str], meta: dict[str, Any]) -> str:
    """The report: a row per server, the marks' verdicts, what was skipped."""
    out = [f"# HTTP/2 rows (issue 38), {meta.get('started', '')}", ""]
    out += [f"- {line}" for line in meta.get("notes", [])]
    out += noise_lines(results)
    out += ["", f"## hello, one worker (server CPU µs per request)", "",
            "| server | protocol | median | spread | runs | req/s | load generator µs/request "
            "| instructions/request | notes |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    by_instructions = {row: {CELL: value} for row, value in counts.items()}
    for row in ROWS:
        runs = [r for r in results if r["server"] == row]
        if not runs:
            if row in skipped:
                out.append(f"| {row} | {PROTOCOLS[row]} | not run | | | | | | {skipped[row]} |")
            continue
        middle, spread = medians(results, CELL, row)
        good = [r for r in runs if not r.get("failed")]
        rate = median_field(good, "requests_per_sec")
        client = [v for r in good if (v := load_cpu_per_request(r)) is not None]
        count = counts.get(row)
        out.append(f"| {row} | {PROTOCOLS[row]} | {fmt(middle)} | {fmt_share(spread)} | "
                   f"{len(good)} | {fmt(rate)} | "
                   f"{fmt(statistics.median(client)) if client else ''} | "
                   f"{count_text(count)} | {failures_text(runs)} |")
    out += ["", "## Issue 38's marks", "",
            "| row | against | mark | ratios per round | verdict | why |",
            "| --- | --- | ---: | --- | --- | --- |"]
    for mark in MARKS:
        missing = [r for r in (mark.row, mark.peer) if r in skipped]
        if missing:
            out.append(f"| {mark.row} | {mark.peer} | {mark.ratio} | | not run | "
                       f"{'; '.join(skipped[r] for r in missing)} |")
            continue
        ratios = pair_ratios(results, CELL, mark.row, mark.peer)
        judged = verdict(mark, ratios,
                         instruction_ratio(by_instructions, CELL, mark.row, mark.peer))
        out.append(f"| {mark.row} | {mark.peer} | {mark.ratio} | " + judged_text(ratios, judged))
    return closing(out, skipped, ROWS)


__all__ = ["CELL", "MARKS", "Mark", "ROWS", "PEER_ROWS", "TINES_ROWS", "TINES_H2_ROWS",
           "TINES_H1", "TINES_H2", "TINES_H2C", "STREAMS", "H2_CONNECTIONS", "H1_CONNECTIONS",
           "PROTOCOLS", "order", "verdict", "load_cpu_per_request", "markdown"]
