"""The app's own ``logging`` records (docs/logging.md): a handler in the error log's format when
the app set none, and ``--log-config`` applied in every worker."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conftest import APPS, Server, http_get

ERROR_LOG_LINE = r"\[\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d \+0000\] \[{pid}\] \[WARNING\] a record from the app, pid {pid}\n"


def pid_of_a_log_request(server: Server) -> int:
    status, body = http_get(server.port, "/log")
    assert status == 200
    return int(json.loads(body)["pid"])


def test_app_records_get_the_error_log_format(tines_server: Callable[..., Server], tmp_path: Path) -> None:
    server = tines_server("lifespan_lines:app", env={"LIFESPAN_FILE": str(tmp_path / "lifespan.txt")})
    pid = pid_of_a_log_request(server)
    server.wait_for_log(ERROR_LOG_LINE.format(pid=pid))


def test_log_config_is_applied_in_the_workers(tines_server: Callable[..., Server], tmp_path: Path) -> None:
    out = tmp_path / "app.log"
    config = {
        "version": 1,
        "formatters": {"mine": {"format": "MINE %(process)d %(name)s %(levelname)s %(message)s"}},
        "handlers": {"file": {"class": "logging.FileHandler", "filename": str(out), "formatter": "mine"}},
        "loggers": {"lifespan_lines": {"handlers": ["file"], "level": "INFO", "propagate": False}},
    }
    (tmp_path / "log.json").write_text(json.dumps(config))
    server = tines_server("lifespan_lines:app", "--log-config", str(tmp_path / "log.json"),
                          env={"LIFESPAN_FILE": str(tmp_path / "lifespan.txt")})
    pid = pid_of_a_log_request(server)
    # FileHandler flushes each record before the response is sent.
    assert out.read_text().splitlines() == [f"MINE {pid} lifespan_lines WARNING a record from the app, pid {pid}"]
    assert not re.search(r"a record from the app", server.log_text())  # not in the error log too
    assert "ready" in server.log_text()  # Tines' own lines are still there


def test_log_config_with_preload_leaves_the_apps_module_loggers_enabled(tines_server: Callable[..., Server],
                                                                       tmp_path: Path) -> None:
    # A root handler and dictConfig's default disable_existing_loggers: with --preload the app's
    # module-level logger already exists when a worker applies the config; it must not be
    # silenced by it (without --preload the config comes first and never sees it).
    out = tmp_path / "app.log"
    config = {
        "version": 1,
        "formatters": {"mine": {"format": "MINE %(process)d %(name)s %(levelname)s %(message)s"}},
        "handlers": {"file": {"class": "logging.FileHandler", "filename": str(out), "formatter": "mine"}},
        "root": {"handlers": ["file"], "level": "INFO"},
    }
    (tmp_path / "log.json").write_text(json.dumps(config))
    server = tines_server("module_logger:app", "--preload", "-w", "1", "--log-config", str(tmp_path / "log.json"))
    status, body = http_get(server.port, "/")
    assert status == 200
    pid = int(body)
    assert out.read_text().splitlines() == [f"MINE {pid} module_logger WARNING a record from the app, pid {pid}"]
    # Imported in the master, which never applies the config: that record went to the error log
    # through logging's last resort, the bare message (docs/logging.md).
    assert "\na record at import\n" in "\n" + server.log_text()


def test_a_log_config_logging_refuses_stops_the_first_boot_with_one_line(tmp_path: Path) -> None:
    # uvicorn's own formatter, with uvicorn not installed: the master's check reads a right
    # dictConfig; the worker that applies it fails to boot, and the first boot's failure stops
    # the start.
    config = {"version": 1, "formatters": {"default": {"()": "uvicorn_is_not_here.logging.DefaultFormatter"}},
              "handlers": {"h": {"class": "logging.StreamHandler", "formatter": "default"}},
              "root": {"handlers": ["h"]}}
    path = tmp_path / "log.json"
    path.write_text(json.dumps(config))
    child = subprocess.run([sys.executable, "-m", "tines", "serve", "hello_pid:app", "-b", "127.0.0.1:0", "-w", "1",
                            "--log-config", str(path)], capture_output=True, text=True, timeout=60, check=False,
                           env=dict(os.environ, PYTHONPATH=str(APPS)))
    assert child.returncode == 2
    assert child.stderr.splitlines()[-1] == (
        f"tines: error: log_config {str(path)!r}: logging refused it: Unable to configure formatter 'default': "
        "Cannot resolve 'uvicorn_is_not_here.logging.DefaultFormatter': No module named 'uvicorn_is_not_here'")
