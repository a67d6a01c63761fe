"""Before/after (A/B) runs of Tines against itself: the pure parts.

A is the baseline revision, B the candidate (the current tree). Owns the interleaving plan,
pairing A's and B's runs, the house rule's verdict and the markdown of a run; ``ab.py`` builds,
measures and writes. Medians and spreads are ``model.Spread``, a side's summary is
``model.summarise``. Nothing here starts a process or touches the network:
``tests/python/unit/test_bench_ab.py`` covers it.

The house rule: a ratio holds when the median of >= 5 interleaved runs meets it and
max/min <= 1.10 on each side; otherwise repeat, or call it inconclusive.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable

from model import CellSummary, Scenario, Spread, rate, summarise

SIDES = ("A", "B")
# The house rule: at least this many interleaved runs (pairs) ...
MIN_RUNS = 5
# ... and each side's max/min at most this.
SPREAD_LIMIT = 1.10
# "No change" when the median B/A ratio is within this of 1 (flag --threshold).
NO_CHANGE_THRESHOLD = 0.03
# Slack for the threshold comparison: 1.03 - 1 is 0.030000000000000027 in floating point.
EPSILON = 1e-9


@dataclass(frozen=True)
class Comparison:
    """One table of an A/B report: one Tines MPM on one scenario, A against B."""

    mpm: str
    scenario: Scenario

    @property
    def name(self) -> str:
        return f"tines-{self.mpm} {self.scenario.name}"

    def server(self, side: str) -> str:
        """The server name of ``side`` (it also names the side's log files)."""
        return f"tines-{self.mpm}-{side}"


@dataclass(frozen=True)
class Step:
    """One measurement of the plan: a fresh start of ``side``'s server, warm-up, measured run."""

    run: int
    comparison: Comparison
    side: str


def comparisons(mpms: list[str], apps: list[str], modes: list[str],
                connections: int) -> list[Comparison]:
    """The tables of a run, in report order: MPM, then app, then connection mode."""
    return [Comparison(mpm, Scenario(app, mode, connections))
            for mpm in mpms for app in apps for mode in modes]


def plan(tables: list[Comparison], runs: int) -> list[Step]:
    """Interleaved: ``for run: for comparison: A, then B``. A's and B's run N are neighbours,
    so a slow drift of the machine touches both alike, and every table sees the same drift."""
    return [Step(run, table, side) for run in range(1, runs + 1) for table in tables
            for side in SIDES]


def estimate_seconds(steps: int, warmup_s: float, duration_s: float,
                     start_stop_s: float = 1.5) -> float:
    """Rough wall time of ``steps`` measurements (start and stop, warm-up, measured run)."""
    return steps * (start_stop_s + warmup_s + duration_s)


# --------------------------------------------------------------------------- pairing, verdict


def paired_ratios(a_runs: list[dict[str, Any]], b_runs: list[dict[str, Any]],
                  figure: Callable[[dict[str, Any]], float]) -> list[float]:
    """B/A of ``figure`` for each run number where both sides succeeded (A's figure > 0);
    ``a_runs`` and ``b_runs`` are in run order and carry their ``run`` number."""
    good_a = {r["run"]: figure(r) for r in a_runs if not r.get("failed")}
    out = []
    for b in b_runs:
        a = good_a.get(b["run"])
        if a is not None and a > 0 and not b.get("failed"):
            out.append(figure(b) / a)
    return out


def cpu_per_request(run: dict[str, Any]) -> float:
    """Server CPU µs per successful response of a run."""
    return float(run["cpu_us_per_request"])


@dataclass(frozen=True)
class Verdict:
    """The house rule applied to one figure: ``kind`` is "no change", "changed" or
    "inconclusive"; ``text`` says it with the change or the reason."""

    kind: str
    text: str


def verdict(ratios: list[float], a: Spread | None, b: Spread | None, *,
            threshold: float = NO_CHANGE_THRESHOLD, spread_limit: float = SPREAD_LIMIT,
            min_runs: int = MIN_RUNS, up: str = "higher", down: str = "lower") -> Verdict:
    """The verdict on B against A for one figure.

    ``ratios`` are the paired B/A ratios, ``a`` and ``b`` each side's runs (for max/min).
    Fewer than ``min_runs`` pairs, or a side's max/min above ``spread_limit``: inconclusive.
    Else "no change" when the median ratio is within ``threshold`` of 1, otherwise "changed",
    with ``up`` or ``down`` for the direction of B.
    """
    if not ratios or a is None or b is None:
        return Verdict("inconclusive", "inconclusive (no run succeeded on both sides)")
    if len(ratios) < min_runs:
        return Verdict("inconclusive", f"inconclusive ({len(ratios)} paired runs, "
                                       f"the rule needs >= {min_runs})")
    worst = max(a.max_over_min, b.max_over_min)
    if worst > spread_limit + EPSILON:
        return Verdict("inconclusive", f"inconclusive (spread {worst:.2f})")
    change = statistics.median(ratios) - 1.0
    if abs(change) <= threshold + EPSILON:
        return Verdict("no change", f"no change ({change:+.1%})")
    return Verdict("changed", f"changed: B {up if change > 0 else down} ({change:+.1%})")


@dataclass(frozen=True)
class Result:
    """One table summed up: each side's runs, the paired ratios and the two verdicts."""

    comparison: Comparison
    a: CellSummary
    b: CellSummary
    rps_ratios: list[float]
    cpu_ratios: list[float]
    rps_verdict: Verdict
    cpu_verdict: Verdict

    @property
    def rps_ratio(self) -> float | None:
        """Median of the paired B/A req/s ratios."""
        return statistics.median(self.rps_ratios) if self.rps_ratios else None

    @property
    def cpu_ratio(self) -> float | None:
        """Median of the paired B/A CPU µs/req ratios."""
        return statistics.median(self.cpu_ratios) if self.cpu_ratios else None

    def as_dict(self) -> dict[str, Any]:
        def side(row: CellSummary) -> dict[str, Any]:
            def spread(s: Spread | None) -> dict[str, Any] | None:
                return None if s is None else {"median": s.median, "min": s.low,
                                               "max": s.high, "max_over_min": s.max_over_min}
            return {"runs_ok": row.runs_ok, "runs_planned": row.runs_planned,
                    "failed": row.failed, "requests_per_sec": spread(row.rps),
                    "cpu_us_per_request": spread(row.cpu_us), "errors": row.errors,
                    "cpu_busy": row.cpu_busy, "other_cpu": row.other_cpu,
                    "steal_cpu": row.steal_cpu}
        return {"name": self.comparison.name, "mpm": self.comparison.mpm,
                "scenario": self.comparison.scenario.name, "A": side(self.a), "B": side(self.b),
                "requests_per_sec_ratios": self.rps_ratios, "requests_per_sec_ratio": self.rps_ratio,
                "cpu_ratios": self.cpu_ratios, "cpu_ratio": self.cpu_ratio,
                "requests_per_sec_verdict": self.rps_verdict.text,
                "cpu_verdict": self.cpu_verdict.text}


def compare(table: Comparison, a_runs: list[dict[str, Any]], b_runs: list[dict[str, Any]],
            planned: int, *, threshold: float = NO_CHANGE_THRESHOLD,
            spread_limit: float = SPREAD_LIMIT, min_runs: int = MIN_RUNS) -> Result:
    """Sum up one table: each side's medians and spreads, and the verdicts on req/s (higher is
    faster) and on server CPU µs/req (higher is costlier)."""
    a = summarise("A", a_runs, planned)
    b = summarise("B", b_runs, planned)
    rps = paired_ratios(a_runs, b_runs, rate)
    cpu = paired_ratios(a_runs, b_runs, cpu_per_request)
    return Result(table, a, b, rps, cpu,
                  verdict(rps, a.rps, b.rps, threshold=threshold, spread_limit=spread_limit,
                          min_runs=min_runs, up="faster", down="slower"),
                  verdict(cpu, a.cpu_us, b.cpu_us, threshold=threshold,
                          spread_limit=spread_limit, min_runs=min_runs, up="costlier",
                          down="cheaper"))


# --------------------------------------------------------------------------- markdown


def figure(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def max_over_min(spread: Spread | None) -> str:
    return "–" if spread is None else f"{spread.max_over_min:.2f}"


def ratio_text(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def per_run(runs: list[dict[str, Any]], value: Callable[[dict[str, Any]], float],
            digits: int) -> str:
    return ", ".join("failed" if r.get("failed") else f"{value(r):,.{digits}f}" for r in runs)


def table_lines(result: Result, a_runs: list[dict[str, Any]],
                b_runs: list[dict[str, Any]]) -> list[str]:
    """One table's markdown: the two figures as rows, then each side's runs and failures."""
    a, b = result.a, result.b
    lines = ["| figure | A median | B median | B/A (median of pairs) | A max/min | B max/min "
             "| verdict |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
             f"| req/s | {figure(a.rps.median if a.rps else None, 0)} "
             f"| {figure(b.rps.median if b.rps else None, 0)} | {ratio_text(result.rps_ratio)} "
             f"| {max_over_min(a.rps)} | {max_over_min(b.rps)} | {result.rps_verdict.text} |",
             f"| server CPU µs/req | {figure(a.cpu_us.median if a.cpu_us else None, 1)} "
             f"| {figure(b.cpu_us.median if b.cpu_us else None, 1)} "
             f"| {ratio_text(result.cpu_ratio)} | {max_over_min(a.cpu_us)} "
             f"| {max_over_min(b.cpu_us)} | {result.cpu_verdict.text} |",
             ""]
    for label, row, runs in (("A", a, a_runs), ("B", b, b_runs)):
        lines.append(f"- {label} req/s by run: {per_run(runs, rate, 0)}; CPU µs/req: "
                     f"{per_run(runs, cpu_per_request, 1)}; errors: {row.errors}; "
                     f"server CPU busy {row.cpu_busy:.0%}, other CPUs {row.other_cpu:.2f}, "
                     f"stolen {row.steal_cpu:.2f} (medians)")
        failures = [f"run {r['run']}: {r['failed']}" for r in runs if r.get("failed")]
        if failures:
            lines.append(f"- {label} failed: " + "; ".join(failures))
    return lines + [""]


def markdown(meta: dict[str, Any], results: list[Result],
             runs_of: Callable[[Comparison, str], list[dict[str, Any]]]) -> str:
    """The report of an A/B run. ``meta``: started, base and candidate ({rev, commit,
    tines}), plan ({runs, warmup_s, duration_s, connections, threshold, spread_limit,
    min_runs}), load, machine, commands; ``runs_of(comparison, side)`` a side's runs."""
    base, candidate, plan_ = meta["base"], meta["candidate"], meta["plan"]
    lines = [f"# Before/after {meta['started']}: {base['commit'][:12]} (A) against "
             f"{candidate['commit'][:12]}{' + uncommitted changes' if candidate['dirty'] else ''}"
             " (B)", ""]
    if plan_["runs"] < plan_["min_runs"]:
        lines += [f"**{plan_['runs']} run(s) per side: fewer than the rule's {plan_['min_runs']}, "
                  "so no verdict can hold; for trying the harness only.**", ""]
    lines += [
        f"- A (before): `{base['rev']}` = {base['commit']}, {base['tines']}",
        f"- B (after): {candidate['commit']}"
        f"{' with uncommitted changes' if candidate['dirty'] else ''}, {candidate['tines']}",
        "",
        f"{plan_['runs']} interleaved run(s) per side (A, B, A, B, ...; a fresh start each) of "
        f"{plan_['duration_s']:g} s after a {plan_['warmup_s']:g} s warm-up and the settle step, "
        f"{plan_['connections']} connections, one worker pinned to CPU 1, load ({meta['load']}, "
        "the same for both sides) on CPU 0. Medians; B/A is the median of the paired runs' "
        "ratios. Verdict: at least "
        f"{plan_['min_runs']} pairs and max/min <= {plan_['spread_limit']:.2f} on both sides, "
        f"then \"no change\" within ±{plan_['threshold']:.0%}, else \"changed\"; otherwise "
        "\"inconclusive\" (repeat the run).",
        "",
        "## Verdicts",
        "",
        "| table | req/s A | req/s B | B/A | req/s verdict | CPU µs/req A | CPU µs/req B | B/A "
        "| CPU verdict |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for r in results:
        lines.append(
            f"| {r.comparison.name} | {figure(r.a.rps.median if r.a.rps else None, 0)} "
            f"| {figure(r.b.rps.median if r.b.rps else None, 0)} | {ratio_text(r.rps_ratio)} "
            f"| {r.rps_verdict.text} "
            f"| {figure(r.a.cpu_us.median if r.a.cpu_us else None, 1)} "
            f"| {figure(r.b.cpu_us.median if r.b.cpu_us else None, 1)} "
            f"| {ratio_text(r.cpu_ratio)} | {r.cpu_verdict.text} |")
    lines.append("")
    for r in results:
        lines += [f"## {r.comparison.name}", ""]
        lines += table_lines(r, runs_of(r.comparison, "A"), runs_of(r.comparison, "B"))
    if meta.get("skipped"):
        lines += ["## Skipped", ""]
        lines += [f"- {name}: {reason}" for name, reason in meta["skipped"].items()] + [""]
    # A line starting "  - " is a sub-item of the line before it.
    lines += ["## Commands", ""] + [line if line.startswith("  - ") else f"- {line}"
                                    for line in meta.get("commands", [])] + [""]
    lines += ["## Machine", ""]
    lines += [f"- {key}: {value}" for key, value in meta.get("machine", {}).items()]
    return "\n".join(lines) + "\n"
