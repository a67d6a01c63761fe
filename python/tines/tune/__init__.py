"""``tines tune``: measure the app under Tines and recommend its settings (docs/tuning.md).

The mod_perl guide's procedure, automated: benchmark the app, watch how big each worker grows
and how much it shares, then size the pool, the MPM and the recycling from those numbers.

- ``tines.tune.plan``: what to run, within the budget (the phases, the measurements document);
- ``tines.tune.measure``: one server started on 127.0.0.1 and the loads driven at it;
- ``tines.tune.recommend``: the settings from the measurements (pure, unit-tested on fixtures);
- ``tines.tune.report``: the text summary, ``tines.toml`` and the HTML report.

Its flags are its own (not settings); the flags after ``--`` go to every ``tines serve`` it
starts (``--hooks``, ``--chdir``, ...), and are written into the ``tines.toml`` it proposes.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from tines.config import size
from tines.tune.measure import TuneError

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"tines tune: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tines tune", allow_abbrev=False,
        usage="tines tune APP [options] [-- SERVE FLAGS...]",
        description="Run APP under Tines on 127.0.0.1 several times (the MPMs, workers, threads, "
                    "preload), drive load at it with the built-in load generator, and recommend "
                    "settings with the measurements that justify them: a text summary, a "
                    "commented tines.toml, --json, and an HTML report with plots (in --out). "
                    "Flags after -- go to every 'tines serve' it starts (such as --hooks). "
                    "Ctrl-C stops and reports what was measured.",
        epilog="Exit status: 0 when the run completed; 1 when a phase failed after the probe (the "
               "files hold what was measured before); 2 for a bad APP, flag, setting or URL (one "
               "line on stderr); 130 after Ctrl-C. Procedure and rules: docs/tuning.md.")
    parser.add_argument("app", metavar="APP", help="the app, as 'tines serve' takes it")
    parser.add_argument("--url", dest="urls", action="append", default=[], metavar="PATH",
                        help="a path to request (repeatable; default: /); used round-robin")
    parser.add_argument("--requests-file", type=Path, metavar="FILE",
                        help="one request per line: PATH or METHOD PATH (a URL's host is ignored); "
                             "a line '# tines-tune: visit=N think=SECONDS' declares the client mix "
                             "(keep-alive advice)")
    parser.add_argument("--memory-budget", metavar="SIZE",
                        help="memory the server may use in all (4GiB, 512MiB; default: this "
                             "machine's MemAvailable)")
    parser.add_argument("--cpus", type=int, metavar="N",
                        help="CPUs the server will have in production (default: this machine's)")
    parser.add_argument("--budget", default="5m", metavar="DURATION",
                        help="cap on the whole run: 90s, 5m, 1h (default: 5m)")
    parser.add_argument("--out", type=Path, default=Path("tines-tune"), metavar="DIR",
                        help="where tines.toml, report.html, measurements.json and the servers' "
                             "log go (default: ./tines-tune)")
    parser.add_argument("--bursty", action="store_true",
                        help="the load comes in bursts: recommend a dynamic pool (max_workers and "
                             "the spare bounds) instead of a fixed worker count")
    trust = parser.add_mutually_exclusive_group()
    trust.add_argument("--insecure", action="store_true",
                       help="when the server speaks TLS (a certfile after -- or in the config "
                            "file): accept its certificate unchecked (tines bench --insecure)")
    trust.add_argument("--cacert", type=Path, metavar="FILE",
                       help="when the server speaks TLS: check its certificate against the CA "
                            "certificates of FILE, for the name localhost (tines bench --cacert)")
    parser.add_argument("--http2", action="store_true",
                        help="load the server over HTTP/2 (tines bench --http2): h2 by ALPN when "
                             "it speaks TLS, else h2c with prior knowledge (bind it h2c:HOST:PORT "
                             "or http1+h2c:HOST:PORT after --)")
    parser.add_argument("--streams", type=int, metavar="N",
                        help="with --http2: streams in flight per connection (default 10; the "
                             "concurrency the tuner tries is then in connections)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document (measurements and recommendation) instead "
                             "of the text summary")
    return parser


def parse_duration(text: str) -> float:
    from tines.tune.plan import parse_seconds

    try:
        value = parse_seconds(text.strip())
    except ValueError:
        raise TuneError(f"--budget {text!r} is not a duration (90s, 5m, 1h)", status=2) from None
    if not math.isfinite(value) or value <= 0:
        raise TuneError(f"--budget must be a positive, finite duration, got {text!r}", status=2)
    return value


def main(argv: Sequence[str]) -> int:
    """``tines tune ARGV``; the exit status."""
    words = list(argv)
    serve_args: list[str] = []
    if "--" in words:
        cut = words.index("--")
        words, serve_args = words[:cut], words[cut + 1:]
    arguments = build_parser().parse_args(words)
    from tines.tune import plan, recommend, report

    try:
        if arguments.cpus is not None and arguments.cpus <= 0:
            raise TuneError(f"--cpus must be positive, got {arguments.cpus}", status=2)
        budget_bytes = None
        if arguments.memory_budget is not None:
            try:
                budget_bytes = size(arguments.memory_budget)
            except ValueError as error:
                raise TuneError(f"--memory-budget {arguments.memory_budget!r} {error}", status=2) from None
            if budget_bytes <= 0:
                raise TuneError("--memory-budget must be positive", status=2)
        if arguments.requests_file is not None and not arguments.requests_file.is_file():
            raise TuneError(f"--requests-file {str(arguments.requests_file)!r} is not a readable file", status=2)
        if arguments.cacert is not None and not arguments.cacert.is_file():
            raise TuneError(f"--cacert {str(arguments.cacert)!r} is not a readable file", status=2)
        tls_trust = (["--insecure"] if arguments.insecure else
                     ["--cacert", str(arguments.cacert.resolve())] if arguments.cacert is not None
                     else [])
        if arguments.streams is not None and not arguments.http2:
            raise TuneError("--streams is for HTTP/2: add --http2", status=2)
        if arguments.streams is not None and arguments.streams <= 0:
            raise TuneError(f"--streams must be positive, got {arguments.streams}", status=2)
        http2_streams = ((arguments.streams or 10) if arguments.http2 else None)
        for url in arguments.urls:
            if not url.startswith("/"):
                raise TuneError(f"--url {url!r} is not a path (/...): tines tune only loads its own "
                                "server on 127.0.0.1", status=2)
        options = plan.Options(
            app=arguments.app, urls=arguments.urls, requests_file=arguments.requests_file,
            memory_budget=budget_bytes, cpus=arguments.cpus, budget_s=parse_duration(arguments.budget),
            out=arguments.out, bursty=arguments.bursty, serve_args=plan.serve_flags_of(serve_args),
            tls_trust=tls_trust, http2_streams=http2_streams)
        tuner = plan.Tuner(options)
        doc = tuner.run()
    except TuneError as error:
        if error.detail:
            sys.stderr.write(error.detail.rstrip() + "\n")
        print(f"tines tune: error: {error}", file=sys.stderr)
        return error.status
    rec = recommend.recommend(doc)
    out = options.out
    (out / "measurements.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "recommendation.json").write_text(json.dumps(rec.as_dict(), indent=1) + "\n")
    (out / "tines.toml").write_text(report.toml(rec, doc))
    (out / "report.html").write_text(report.report_html(rec, doc))
    if arguments.json:
        json.dump({"schema": recommend.SCHEMA, "measurements": doc, "recommendation": rec.as_dict(),
                   "files": {name: str(out / name) for name in
                             ("tines.toml", "report.html", "measurements.json", "servers.log")}},
                  sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(report.text(rec, doc))
        sys.stdout.write(f"\nWrote {out / 'tines.toml'}, {out / 'report.html'} and {out / 'measurements.json'}.\n")
    if doc.get("failed"):
        failed = doc["failed"]
        if failed.get("detail"):
            sys.stderr.write(failed["detail"].rstrip() + "\n")
        print(f"tines tune: error: {failed['phase']} failed: {failed['error']} (the report shows what was "
              "measured before)", file=sys.stderr)
        return 1
    return 130 if doc.get("interrupted") else 0
