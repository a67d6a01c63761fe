"""`tines tune`, live and short: one run on the hello app with a 30 s budget checks structure only
(it completes; its tines.toml loads with `tines check-config` and serves; its report renders in
headless chromium with its plots drawn). Speed is never asserted here: the right-answer runs on
apps whose answer is known live in `make bench` (benches/tune_check.py), and the recommender's
rules are unit-tested on recorded runs (tests/python/unit/test_tune_recommend.py)."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, debian_tool, start_server, wait_until
from test_status_page import read_png, run_chromium

pytestmark = pytest.mark.timeout(900)

TINES = [sys.executable, "-m", "tines"]
ARTIFACTS = ROOT / "target" / "test-artifacts"
PLOT_COLOURS = {"#1f77b4": (31, 119, 180), "#d62728": (214, 39, 40)}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One `tines tune --budget 30s --json` run on examples/hello.py, with a requests file that
    declares a client mix and a serve flag after `--`."""
    out = tmp_path_factory.mktemp("tune")
    requests = out / "requests.txt"
    requests.write_text("# tines-tune: visit=6 think=0.5s\n/\nGET /page?x=1\n")
    # A config file that recycles every 50 requests (as a tines.toml tines tune proposed for a
    # leaking app would): the tuner turns recycling off on every server's command line.
    recycling = out / "recycling.toml"
    recycling.write_text("max_requests = 50\nmax_worker_memory = \"64MiB\"\n")
    proc = subprocess.run([*TINES, "tune", "examples/hello.py:app", "--budget", "30s", "--json",
                           "--out", str(out / "result"), "--requests-file", str(requests),
                           "--", "-c", str(recycling), "--backlog", "511"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    document = json.loads(proc.stdout)
    return {"out": out / "result", "doc": document, "stderr": proc.stderr}


def test_the_run_completes_with_every_phase_and_file(smoke: dict[str, Any]) -> None:
    doc = smoke["doc"]
    measurements, rec = doc["measurements"], doc["recommendation"]
    assert doc["schema"] == measurements["schema"] == "tines-tune/1"
    assert measurements["interface"] == "wsgi" and not measurements["interrupted"]
    assert measurements["probe"]["step"]["ok"] > 0
    assert measurements["configs"] and all(c["sweep"] for c in measurements["configs"])
    assert {v["shape"]["preload"] for v in measurements["memory"]} == {False, True}
    assert measurements["clients"] == {"visit": 6, "think_s": 0.5}
    # Every sweep step answered every request it counted (the hello app answers 200 to all).
    for config in measurements["configs"]:
        for step in config["sweep"]:
            assert step["errors"] == 0 and step["ok"] == step["requests"] > 0, step
    settings = rec["settings"]
    assert settings["mpm"] in ("prefork", "event", "thread")
    assert settings["workers"] >= 1
    assert settings["keepalive_timeout"] >= 1 and settings["max_keepalive_requests"] >= 10
    for name in ("tines.toml", "report.html", "measurements.json", "servers.log"):
        assert (smoke["out"] / name).is_file(), name
    assert json.loads((smoke["out"] / "measurements.json").read_text()) == measurements
    log = (smoke["out"] / "servers.log").read_text()
    assert "--max-requests 0" in log and "draining (max_requests)" not in log
    # The budget was kept (a few seconds over for the last server's stop at most).
    assert measurements["elapsed_s"] <= 30 + 15


def test_its_toml_passes_check_config_and_serves(smoke: dict[str, Any], tmp_path: Path) -> None:
    toml = smoke["out"] / "tines.toml"
    text = toml.read_text()
    assert 'app = "examples/hello.py:app"' in text and "backlog = 511" in text
    assert "# " in text  # the reasons, as comments
    check = subprocess.run([*TINES, "check-config", "-c", str(toml)], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    settings = smoke["doc"]["recommendation"]["settings"]
    rows = {line.split()[0]: line.split()[1] for line in check.stdout.splitlines() if line.strip()}
    assert rows["mpm"].strip('"') == settings["mpm"]
    assert rows["backlog"] == "511"
    server = start_server("examples/hello.py:app", "-c", str(toml), log_path=tmp_path / "serve.log")
    try:
        assert server.ready["mpm"] == settings["mpm"] or settings["mpm"] == "thread"
        import http.client

        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
        connection.request("GET", "/")
        response = connection.getresponse()
        assert (response.status, response.read()) == (200, b"OK")
    finally:
        server.kill()


def test_the_report_renders_in_chromium_with_its_plots(smoke: dict[str, Any], tmp_path: Path) -> None:
    chromium = debian_tool("chromium")
    page = smoke["out"] / "report.html"
    dom = run_chromium(chromium, tmp_path, "--allow-file-access-from-files", "--dump-dom", page.as_uri())
    assert "<h1>tines tune: examples/hello.py:app</h1>" in dom
    # Every chart the report holds is rendered. How many it holds depends on what the budget
    # measured (the server's own cost is skipped on a loaded machine, and with it its chart).
    assert dom.count("<svg") == page.read_text().count("<svg") >= 4
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    png = ARTIFACTS / "tune-report.png"
    png.unlink(missing_ok=True)
    run_chromium(chromium, tmp_path, f"--screenshot={png}", "--window-size=1100,4000", page.as_uri())
    width, height, pixels = read_png(png)
    assert (width, height) == (1100, 4000)
    counts = {name: 0 for name in PLOT_COLOURS}
    for row in pixels:
        for pixel in row:
            for name, rgb in PLOT_COLOURS.items():
                if all(abs(pixel[i] - rgb[i]) <= 8 for i in range(3)):
                    counts[name] += 1
    # Each series colour covers its lines, points and bars: hundreds of pixels when drawn.
    assert all(count >= 200 for count in counts.values()), counts


def test_bad_arguments_get_one_line_and_status_2(tmp_path: Path) -> None:
    pool = tmp_path / "pool.toml"
    pool.write_text("max_workers = 4\n")
    cases = [
        (["examples/nope.py:app"], "nope.py"),
        (["examples/hello.py:app", "--url", "http://example.com/"], "--url"),
        (["examples/hello.py:app", "--budget", "soon"], "--budget"),
        (["examples/hello.py:app", "--budget", "inf"], "--budget"),
        (["examples/hello.py:app", "--memory-budget", "4GB"], "--memory-budget"),
        (["examples/hello.py:app", "--", "--workers", "3"], "--workers is set by tines tune"),
        (["examples/hello.py:app", "--", "--max-requests", "3"], "--max-requests would spoil"),
        (["examples/hello.py:app", "--", "-c", str(pool)], "max_workers (file "),
        (["examples/hello.py:app", "--", "--no-such-flag"], "no-such-flag"),
        # The blog answers 404 to a path it does not have: found by the probe.
        (["examples/blog/app.py:app", "--url", "/no-such-page"], "404"),
    ]
    for args, needle in cases:
        proc = subprocess.run([*TINES, "tune", *args, "--out", str(tmp_path / "out")] if "--" not in args
                              else [*TINES, "tune", "--out", str(tmp_path / "out"), *args],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2, (args, proc.stderr)
        assert lines[-1].startswith("tines tune: error: ") and needle in lines[-1], (args, lines)


GATED_APP = """\
import os
from pathlib import Path

# Loaded by a server the tuner starts after the probe was measured (the servers' log names
# more than the probe and its calibration): say so, then wait until the test lets go (the
# FIFO's open returns once the test holds its other end). Until then that server cannot be
# ready, so the run cannot end before the test's Ctrl-C, however slow or fast the machine.
_out = Path(os.environ["TUNE_GATE_OUT"])
_log = _out / "servers.log"
if _log.exists() and _log.read_text().count("# tines tune: ") >= 2:
    (_out.parent / "gate-reached").write_text(str(os.getpid()))
    with open(_out.parent / "gate", "rb"):
        pass


def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"OK"]
"""


def test_ctrl_c_stops_and_reports_what_was_measured(tmp_path: Path) -> None:
    """SIGINT after the probe: exit 130, the files written from what was measured, marked
    interrupted, no server left behind; on a terminal, the progress line was drawn.

    The SIGINT waits on the run itself, not on a clock: the app blocks its import in the
    first server started after the probe and its calibration, and says so; the run cannot end
    while that server boots, so the signal always comes mid-run."""
    out = tmp_path / "out"
    app = tmp_path / "gated.py"
    app.write_text(GATED_APP)
    os.mkfifo(tmp_path / "gate")
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([*TINES, "tune", f"{app}:app", "--budget", "120s", "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=terminal, stdin=subprocess.DEVNULL, text=True,
                            env={**os.environ, "TUNE_GATE_OUT": str(out)},
                            # SIGINT as a terminal's foreground job has it: a test run started in
                            # the background (`make test &`) inherits it ignored, and Python then
                            # installs no KeyboardInterrupt, so the tuner would run to its end.
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(terminal)
    drawn = b""
    reached = tmp_path / "gate-reached"
    gate = -1
    try:
        def gate_reached() -> bool:
            nonlocal drawn
            while select.select([controller], [], [], 0)[0]:
                try:
                    drawn += os.read(controller, 65536)
                except OSError:
                    break
            assert proc.poll() is None, "the run ended before a server after the probe loaded the app"
            return reached.exists()

        wait_until(gate_reached, deadline=240, what="a server after the probe loading the app")
        proc.send_signal(signal.SIGINT)
        # Lets the blocked import go on (O_RDWR: the open does not wait for a reader), so that
        # the server the tuner stops on its way out exits promptly.
        gate = os.open(tmp_path / "gate", os.O_RDWR)
        stdout, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if gate >= 0:
            os.close(gate)
        os.close(controller)
    assert proc.returncode == 130, stdout
    assert b"tines tune [" in drawn and b"s of 120 s, " in drawn and b" s left] " in drawn
    doc = json.loads((out / "measurements.json").read_text())
    assert doc["interrupted"] is True and doc["probe"] is not None
    assert "interrupted" in stdout and "Recommended settings:" in stdout
    assert (out / "tines.toml").is_file() and (out / "report.html").is_file()
    leftover = subprocess.run(["pgrep", "-f", f"tines-tune-.*status.sock"], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", "a server outlived the interrupted run"


@pytest.fixture(scope="module")
def django_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Django project as `django-admin startproject` makes it (the admin on, SQLite),
    migrated, its hosts allowing 127.0.0.1: an app no one here wrote."""
    pytest.importorskip("django", reason="Django is a test dependency (make test installs it)")
    root = tmp_path_factory.mktemp("django")
    admin = Path(sys.executable).parent / "django-admin"
    subprocess.run([str(admin), "startproject", "mysite", str(root)], check=True, timeout=120)
    settings = root / "mysite" / "settings.py"
    text = settings.read_text().replace("ALLOWED_HOSTS = []", 'ALLOWED_HOSTS = ["127.0.0.1"]')
    settings.write_text(text.replace("DEBUG = True", "DEBUG = False"))
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=root, check=True,
                   capture_output=True, timeout=300)
    return root


def test_a_django_project_with_its_admin_is_tuned(django_project: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([*TINES, "tune", "mysite.wsgi:application", "--url", "/admin/login/",
                           "--budget", "30s", "--json", "--out", str(out), "--", "--chdir", str(django_project)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    measurements, settings = doc["measurements"], doc["recommendation"]["settings"]
    assert measurements["probe"]["step"]["status_counts"] == {"200": measurements["probe"]["step"]["requests"]}
    for config in measurements["configs"]:
        for step in config["sweep"]:
            assert step["errors"] == 0, (config["shape"]["name"], step)
    # Sane: Django's login page computes (templates, CSRF) and waits on nothing, so prefork
    # with a worker per CPU (or event, if it measured faster by a clear margin); a worker that
    # does not grow needs no recycling; and the file it proposes serves the app.
    cpus = measurements["machine"]["target_cpus"]
    work = doc["recommendation"]["summary"]["workload"]
    # (A probe disturbed by other work on the machine may see waiting where there is none.)
    assert work["bound"] == "cpu" or measurements["probe"]["step"]["disturbed"], work
    assert settings["mpm"] in ("prefork", "event") and 1 <= settings["workers"] <= cpus
    assert "max_requests" not in settings or settings["max_requests"] > 1000
    toml = out / "tines.toml"
    assert f'chdir = "{django_project}"' in toml.read_text()
    server = start_server("mysite.wsgi:application", "-c", str(toml), log_path=tmp_path / "serve.log")
    try:
        import http.client

        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
        connection.request("GET", "/admin/login/")
        response = connection.getresponse()
        assert response.status == 200 and b"csrfmiddlewaretoken" in response.read()
    finally:
        server.kill()
