"""gunicorn's config file with ``-c`` (ADR 0039, docs/migrating.md): a real-looking
``gunicorn.conf.py`` serves a WSGI app with its settings, its ``post_fork`` logs into the error
log with ``server.log``, its ``pre_request``/``post_request`` get gunicorn's ``req``/``resp``,
and ``check-config`` shows the file as the settings' source; a uvicorn worker class serves an
ASGI app; a gunicorn setting Tines lacks stops the start with one line."""

from __future__ import annotations

import http.client
import multiprocessing
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import ROOT, http_get, wait_until
from test_cli_errors import assert_one_line_error

HELLO = "examples/hello.py:app"

GUNICORN_CONF = '''
import multiprocessing

bind = "127.0.0.1:8000"
workers = multiprocessing.cpu_count() * 2 + 1
worker_class = "sync"
timeout = 40
graceful_timeout = 20
keepalive = 4
accesslog = {access!r}
errorlog = {error!r}
loglevel = "info"
max_requests = 1000
max_requests_jitter = 50


def _describe(worker):
    return "worker %s" % worker.pid


def post_fork(server, worker):
    server.log.info("post_fork: %s of master %s, %d configured", _describe(worker), server.pid, server.cfg.workers)


def pre_request(worker, req):
    worker.log.info("pre_request: %s %s query=%s %s", req.method, req.path, req.query, dict(req.headers).get("X-TRACE"))


def post_request(worker, req, environ, resp):
    worker.log.info("post_request: %s %s -> %s sent=%d", req.method, req.path, resp.status, resp.sent)


def on_reload(server):
    server.log.info("never called")
'''


def write_conf(tmp_path: Path) -> tuple[Path, Path, Path]:
    conf, error_log, access_log = tmp_path / "gunicorn.conf.py", tmp_path / "error.log", tmp_path / "access.log"
    conf.write_text(GUNICORN_CONF.format(access=str(access_log), error=str(error_log)))
    return conf, error_log, access_log


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_gunicorn_conf_py_serves_with_its_settings_and_hooks(tines_server: Any, tmp_path: Path) -> None:
    conf, error_log, access_log = write_conf(tmp_path)
    workers = multiprocessing.cpu_count() * 2 + 1
    server = tines_server(HELLO, "-c", str(conf))
    forked = wait_until(lambda: [line for line in lines(error_log) if "post_fork: " in line]
                        if sum("post_fork: " in line for line in lines(error_log)) == workers else None,
                        what=f"{workers} post_fork lines")
    pids = set(server.worker_pids())
    assert len(pids) == workers
    for line in forked:  # type: ignore[union-attr]
        match = re.search(rf"\[INFO\] post_fork: worker (\d+) of master {server.pid}, {workers} configured$", line)
        assert match and int(match.group(1)) in pids, line
    log = error_log.read_text()
    assert "gunicorn hook on_reload is not run" in log and "never called" not in log

    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
    connection.request("GET", "/items/7?color=red", headers={"X-Trace": "t-1"})
    response = connection.getresponse()
    assert (response.status, response.read()) == (200, b"OK")
    connection.close()
    done = wait_until(lambda: [line for line in lines(error_log) if "post_request: " in line], what="post_request")
    [pre] = [line for line in lines(error_log) if "pre_request: " in line]
    assert pre.endswith("[INFO] pre_request: GET /items/7 query=color=red t-1"), pre
    assert done[0].endswith("[INFO] post_request: GET /items/7 -> 200 OK sent=2"), done  # type: ignore[index]
    assert re.search(r"\] \[(\d+)\] ", pre).group(1) == re.search(r"\] \[(\d+)\] ", done[0]).group(1)  # type: ignore[index, union-attr]
    wait_until(lambda: any("/items/7" in line for line in lines(access_log)), what="the access log line")
    status, _ = http_get(server.port, "/", close=True)
    assert status == 200


