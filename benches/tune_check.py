"""`tines tune` on apps whose right answer is known, live (part of `make bench`; alone:
`make bench-tune`).

Each app in benches/apps/tune/ is tuned with `--budget` (default 90 s) and its recommendation
checked against the answer the app was written to have:

| app | right answer |
| --- | --- |
| cpu_bound.py (about 1 ms of hashing per request) | prefork, workers = CPUs |
| sleepy.py (sleeps 50 ms per request) | event (or thread) with many threads |
| leaky.py (keeps 50 KB per request) | max_requests from a leak rate near 50 KB/request |
| big_import.py (50 MB built at import) | preload, saving most of those 50 MB per worker |

The table goes to benches/results/tune-DATE.md; the exit status is 1 when an answer is wrong.
`--record` also copies each run's measurements.json to tests/python/unit/tune_fixtures/, the
recorded runs the recommender's unit tests read.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
APPS = ROOT / "benches" / "apps" / "tune"
FIXTURES = ROOT / "tests" / "python" / "unit" / "tune_fixtures"
RESULTS = ROOT / "benches" / "results"
MiB = 1024 * 1024

Check = Callable[[dict[str, Any], dict[str, Any]], str | None]


def _item(rec: dict[str, Any], setting: str) -> Any:
    return next((i["value"] for i in rec["items"] if i["setting"] == setting), None)


def cpu_bound(doc: dict[str, Any], rec: dict[str, Any]) -> str | None:
    cpus = doc["machine"]["target_cpus"]
    if _item(rec, "mpm") != "prefork" or _item(rec, "workers") != cpus:
        return f"expected prefork with {cpus} workers, got {_item(rec, 'mpm')} x{_item(rec, 'workers')}"
    return None


def sleepy(doc: dict[str, Any], rec: dict[str, Any]) -> str | None:
    threads = _item(rec, "threads") or 0
    if _item(rec, "mpm") not in ("event", "thread") or threads < 32:
        return f"expected event/thread with many threads, got {_item(rec, 'mpm')} with {threads} threads"
    return None


def leaky(doc: dict[str, Any], rec: dict[str, Any]) -> str | None:
    leak = next((i["evidence"].get("leak") for i in rec["items"] if i["setting"] == "max_requests"), None)
    if not _item(rec, "max_requests") or not leak:
        return "expected max_requests from a leak rate, got none"
    if not 40_000 <= leak["bytes_per_request"] <= 60_000:
        return f"leak rate {leak['bytes_per_request']:.0f} B/request, expected about 50,000"
    return None


def big_import(doc: dict[str, Any], rec: dict[str, Any]) -> str | None:
    item = next((i for i in rec["items"] if i["setting"] == "preload"), None)
    if not item or item["value"] is not True or item["evidence"].get("saving_per_worker", 0) < 40 * MiB:
        return f"expected preload saving about 50 MiB per worker, got {item and item['why']}"
    return None


CHECKS: dict[str, Check] = {"cpu_bound": cpu_bound, "sleepy": sleepy, "leaky": leaky, "big_import": big_import}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", default="90s", help="each run's --budget (default: 90s)")
    parser.add_argument("--apps", default=",".join(CHECKS), help="comma-separated: " + ", ".join(CHECKS))
    parser.add_argument("--record", action="store_true", help="copy the measurements into the unit tests' fixtures")
    parser.add_argument("--out", type=Path, default=RESULTS / "tmp" / "tune")
    args = parser.parse_args()
    rows, failures = [], 0
    for name in args.apps.split(","):
        out = args.out / name
        print(f"tune_check: {name} (budget {args.budget})", file=sys.stderr, flush=True)
        proc = subprocess.run([sys.executable, "-m", "tines", "tune", f"benches/apps/tune/{name}.py:app",
                               "--budget", args.budget, "--json", "--out", str(out)],
                              cwd=ROOT, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            rows.append((name, "run failed", proc.stderr.strip().splitlines()[-1:]))
            failures += 1
            continue
        document = json.loads(proc.stdout)
        doc, rec = document["measurements"], document["recommendation"]
        wrong = CHECKS[name](doc, rec)
        failures += wrong is not None
        rows.append((name, "wrong: " + wrong if wrong else "right", rec["settings"]))
        if args.record:
            doc["app"] = f"benches/apps/tune/{name}.py:app"
            FIXTURES.mkdir(parents=True, exist_ok=True)
            (FIXTURES / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    lines = [f"# tines tune right-answer runs, {stamp}", "",
             f"`python benches/tune_check.py --budget {args.budget}`", "",
             "| app | verdict | settings |", "| --- | --- | --- |"]
    lines += [f"| {name} | {verdict} | `{json.dumps(settings)}` |" for name, verdict, settings in rows]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"tune-{stamp}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
