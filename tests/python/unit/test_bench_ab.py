"""Before/after runs (benches/ab.py, benches/ab_model.py), the parts that measure nothing: the
house rule's verdict, medians and max/min spreads, pairing A's and B's runs, the interleaving
plan, the report, choosing the baseline revision (on a real git repository) and bad input.
Fast: no server, no load generator, no build."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
BENCHES = REPO / "benches"
sys.path.insert(0, str(BENCHES))

import ab  # noqa: E402
import ab_model  # noqa: E402
from ab_model import Comparison, Step, verdict  # noqa: E402
from model import Scenario, Spread  # noqa: E402


def run(number: int, rps: float, cpu: float, *, failed: str | None = None) -> dict[str, Any]:
    """A measurement as ab.py records it (run.measure's fields plus its run number)."""
    return {"run": number, "failed": failed, "ok_per_sec": rps, "requests_per_sec": rps,
            "cpu_us_per_request": cpu, "latency_us": {"p50": 1000.0, "p99": 5000.0},
            "errors": {"total": 0}, "cpu_utilisation": 0.95, "peak_rss_kib": 40960,
            "other_cpu": 0.01, "steal_cpu": 0.0}


def runs(rps: list[float], cpu: list[float]) -> list[dict[str, Any]]:
    return [run(i, r, c) for i, (r, c) in enumerate(zip(rps, cpu), 1)]


def spread(values: list[float]) -> Spread:
    s = Spread.of(values)
    assert s is not None
    return s


TIGHT = spread([100.0, 101.0, 102.0, 103.0, 104.0])
HELLO = Comparison("prefork", Scenario("hello", "keep-alive", 50))
BLOG_CLOSE = Comparison("prefork", Scenario("blog", "close", 50))


# --------------------------------------------------------------------------- spreads


def test_max_over_min_is_the_largest_run_over_the_smallest() -> None:
    s = spread([110.0, 100.0, 105.0])
    assert s.median == 105.0
    assert s.max_over_min == pytest.approx(1.10)


def test_max_over_min_is_infinite_when_a_run_is_zero() -> None:
    assert spread([0.0, 50.0]).max_over_min == float("inf")


# --------------------------------------------------------------------------- the verdict


def test_a_median_ratio_within_the_threshold_with_tight_spreads_is_no_change() -> None:
    v = verdict([1.01, 0.99, 1.02, 1.00, 0.98], TIGHT, TIGHT)
    assert v.kind == "no change"
    assert v.text == "no change (+0.0%)"


def test_a_ratio_of_exactly_the_threshold_is_still_no_change() -> None:
    assert verdict([1.03] * 5, TIGHT, TIGHT).kind == "no change"
    assert verdict([0.97] * 5, TIGHT, TIGHT).kind == "no change"


def test_a_ratio_beyond_the_threshold_is_a_change_with_its_direction() -> None:
    up = verdict([1.05, 1.04, 1.06, 1.05, 1.05], TIGHT, TIGHT, up="faster", down="slower")
    assert (up.kind, up.text) == ("changed", "changed: B faster (+5.0%)")
    down = verdict([0.95, 0.96, 0.94, 0.95, 0.95], TIGHT, TIGHT, up="faster", down="slower")
    assert (down.kind, down.text) == ("changed", "changed: B slower (-5.0%)")


def test_the_median_of_the_ratios_decides_not_an_outlier() -> None:
    assert verdict([1.00, 1.01, 0.99, 1.30, 1.00], TIGHT, TIGHT).kind == "no change"


def test_the_threshold_is_a_parameter() -> None:
    ratios = [1.04] * 5
    assert verdict(ratios, TIGHT, TIGHT).kind == "changed"
    assert verdict(ratios, TIGHT, TIGHT, threshold=0.05).kind == "no change"


def test_a_spread_above_the_limit_on_either_side_is_inconclusive() -> None:
    wide = spread([100.0, 105.0, 111.0, 104.0, 103.0])
    for a, b in ((wide, TIGHT), (TIGHT, wide)):
        v = verdict([1.0] * 5, a, b)
        assert (v.kind, v.text) == ("inconclusive", "inconclusive (spread 1.11)")
    # Even a large change is not called one on such runs.
    assert verdict([1.5] * 5, wide, TIGHT).kind == "inconclusive"


def test_a_spread_of_exactly_the_limit_holds() -> None:
    limit = spread([100.0, 110.0, 105.0, 104.0, 106.0])
    assert verdict([1.0] * 5, limit, limit).kind == "no change"


def test_fewer_than_five_paired_runs_is_inconclusive() -> None:
    v = verdict([1.0] * 4, TIGHT, TIGHT)
    assert (v.kind, v.text) == ("inconclusive", "inconclusive (4 paired runs, the rule needs >= 5)")
    assert verdict([1.0] * 4, TIGHT, TIGHT, min_runs=4).kind == "no change"


def test_no_successful_pair_is_inconclusive() -> None:
    assert verdict([], TIGHT, TIGHT).kind == "inconclusive"
    assert verdict([1.0] * 5, None, TIGHT).kind == "inconclusive"


# --------------------------------------------------------------------------- pairing, compare


def test_ratios_pair_runs_by_number_and_skip_a_failed_side() -> None:
    a = [run(1, 100.0, 10.0), run(2, 200.0, 10.0, failed="start: boom"), run(3, 50.0, 10.0)]
    b = [run(1, 110.0, 10.0), run(2, 210.0, 10.0), run(3, 60.0, 10.0, failed="load: x")]
    assert ab_model.paired_ratios(a, b, lambda r: float(r["ok_per_sec"])) == [1.1]


def test_compare_gives_medians_ratios_and_both_verdicts() -> None:
    a = runs([1000, 1010, 990, 1005, 995], [100.0, 101.0, 99.0, 100.5, 99.5])
    b = runs([1100, 1111, 1089, 1105, 1095], [100.0, 101.0, 99.0, 100.5, 99.5])
    result = ab_model.compare(HELLO, a, b, 5)
    assert result.a.rps is not None and result.b.rps is not None
    assert (result.a.rps.median, result.b.rps.median) == (1000, 1100)
    assert result.rps_ratio == pytest.approx(1.1)
    assert result.rps_verdict.text == "changed: B faster (+10.0%)"
    assert result.cpu_ratio == pytest.approx(1.0)
    assert result.cpu_verdict.text == "no change (+0.0%)"
    data = result.as_dict()
    assert data["name"] == "tines-prefork hello/keep-alive/c50"
    assert data["A"]["requests_per_sec"]["max_over_min"] == pytest.approx(1010 / 990)
    assert data["cpu_verdict"] == "no change (+0.0%)"


def test_higher_cpu_per_request_is_called_costlier() -> None:
    a = runs([1000] * 5, [100.0] * 5)
    b = runs([1000] * 5, [90.0] * 5)
    assert ab_model.compare(HELLO, a, b, 5).cpu_verdict.text == "changed: B cheaper (-10.0%)"
    assert ab_model.compare(HELLO, b, a, 5).cpu_verdict.text == "changed: B costlier (+11.1%)"


def test_a_side_with_every_run_failed_is_inconclusive() -> None:
    a = [run(i, 0.0, 0.0, failed="start: exited with 1") for i in range(1, 6)]
    b = runs([1000] * 5, [100.0] * 5)
    result = ab_model.compare(HELLO, a, b, 5)
    assert result.a.failed == "start: exited with 1"
    assert result.rps_verdict.kind == result.cpu_verdict.kind == "inconclusive"


# --------------------------------------------------------------------------- the plan


def test_the_plan_interleaves_a_and_b_run_by_run() -> None:
    steps = ab_model.plan([HELLO, BLOG_CLOSE], 2)
    assert steps == [Step(1, HELLO, "A"), Step(1, HELLO, "B"), Step(1, BLOG_CLOSE, "A"),
                     Step(1, BLOG_CLOSE, "B"), Step(2, HELLO, "A"), Step(2, HELLO, "B"),
                     Step(2, BLOG_CLOSE, "A"), Step(2, BLOG_CLOSE, "B")]


def test_the_default_tables_are_prefork_on_hello_and_blog_keep_alive_and_close() -> None:
    tables = ab_model.comparisons(["prefork"], ["hello", "blog"], ["keep-alive", "close"], 50)
    assert [t.name for t in tables] == [
        "tines-prefork hello/keep-alive/c50", "tines-prefork hello/close/c50",
        "tines-prefork blog/keep-alive/c50", "tines-prefork blog/close/c50"]
    assert tables[0].server("A") == "tines-prefork-A"
    default = ab.checked(ab.parse_args([]))
    assert default[0] == tables and default[1].runs == 5 and default[1].duration_s == 5.0


# --------------------------------------------------------------------------- the report


def meta(number_of_runs: int) -> dict[str, Any]:
    return {"started": "2026-11-24-1000",
            "base": {"rev": "main", "commit": "a" * 40, "tines": "tines 0.1.0"},
            "candidate": {"commit": "b" * 40, "dirty": True, "tines": "tines 0.1.0"},
            "plan": {"runs": number_of_runs, "warmup_s": 1.0, "duration_s": 5.0,
                     "connections": 50, "threshold": 0.03, "spread_limit": 1.10,
                     "min_runs": 5},
            "load": "tines bench", "machine": {"nproc": 2},
            "commands": ["this run: `x`", "A's build:", "  - `make`"]}


def test_the_report_has_a_verdict_table_and_one_table_per_comparison() -> None:
    a = runs([1000, 1010, 990, 1005, 995], [100.0] * 5)
    b = runs([1000, 1010, 990, 1005, 995], [100.0] * 5)
    result = ab_model.compare(HELLO, a, b, 5)
    text = ab_model.markdown(meta(5), [result], lambda _t, side: a if side == "A" else b)
    assert "aaaaaaaaaaaa (A) against bbbbbbbbbbbb + uncommitted changes (B)" in text
    assert ("| tines-prefork hello/keep-alive/c50 | 1,000 | 1,000 | 1.000 | no change (+0.0%) "
            "| 100.0 | 100.0 | 1.000 | no change (+0.0%) |") in text
    assert "## tines-prefork hello/keep-alive/c50" in text
    assert "| req/s | 1,000 | 1,000 | 1.000 | 1.02 | 1.02 | no change (+0.0%) |" in text
    assert "- A req/s by run: 1,000, 1,010, 990, 1,005, 995;" in text
    assert "fewer than the rule's" not in text
    assert "- this run: `x`\n- A's build:\n  - `make`\n" in text


def test_a_report_of_fewer_runs_than_the_rule_says_so() -> None:
    a = runs([1000, 1010], [100.0] * 2)
    result = ab_model.compare(HELLO, a, a, 2)
    text = ab_model.markdown(meta(2), [result], lambda _t, _side: a)
    assert "fewer than the rule's 5, so no verdict can hold" in text
    assert "inconclusive (2 paired runs, the rule needs >= 5)" in text


# --------------------------------------------------------------------------- the baseline


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """main with two commits; the branch ``change`` forks from main's second and adds two."""
    git(tmp_path, "init", "--quiet", "--initial-branch", "main")
    for key, value in (("user.email", "ab@example.invalid"), ("user.name", "ab")):
        git(tmp_path, "config", key, value)
    for message in ("one", "two"):
        git(tmp_path, "commit", "--quiet", "--allow-empty", "-m", message)
    git(tmp_path, "switch", "--quiet", "-c", "change")
    for message in ("three", "four"):
        git(tmp_path, "commit", "--quiet", "--allow-empty", "-m", message)
    git(tmp_path, "switch", "--quiet", "main")
    git(tmp_path, "commit", "--quiet", "--allow-empty", "-m", "main moves on")
    git(tmp_path, "switch", "--quiet", "change")
    return tmp_path


def test_without_a_base_a_is_where_a_multi_commit_change_left_the_branch(
        repository: Path) -> None:
    base = ab.resolve_base(repository, None, "main")
    assert base.commit == git(repository, "rev-parse", "HEAD~2")
    assert base.commit != git(repository, "rev-parse", "main")
    assert base.rev == "merge-base of HEAD and main"


def test_an_explicit_base_is_resolved_to_its_full_commit(repository: Path) -> None:
    assert ab.resolve_base(repository, "HEAD~1", "main").commit == git(
        repository, "rev-parse", "HEAD~1")


def test_an_unknown_base_or_branch_is_bad_input(repository: Path) -> None:
    with pytest.raises(ab.BadInput, match="names no commit"):
        ab.resolve_base(repository, "no-such-rev", "main")
    with pytest.raises(ab.BadInput, match="no merge-base of HEAD and 'trunk'"):
        ab.resolve_base(repository, None, "trunk")


@pytest.mark.parametrize("flags, message", [
    (["--mpms", "prefork,fork"], "bench-ab: --mpms: fork is not one of prefork, thread, event"),
    (["--runs", "0"], "bench-ab: --runs 0: at least 1"),
    (["--base", "no-such-rev-anywhere"],
     "bench-ab: --base 'no-such-rev-anywhere' names no commit of this repository"),
])
def test_bad_input_is_one_line_on_stderr_and_exit_status_2(flags: list[str], message: str) -> None:
    result = subprocess.run([sys.executable, str(BENCHES / "ab.py"), *flags], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr, result.stdout) == (2, message + "\n", "")
