"""``tines bench`` (the Rust load generator, run in-process) against a real ``tines serve``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import APPS, ROOT, Server, wait_until


def bench(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(APPS))
    return subprocess.run([sys.executable, "-m", "tines", "bench", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)


def access_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_completed_requests_equal_the_access_log(tines_server: Callable[..., Server], tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    server = tines_server("hello_pid:app", "-w", "2", "--access-log", str(log))
    result = bench("-c", "4", "-t", "2", "-n", "300", "--json", server.url + "/")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["schema"] == 1 and report["tool"] == "tines bench"
    assert report["requests"] == 300 and report["ok"] == 300
    assert report["errors"]["total"] == 0 and report["in_flight_at_end"] == 0
    assert report["status_counts"] == {"200": 300}
    for key in ("min", "mean", "stdev", "max", "p50", "p75", "p90", "p99", "p99_9", "p99_99"):
        assert key in report["latency_us"] and key in report["connect_us"] and key in report["first_byte_us"]
    assert report["latency_us"]["min"] <= report["latency_us"]["p50"] <= report["latency_us"]["max"]
    # The server's own count: one access-log line per completed response.
    wait_until(lambda: access_lines(log) >= 300, what="300 access-log lines")
    assert access_lines(log) == 300


@pytest.mark.parametrize("size", [5, 300, 70_000])
def test_websocket_echo_mode_counts_one_request_per_message_and_its_echo(
        tines_server: Callable[..., Server], size: int) -> None:
    server = tines_server("asgi_websocket:app", "-w", "1")
    ws_url = f"ws://127.0.0.1:{server.port}/echo"
    result = bench("-c", "4", "-t", "1", "-n", "300", "--json", "--ws-message", "m" * size, ws_url)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["requests"] == 300 and report["ok"] == 300 and report["errors"]["total"] == 0
    # The app received every message (4 connections, one message in flight on each).
    assert httpx.get(server.url + "/messages", timeout=20).text == "300"


def test_open_loop_rate_within_5_percent(tines_server: Callable[..., Server]) -> None:
    server = tines_server("hello_pid:app", "-w", "1")
    result = bench("-R", "50", "-d", "2s", "-c", "4", "-t", "1", "--json", server.url + "/")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    achieved = report["requests"] / report["elapsed_s"]
    assert abs(achieved - 50) <= 2.5, report
    assert report["config"]["rate"] == 50


def test_text_summary_and_html(tines_server: Callable[..., Server], tmp_path: Path) -> None:
    server = tines_server("hello_pid:app", "-w", "1")
    page = tmp_path / "report.html"
    result = bench("-c", "2", "-n", "50", "--html", str(page), server.url + "/")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no progress line without a terminal
    for label in ("Requests completed:  50", "Requests per second:", "Connection times (ms)", "99.99%", "200: 50"):
        assert label in result.stdout, result.stdout
    html = page.read_text()
    assert "<script src" not in html and '"requests":50' in html


def embedded(page: str, element: str) -> Any:
    """The JSON the report page embeds in ``<script id=element>``."""
    start = f'<script id="{element}" type="application/json">'
    body = page[page.index(start) + len(start):]
    return json.loads(body[:body.index("</script>")])


def test_a_url_that_always_redirects_is_broken_down_by_status_and_warned_about(
        tines_server: Callable[..., Server], tmp_path: Path) -> None:
    server = tines_server("redirect:app", "-w", "1")
    page = tmp_path / "report.html"
    result = bench("-c", "2", "-n", "40", "--html", str(page), server.url + "/")
    assert result.returncode == 0, result.stderr  # a 3xx is not a failure...
    warning = ("most responses were not 2xx: 40 of 40 (100%) were 302: 40; tines bench does not follow "
               "redirects, so the figures are of the redirects (check the URL)")
    # ...but the summary says what was measured, right under the breakdown by status.
    assert f"Status codes:        302: 40\nWarning: {warning}\n" in result.stdout, result.stdout
    data = embedded(page.read_text(), "data")
    assert data["status_counts"] == {"302": 40} and data["warnings"] == [warning]

    result = bench("-c", "2", "-n", "40", "--json", server.url + "/")
    report = json.loads(result.stdout)
    assert report["status_counts"] == {"302": 40} and report["warnings"] == [warning]


def test_the_report_plots_the_partial_last_second_as_a_rate(tines_server: Callable[..., Server],
                                                            tmp_path: Path) -> None:
    server = tines_server("hello_pid:app", "-w", "1")
    page = tmp_path / "report.html"
    result = bench("-c", "2", "-t", "1", "-d", "1500ms", "--json", "--html", str(page), server.url + "/")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    timeline = report["timeline"]
    assert [p["t_s"] for p in timeline] == [0, 1]
    assert timeline[0]["duration_s"] == 1
    assert timeline[1]["duration_s"] == pytest.approx(report["elapsed_s"] - 1)
    assert report["warnings"] == [] and report["errors"]["total"] == 0
    plots = embedded(page.read_text(), "plots")
    assert plots["throughput"]["series"][0]["points"] == [
        [p["t_s"], pytest.approx(p["requests"] / p["duration_s"])] for p in timeline]
    assert plots["errors"]["series"][0]["points"] == [] and plots["errors"]["empty"] == "no errors"


def test_ctrl_c_prints_results_so_far_and_restores_pythons_handler(
        tines_server: Callable[..., Server], tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    server = tines_server("hello_pid:app", "-w", "1", "--access-log", str(log))
    # The script installs the handler it checks afterwards: the one Python starts with depends on
    # the parent (SIG_IGN under nohup, in a background job and on some CI), and bench restores
    # whatever was there.
    script = textwrap.dedent(f"""
        import signal, sys
        from tines.cli import main
        def own_handler(signum, frame):
            print("python handler back", flush=True)
        signal.signal(signal.SIGINT, own_handler)
        code = main(["bench", "-c", "2", "-t", "1", "-d", "60s", "{server.url}/"])
        print("exit", code, flush=True)
        assert signal.getsignal(signal.SIGINT) is own_handler
        signal.raise_signal(signal.SIGINT)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, stdin=subprocess.DEVNULL)
    try:
        wait_until(lambda: access_lines(log) >= 20, what="the run to be under way")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "interrupted (Ctrl-C)" in out
    assert "exit 0" in out and "python handler back" in out


