"""Pure: the paired-round benches' judging (tls_model, http2_model and edge_model share it;
benches/paired.py is their measuring side): how a round is ordered, how two rows of one round
pair up, how a mark is judged, and the report's figures and noise line.

A *round* measures every row once, the rows' order turned by one each round (interleaved
runs); two rows measured in the same round form a *pair*, and a mark is judged by the median
of the per-pair ratios. Where that median is within 15% of the mark the clock cannot tell on
this noisy 2-core machine, and the ratio of callgrind's instruction counts (when measured)
judges; without one the verdict is "inconclusive".
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

JUDGE_BAND = 0.15
"""Within this share of the mark, instructions judge (the issues' "within 15%")."""


@dataclass(frozen=True)
class Mark:
    """A target judged by the clock: the row's figure in ``cell`` at most ``ratio`` times
    ``peer``'s."""

    cell: str
    peer: str
    ratio: float


def figure(result: dict[str, Any]) -> float | None:
    """The figure a measurement is judged by, or None when it failed."""
    if result.get("failed"):
        return None
    if "pss_per_connection" in result:
        return float(result["pss_per_connection"])
    value = result.get("cpu_us_per_request")
    return float(value) if value else None


def order(rows: list[str], round_index: int) -> list[str]:
    """The rows in round ``round_index``'s order: turned by one each round."""
    if not rows:
        return []
    shift = round_index % len(rows)
    return rows[shift:] + rows[:shift]


def pair_ratios(results: list[dict[str, Any]], cell: str, row: str, peer: str) -> list[float]:
    """Per-round ratios row/peer in ``cell`` (rounds where both have a figure)."""
    by_round: dict[int, dict[str, float]] = {}
    for result in results:
        if result["cell"] != cell:
            continue
        value = figure(result)
        if value is not None and value > 0:
            by_round.setdefault(int(result["round"]), {})[result["server"]] = value
    return [r[row] / r[peer] for _, r in sorted(by_round.items()) if row in r and peer in r]


def medians(results: list[dict[str, Any]], cell: str, row: str) -> tuple[float | None, float | None]:
    """Median of the row's figures in ``cell`` and their spread (max-min over median)."""
    values = [v for r in results if r["cell"] == cell and r["server"] == row
              if (v := figure(r)) is not None]
    if not values:
        return None, None
    middle = statistics.median(values)
    return middle, (max(values) - min(values)) / middle if middle else None


def verdict(mark: Mark, ratios: list[float], instructions: float | None) -> tuple[str, str]:
    """(verdict, why) for one mark: pass, fail, inconclusive, or not measured."""
    if not ratios:
        return "not measured", "no pair of runs"
    ratio = statistics.median(ratios)
    if abs(ratio - mark.ratio) > JUDGE_BAND * mark.ratio:
        ok = ratio <= mark.ratio
        return ("pass" if ok else "fail"), f"median ratio {ratio:.3f} vs {mark.ratio} (clock)"
    if instructions is None:
        return "inconclusive", (f"median ratio {ratio:.3f} within 15% of {mark.ratio}; "
                                "no instruction count")
    ok = instructions <= mark.ratio
    return ("pass" if ok else "fail"), (f"median ratio {ratio:.3f} within 15% of {mark.ratio}; "
                                        f"instructions ratio {instructions:.3f} judges")


def instruction_ratio(counts: dict[str, dict[str, float]], cell: str, row: str,
                      peer: str) -> float | None:
    """``counts[server][cell]`` instructions per request (or connection): row over peer."""
    mine, theirs = counts.get(row, {}).get(cell), counts.get(peer, {}).get(cell)
    return mine / theirs if mine and theirs else None


def noise_lines(results: list[dict[str, Any]]) -> list[str]:
    """The report's line on the other processes' CPU during the timed runs (none when no run
    measured it)."""
    noise = [float(r["other_cpu"]) for r in results if r.get("other_cpu") is not None]
    if not noise:
        return []
    return [f"- other processes used a median of {statistics.median(noise):.2f} CPUs "
            f"(max {max(noise):.2f}) of the 2 during the timed runs: where that is well "
            "above 0, the clock figures are noisy and the instruction counts judge"]


def count_text(count: float | None) -> str:
    """An instruction count as the reports' tables show it (empty when not counted)."""
    return f"{count:,.0f}" if count else ""


def failures_text(runs: list[dict[str, Any]]) -> str:
    """Why the failed ones among ``runs`` failed, each reason once (at most 200 characters),
    for a table's notes."""
    return "; ".join(sorted({str(r["failed"]) for r in runs if r.get("failed")}))[:200]


def ratios_text(ratios: list[float]) -> str:
    """A mark's per-round ratios as the reports list them."""
    return ", ".join(f"{r:.3f}" for r in ratios)


def judged_text(ratios: list[float], judged: tuple[str, str]) -> str:
    """A marks table's last cells: the per-round ratios, the verdict and why."""
    result, why = judged
    return f"{ratios_text(ratios)} | {result} | {why} |"


def median_field(runs: list[dict[str, Any]], field: str) -> float | None:
    """The median of ``field`` over ``runs`` (None when there are none)."""
    return statistics.median([float(r[field]) for r in runs]) if runs else None


def closing(out: list[str], skipped: dict[str, str], listed: tuple[str, ...]) -> str:
    """The report ``out`` ends with: a blank line, then the "Skipped" section (the skipped rows
    the tables above, ``listed``, do not show, with why), when there are any."""
    others = {k: v for k, v in skipped.items() if k not in listed}
    if others:
        out = [*out, "", "## Skipped", ""] + [f"- {k}: {v}" for k, v in sorted(others.items())]
    return "\n".join([*out, ""])


def fmt(value: float | None) -> str:
    return "" if value is None else (f"{value:,.0f}" if value >= 100 else f"{value:.2f}")


def fmt_share(value: float | None) -> str:
    return "" if value is None else f"{value:.0%}"


__all__ = ["JUDGE_BAND", "Mark", "closing", "count_text", "failures_text", "figure", "fmt",
           "fmt_share", "instruction_ratio", "judged_text", "median_field", "medians",
           "noise_lines", "order", "pair_ratios", "ratios_text", "verdict"]
