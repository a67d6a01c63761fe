"""What the HTTP/2 end-to-end tests (tests/python/e2e/test_h2_*.py) share: the servers they
start (an ``h2c:`` or ``http1+h2c:`` bind beside the default one, or h2 over TLS by ALPN), and
the outside programs they run with the results parsed: h2spec (its JUnit report, so a failure
names its cases), h2load (its request counts), nghttp and curl. This module starts no server by
itself and asserts nothing: the tests do.
"""

from __future__ import annotations

import re
import subprocess
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conftest import Server, debian_tool, go_tool

H2SPEC_PACKAGE = "github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible"
"""h2spec 2.x as the Go module proxy serves it (the issue's commit af83a65 is refused there)."""
H2SPEC_TIMEOUT = 5
"""h2spec's ``-o``: seconds each case waits for the server (the default 2 is short on a busy VM)."""
TOOL_TIMEOUT = 240.0

WSGI = "h2_app:app"
ASGI = "h2_app:asgi"
MPMS = [("prefork",), ("thread", "--threads", "4"), ("event", "--threads", "2")]
"""``--mpm`` and its options, for the tests run on every MPM (WSGI)."""
MPM_IDS = ["prefork", "thread", "event"]
SERVED = [(WSGI, *mpm) for mpm in MPMS] + [(ASGI,)]
"""The app and its MPM options: every MPM, and an ASGI app."""
SERVED_IDS = [*MPM_IDS, "asgi"]


def one_stream(served: tuple[str, ...]) -> bool:
    """Whether the server advertises one stream at a time (prefork: SETTINGS_MAX_CONCURRENT_
    STREAMS = 1). A client that opens more before it has read the server's SETTINGS (h2load
    ``-m 10``, nghttp with two URLs) has the others refused (REFUSED_STREAM), which h2load and
    nghttp count as errors instead of retrying: such clients keep to one stream there."""
    return "prefork" in served


def bind_port(server: Server, index: int) -> int:
    """The port of the ``index``-th bind of the server's ready line."""
    return int(str(server.ready["binds"][index]).rpartition(":")[2])  # type: ignore[index]


def serve_h2c(tines_server: Any, app_and_options: tuple[str, ...], *args: str, mode: str = "h2c",
              env: dict[str, str] | None = None, workers: int = 1) -> tuple[Server, int]:
    """``workers`` (one) serving ``app_and_options`` (the app, then its options) on the default
    HTTP/1.1 bind and on a ``mode:`` bind (``h2c`` or ``http1+h2c``); the server and the
    port of the second bind."""
    app, *options = app_and_options
    server: Server = tines_server(app, "-w", str(workers), *(["--mpm", *options] if options else []),
                                  "-b", f"{mode}:127.0.0.1:0", *args, env=env)
    return server, bind_port(server, 1)


# h2spec.

@dataclass
class H2specReport:
    """h2spec's verdict on every case, by its id (``http2/3.5/2``, ``hpack/4.2/1``, ...)."""

    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    """Failed or errored cases and what h2spec said."""
    skipped: list[str] = field(default_factory=list)
    output: str = ""

    def summary(self) -> str:
        """The failures and skips, one a line, for an assertion message."""
        lines = [f"{case}: {why}" for case, why in self.failed.items()]
        lines += [f"{case}: skipped" for case in self.skipped]
        return f"{len(self.passed)} passed; " + ("\n".join(lines) or "nothing else") + "\n" + self.output[-3000:]


def parse_junit(path: Path) -> H2specReport:
    """h2spec's ``-j`` report: a testsuite per section (``package`` = ``http2/3.5``), its
    testcases in order (the case number is the position), each with ``<error>``,
    ``<failure>`` or ``<skipped>`` when it did not pass."""
    report = H2specReport()
    for suite in ElementTree.parse(path).getroot().iter("testsuite"):
        for number, case in enumerate(suite.iter("testcase"), start=1):
            name = f"{case.get('package')}/{number}"
            problem = case.find("error")
            if problem is None:
                problem = case.find("failure")
            if problem is not None:
                report.failed[name] = f"{case.get('classname')}: {(problem.text or '').strip()}"
            elif case.find("skipped") is not None:
                report.skipped.append(name)
            else:
                report.passed.append(name)
    return report


def run_h2spec(port: int, tmp_path: Path, tls: bool = False) -> H2specReport:
    """Every h2spec case, strict mode, against 127.0.0.1:``port`` (``-t -k`` over TLS)."""
    h2spec = go_tool("h2spec", H2SPEC_PACKAGE)
    report_path = tmp_path / f"h2spec-{port}.xml"
    command = [h2spec, "-h", "127.0.0.1", "-p", str(port), "-o", str(H2SPEC_TIMEOUT), "-S", "-j", str(report_path)]
    if tls:
        command += ["-t", "-k"]
    result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                            timeout=TOOL_TIMEOUT, check=False)
    assert report_path.exists(), f"h2spec wrote no report (exit {result.returncode}): {result.stdout[-3000:]}"
    report = parse_junit(report_path)
    report.output = result.stdout + result.stderr
    # h2spec 2.x has 146 cases; fewer means it stopped early (a refused connection, say).
    assert len(report.passed) + len(report.failed) + len(report.skipped) == 146, report.summary()
    return report


# h2load (Debian's nghttp2-client).

H2LOAD_COUNTS = re.compile(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                           r"(\d+) failed, (\d+) errored, (\d+) timeout")
H2LOAD_STATUSES = re.compile(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx")


@dataclass
class H2loadResult:
    """h2load's request counts."""

    total: int
    done: int
    succeeded: int
    failed: int
    errored: int
    timeout: int
    ok: int
    """Responses with a 2xx status."""
    output: str


def parse_h2load(output: str) -> H2loadResult:
    """The counts from h2load's final report."""
    counts = H2LOAD_COUNTS.search(output)
    statuses = H2LOAD_STATUSES.search(output)
    assert counts is not None and statuses is not None, f"no h2load report in: {output[-3000:]}"
    total, _, done, succeeded, failed, errored, timeout = (int(value) for value in counts.groups())
    return H2loadResult(total, done, succeeded, failed, errored, timeout, int(statuses.group(1)), output)


def h2load_command(url: str, requests: int, clients: int, streams: int, *extra: str) -> list[str]:
    """h2load with ``requests`` in all over ``clients`` connections, ``streams`` at a time on
    each (``-m``); an ``http://`` URL is h2c with prior knowledge, ``https://`` negotiates h2."""
    return [debian_tool("h2load", "nghttp2-client"), "-n", str(requests), "-c", str(clients),
            "-m", str(streams), *extra, url]


def run_h2load(url: str, requests: int, clients: int, streams: int, *extra: str) -> H2loadResult:
    """Run h2load to the end; its counts."""
    result = subprocess.run(h2load_command(url, requests, clients, streams, *extra), stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=TOOL_TIMEOUT, check=False)
    return parse_h2load(result.stdout + result.stderr)