def assert_usage_error(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("tines bench: error: ") and fragment in result.stderr, result.stderr


def test_bad_url_scheme_host_and_flags_exit_2() -> None:
    assert_usage_error(bench("127.0.0.1:8000/"), "bad URL")
    assert_usage_error(bench("ftp://127.0.0.1/"), "unsupported scheme")
    assert_usage_error(bench("--cacert", "/no/such.pem", "https://127.0.0.1/"), "cannot read --cacert")
    assert_usage_error(bench("http://no-such-host.invalid/"), "cannot resolve host")
    assert_usage_error(bench("-c", "many", "http://127.0.0.1:1/"), "--connections")


def test_https_is_loaded_through_the_cli_with_insecure_or_the_ca() -> None:
    """`tines bench https://...` (issue 37) against Python's own TLS server: every request
    answered and counted, resumption seen; an untrusted certificate is a `tls` error."""
    import http.server
    import ssl
    import threading

    certs = ROOT / "crates" / "loadgen" / "tests" / "tls"

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs / "server.pem", certs / "server.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"https://localhost:{server.server_address[1]}/"
    try:
        for trust in (["--insecure"], ["--cacert", str(certs / "ca.pem")]):
            result = bench("-c", "2", "-t", "1", "-n", "40", "--no-keepalive", "--json", *trust, url)
            assert result.returncode == 0, result.stderr
            report = json.loads(result.stdout)
            assert report["ok"] == 40 and report["errors"]["total"] == 0
            handshakes = report["tls_handshakes"]
            assert handshakes["full"] + handshakes["resumed"] == 40 and handshakes["resumed"] > 0
        result = bench("-c", "1", "-n", "3", "--cacert", str(certs / "other-ca.pem"), url)
        assert result.returncode == 1
        assert "were tls errors" in result.stderr and "UnknownIssuer" in result.stderr, result.stderr
    finally:
        server.shutdown()
        server.server_close()


def test_all_requests_failing_exits_1_with_the_reason() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = bench("-c", "1", "-n", "5", f"http://127.0.0.1:{port}/")
    assert result.returncode == 1
    assert "every request failed" in result.stderr and "connect" in result.stderr


def test_help_shows_the_bench_flags() -> None:
    result = bench("--help")
    assert result.returncode == 0
    for flag in ("--connections", "--rate", "--warmup", "--json", "--html", "--no-keepalive"):
        assert flag in result.stdout
    top = subprocess.run([sys.executable, "-m", "tines", "--help"], capture_output=True, text=True, cwd=ROOT,
                         timeout=60)
    assert "bench" in top.stdout
