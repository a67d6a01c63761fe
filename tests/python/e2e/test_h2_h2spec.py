"""h2spec (summerwind/h2spec 2.x, every case, strict mode, ``-o 5``) against Tines on every
MPM (event also with the app on the loop's thread) and an ASGI app: an ``h2c:`` listener and
h2 over TLS pass every case, none skipped (the app's answer is long enough for the
flow-control cases that need DATA); an ``http1+h2c:`` listener fails exactly ``http2/3.5/2``
(an invalid preface: there it is taken for an HTTP/1.1 request and answered as one,
docs/http2.md). The JUnit report is parsed, so a failure names its cases and what h2spec
said."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from h2_tools import SERVED, SERVED_IDS, WSGI, run_h2spec, serve_h2c
from tls_certs import TlsCerts
from tls_clients import tls_args

BAD_PREFACE = "http2/3.5/2"
EVERY = [*SERVED, (WSGI, "event", "--threads", "0")]
"""Every MPM, an ASGI app, and event with the app on the loop's thread (its streams one at a
time, each blocking call driving the connection itself: ADR 0035)."""
EVERY_IDS = [*SERVED_IDS, "event-inline"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("served", EVERY, ids=EVERY_IDS)
def test_every_h2spec_case_passes_on_an_h2c_listener(tines_server: Any, tmp_path: Path,
                                                     served: tuple[str, ...]) -> None:
    _, port = serve_h2c(tines_server, served)
    report = run_h2spec(port, tmp_path)
    assert not report.failed and not report.skipped, report.summary()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("served", EVERY, ids=EVERY_IDS)
def test_every_h2spec_case_passes_over_tls(tines_server: Any, tmp_path: Path, tls_certs: TlsCerts,
                                           served: tuple[str, ...]) -> None:
    app, *options = served
    server = tines_server(app, "-w", "1", *(["--mpm", *options] if options else []), *tls_args(tls_certs.localhost))
    report = run_h2spec(server.port, tmp_path, tls=True)
    assert not report.failed and not report.skipped, report.summary()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("served", EVERY, ids=EVERY_IDS)
def test_a_listener_that_speaks_both_fails_only_the_invalid_preface_case(tines_server: Any, tmp_path: Path,
                                                                        served: tuple[str, ...]) -> None:
    _, port = serve_h2c(tines_server, served, mode="http1+h2c")
    report = run_h2spec(port, tmp_path)
    assert list(report.failed) == [BAD_PREFACE] and not report.skipped, report.summary()