def test_check_config_shows_the_file_as_the_source(tmp_path: Path) -> None:
    conf, _, _ = write_conf(tmp_path)
    result = subprocess.run([sys.executable, "-m", "tines", "check-config", "-c", str(conf), HELLO],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    source = f"file {conf}"
    workers = multiprocessing.cpu_count() * 2 + 1
    for name, value in (("bind", r'\["127.0.0.1:8000"\]'), ("workers", str(workers)), ("mpm", '"prefork"'),
                        ("boot_timeout", "40"), ("request_timeout", "40"), ("keepalive_timeout", "4"),
                        ("max_requests", "1000"), ("hooks", re.escape(f'"{conf}"'))):
        assert re.search(rf"^{name} +{value}s? +{re.escape(source)}$", result.stdout, re.M), (name, result.stdout)
    assert re.search(r"^app +\"examples/hello.py:app\" +cli$", result.stdout, re.M)
    assert f"config file '{conf}': timeout: in gunicorn a worker silent" in result.stderr, result.stderr


def test_a_uvicorn_worker_class_serves_an_asgi_app(tines_server: Any, tmp_path: Path) -> None:
    conf = tmp_path / "gunicorn_asgi.conf.py"
    conf.write_text('workers = 1\nworker_class = "uvicorn.workers.UvicornWorker"\n')
    server = tines_server("asgi_app:app", "-c", str(conf))
    status, body = http_get(server.port, "/", close=True)
    assert (status, body) == (200, b"hello from ASGI")


def test_a_gunicorn_setting_tines_lacks_stops_the_start_in_one_line(tmp_path: Path) -> None:
    conf = tmp_path / "gunicorn.conf.py"
    conf.write_text('workers = 2\nstatsd_host = "localhost:8125"\n')
    result = subprocess.run([sys.executable, "-m", "tines", "serve", "-c", str(conf), HELLO, "-b", "127.0.0.1:0"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert_one_line_error(result, f"config file '{conf}': gunicorn setting statsd_host has no equivalent in Tines")


def test_hup_reads_the_file_again_settings_and_hooks(tines_server: Any, tmp_path: Path) -> None:
    conf, error_log = tmp_path / "gunicorn.conf.py", tmp_path / "error.log"
    template = ('workers = {workers}\nerrorlog = {error!r}\n'
                'def post_fork(server, worker):\n    server.log.info("{word} %s", worker.pid)\n')
    conf.write_text(template.format(workers=1, error=str(error_log), word="first"))
    server = tines_server(HELLO, "-c", str(conf))
    wait_until(lambda: any("[INFO] first " in line for line in lines(error_log)), what="the first post_fork")
    conf.write_text(template.format(workers=2, error=str(error_log), word="second"))
    server.signal(signal.SIGHUP)
    seconds = wait_until(lambda: [line for line in lines(error_log) if "[INFO] second " in line]
                         if sum("[INFO] second " in line for line in lines(error_log)) == 2 else None,
                         what="two workers of the new generation running the new post_fork")
    wait_until(lambda: len(server.worker_pids()) == 2, what="the old worker gone")
    assert {int(line.rsplit(" ", 1)[1]) for line in seconds} == set(server.worker_pids())  # type: ignore[union-attr]
    assert sum("[INFO] first " in line for line in lines(error_log)) == 1


def test_sync_threads_in_any_order_and_script_name_from_raw_env(tines_server: Any, tmp_path: Path) -> None:
    """``threads = 2`` above ``worker_class = "sync"`` is gthread, as gunicorn runs it (its
    ``timeout`` then bounds no request); ``raw_env``'s SCRIPT_NAME is root_path, said in a line."""
    import json

    conf, error_log = tmp_path / "gunicorn.conf.py", tmp_path / "error.log"
    conf.write_text(f'threads = 2\nworker_class = "sync"\ntimeout = 30\nworkers = 1\nerrorlog = {str(error_log)!r}\n'
                    f'raw_env = ["SCRIPT_NAME=/api"]\nchdir = {str(ROOT / "tests/python/e2e/apps/migrating")!r}\n')
    server = tines_server("myproject.wsgi:application", "-c", str(conf))
    status, body = http_get(server.port, "/api/items", close=True)
    assert status == 200
    seen = json.loads(body)
    assert (seen["script_name"], seen["path_info"]) == ("/api", "/items")
    result = subprocess.run([sys.executable, "-m", "tines", "check-config", "-c", str(conf), "myproject.wsgi:application"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "raw_env: SCRIPT_NAME=/api is taken as root_path" in result.stderr
    source = re.escape(f"file {conf}")
    for name, value in (("mpm", '"thread"'), ("threads", "2"), ("boot_timeout", "30"), ("root_path", '"/api"')):
        assert re.search(rf"^{name} +{value} +{source}$", result.stdout, re.M), (name, result.stdout)
    assert re.search(r"^request_timeout +60 +default$", result.stdout, re.M), result.stdout
