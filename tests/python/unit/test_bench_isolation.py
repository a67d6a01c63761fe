"""Issue 36's bench (benches/isolation.py): the minimal fork-per-connection server answers on a
real socket, the fork-limit probe reports, the per-round ratios and the judgement of
isolation_model, and the perf breakdown's parsing (fork_breakdown). The two servers' tests start
real processes (a few forks); the rest is pure."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

REPO = Path(__file__).resolve().parents[3]
BENCHES = REPO / "benches"
sys.path.insert(0, str(BENCHES))

import fork_breakdown  # noqa: E402
import isolation_model as im  # noqa: E402
from model import Scenario  # noqa: E402


def get(port: int, path: str) -> bytes:
    """One request with Connection: close; everything the server sent until it closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                  .encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data


@pytest.fixture
def fork_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[int]:
    """benches/fork_per_connection.py on the app given as the test's parameter, ready (its
    ready line read from the pipe it was given)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ready_read, ready_write = os.pipe()
    process = subprocess.Popen(
        [sys.executable, str(BENCHES / "fork_per_connection.py"), request.param, "127.0.0.1",
         str(port), str(ready_write)], cwd=REPO, pass_fds=(ready_write,),
        env={**os.environ, "BLOG_DB": str(tmp_path / "blog.sqlite3")})
    os.close(ready_write)
    try:
        readable, _, _ = select.select([ready_read], [], [], 60)
        assert readable, "no ready line"
        assert json.loads(os.read(ready_read, 4096)) == {"ready": True}
        yield port
    finally:
        os.close(ready_read)
        process.kill()
        process.wait()


@pytest.mark.parametrize("fork_server", ["examples/hello.py:app"], indirect=True)
def test_fork_per_connection_answers_each_connection(fork_server: int) -> None:
    for _ in range(3):
        response = get(fork_server, "/")
        head, _, body = response.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"\r\nConnection: close" in head and b"\r\nContent-Length: 2" in head
        assert body == b"OK"


@pytest.mark.parametrize("fork_server", ["examples/blog/app.py:app"], indirect=True)
def test_fork_per_connection_serves_the_blog_index(fork_server: int) -> None:
    head, _, body = get(fork_server, "/blog/").partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"</html>" in body.lower()


def test_fork_limit_probe_reports_forks_per_second() -> None:
    result = subprocess.run([sys.executable, str(BENCHES / "fork_limit.py"),
                             "examples/hello.py:app", "0.05"], cwd=REPO, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["forks"] > 0 and report["forks_per_sec"] > 0 and report["rss_kib"] > 0
    assert report["forks_per_sec"] == pytest.approx(report["forks"] / report["elapsed_s"])


# --------------------------------------------------------------------------- the judgement


def run(rps: float, p99_us: float = 5000, failed: str | None = None) -> dict[str, Any]:
    return {"failed": failed, "requests_per_sec": rps, "ok_per_sec": rps,
            "latency_us": {"p50": p99_us / 2, "p99": p99_us, "mean": p99_us / 2},
            "errors": {"total": 0}, "cpu_us_per_request": 100.0}


def rounds_of(per_request: list[float], limits: list[float], scenario: Scenario,
              master: bool = True) -> dict[str, dict[str, Any]]:
    """Rounds of every row; the master-sized fork limit (when ``master``) at half the app's."""
    runs: dict[str, dict[str, Any]] = {}
    for r, (pr, limit) in enumerate(zip(per_request, limits), 1):
        runs[im.limit_key(scenario.app, r)] = {"failed": None, "forks_per_sec": limit,
                                               "rss_kib": 12288}
        if master:
            runs[im.limit_key(scenario.app, r, im.FORK_LIMIT_MASTER)] = {
                "failed": None, "forks_per_sec": limit / 2, "rss_kib": 27648}
        runs[im.run_key(im.PER_REQUEST, scenario, r)] = run(pr, p99_us=4000)
        runs[im.run_key(im.REUSE, scenario, r)] = run(pr * 10)
        runs[im.run_key(im.FORK_PER_CONNECTION, scenario, r)] = run(pr * 2, p99_us=2000)
    return runs


def test_ratios_are_per_round_and_judged_by_their_median() -> None:
    c1, c50 = Scenario("hello", "close", 1), Scenario("hello", "close", 50)
    # The machine halves its speed in round 2: both sides of that round's ratio move alike.
    runs = {**rounds_of([600, 300, 500], [1000, 500, 1000], c1),
            **rounds_of([100, 100, 100], [1000, 500, 1000], c50)}
    ratios = im.round_ratios(runs, c1, 3)
    assert ratios["limit"] == [0.6, 0.6, 0.5]
    assert ratios["master"] == [1.2, 1.2, 1.0]
    assert ratios["reuse"] == [0.1] * 3 and ratios["fpc"] == [0.5] * 3
    assert ratios["p99_fpc"] == [2.0] * 3
    by_name = {check.name.split(":")[0]: check for check in im.checks(runs, 3)}
    assert by_name["hello/close/c1"].status == "pass"
    assert "median 0.60" in by_name["hello/close/c1"].detail
    assert "master-sized fork limit: 1.20 (3)" in by_name["hello/close/c1"].detail
    assert by_name["hello/close/c50"].status == "fail"


def test_failed_rounds_are_left_out_and_nothing_is_not_measured() -> None:
    c1 = Scenario("hello", "close", 1)
    runs = rounds_of([600, 300], [1000, 1000], c1)
    runs[im.run_key(im.PER_REQUEST, c1, 2)] = run(0, failed="start: boom")
    assert im.round_ratios(runs, c1, 2)["limit"] == [0.6]
    statuses = {check.name.split(":")[0]: check.status for check in im.checks(runs, 2)}
    assert statuses == {"hello/close/c1": "pass", "hello/close/c50": "not measured"}


def test_markdown_has_the_blog_beside_treefrog_and_the_seed_table() -> None:
    runs = rounds_of([80], [400], Scenario("blog", "close", 1), master=False)
    meta = {"started": "2026-11-27-1200", "plan": "test", "commands": ["a"], "machine": {},
            "versions": {}}
    text = im.markdown(meta, runs, ["blog"], 1, {"blog": ["breakdown line"]})
    assert "TreeFrog" in text and "2.0x" in text
    assert im.SEED_TABLE[2] in text and "breakdown line" in text
    assert "## Where a request's time goes (process per request, blog, one connection)" in text
    assert "| 1 | 400 | - | 80.0 | 800.0 | 160.0 | - | - | 4.00 | 2.00 |" in text
    assert "| fork-limit: fork + _exit + waitpid, the app alone, 12 MiB RSS | 1/1 |" in text


# --------------------------------------------------------------------------- the breakdown

PERF = """\
 tines  100/100  10.000000: syscalls:sys_enter_clone: clone_flags: 0x01200011, newsp: 0x0
 tines  100/100  10.000300: sched:sched_process_fork: comm=tines pid=100 child_comm=tines child_pid=200
 tines  100/100  10.000400: syscalls:sys_exit_clone: 0xc8
 tines  200/200  10.000450: syscalls:sys_exit_clone: 0x0
 tines: worker  200/200  10.002450: syscalls:sys_enter_accept4: fd: 0x00000003, upeer_sockaddr: 0x0
 tines: worker  200/200  10.002460: syscalls:sys_exit_accept4: 0xfffffffffffffff5
 tines: worker  200/200  10.003000: syscalls:sys_exit_accept4: 0x9
 tines: worker  200/200  10.003100: syscalls:sys_enter_close: fd: 0x00000007
 tines: worker  200/200  10.003200: syscalls:sys_enter_close: fd: 0x00000009
 tines: worker  200/200  10.003300: syscalls:sys_enter_exit_group: error_code: 0x00000000
 tines: worker  200/200  10.003320: sched:sched_process_exit: comm=tines: worker pid=200 prio=120 group_dead=true
 tines  100/100  10.003600: syscalls:sys_exit_wait4: 0xc8
 other  300/300  10.003900: syscalls:sys_enter_close: fd: 0x00000009
"""


def test_breakdown_follows_a_worker_from_fork_to_reap() -> None:
    lives = fork_breakdown.lifecycles(fork_breakdown.parse(PERF), master=100)
    assert [life.pid for life in lives] == [200]
    phases = {name: round(us) for name, us in lives[0].phases.items()}
    assert phases == {"fork": 400, "start": 2000, "idle": 550, "request": 200, "after": 100,
                      "exit": 20, "reap": 280}
    lines = fork_breakdown.summary(lives, client_p50_ms=1.5, rate=300.0)
    assert "| fork in the master (clone) | 400 | 400 | 1 |" in lines
    assert any("idle wait left out: 3,000 µs" in line for line in lines)
    assert any("start 67%" in line and "was ready before" in line for line in lines)


def test_breakdown_follows_a_worker_forked_by_the_fork_server() -> None:
    # The fork server (pid 150) clones the worker; the master (100) reaps it.
    forked_by_server = "\n".join(line.replace(" 100/100 ", " 150/150 ").replace("pid=100 ", "pid=150 ")
                                  if "clone" in line or "sched_process_fork" in line else line
                                  for line in PERF.splitlines())
    assert fork_breakdown.lifecycles(fork_breakdown.parse(forked_by_server), master=100) == []
    lives = fork_breakdown.lifecycles(fork_breakdown.parse(forked_by_server), master=100, fork_server=150)
    assert [life.pid for life in lives] == [200]
    assert {name: round(us) for name, us in lives[0].phases.items()}["fork"] == 400
    assert round(lives[0].phases["reap"]) == 280


def test_breakdown_without_a_served_request_says_so() -> None:
    events = fork_breakdown.parse(PERF.replace("sys_exit_accept4: 0x9", "sys_exit_accept4: "
                                               "0xfffffffffffffff5"))
    assert fork_breakdown.summary(fork_breakdown.lifecycles(events, 100), None, None) == [
        "Not measured: no worker of the recording served a request."]


SAMPLES = """\
  100 sched:sched_process_fork: comm=tines pid=100 child_comm=tines child_pid=200 ffffffff813a5371 __traceiter_sched_process_fork ([kernel.kallsyms])
  100     cpu-clock/freq=1000/:  ffffffff816e71d3 copy_page_range ([kernel.kallsyms])
  100     cpu-clock/freq=1000/:  7fda203ba684 _PyEval_EvalFrameDefault (/usr/lib/libpython3.11.so.1.0)
  200     cpu-clock/freq=1000/:  ffffffff816e71d3 exc_page_fault ([kernel.kallsyms])
  200     cpu-clock/freq=1000/:  ffffffff816e71d3 exc_page_fault ([kernel.kallsyms])
  200     cpu-clock/freq=1000/:  7fda203ba684 std::rt::init (/x/python/tines/_core.abi3.so)
  300     cpu-clock/freq=1000/:  7fda203ba684 rustc_main (/usr/bin/rustc)
"""


def test_profile_splits_the_master_from_its_children_and_leaves_others_out() -> None:
    lines = fork_breakdown.profile(SAMPLES, master=100)
    assert "the master 40% of the server's, the workers 60%" in lines[0]
    # 2 and 3 samples at 1 kHz for the 1 worker forked: 2 and 3 ms per request.
    assert "about 2,000 µs of the master's CPU and 3,000 µs of its workers'" in lines[0]
    assert "at most 200 req/s on the one CPU." in lines[0]
    assert "(50.0 req/s by the client meanwhile)" in fork_breakdown.profile(SAMPLES, 100, 50.0)[0]
    assert "| kernel | 50% | 67% |" in lines
    assert "| Tines' extension (_core) | 0% | 33% |" in lines
    assert "| `copy_page_range` | 50% | `exc_page_fault` | 67% |" in lines
    assert not any("rustc_main" in line for line in lines)
    assert fork_breakdown.profile("", master=100) == ["No CPU sample of the server was recorded."]


def test_profile_counts_the_fork_server_on_the_masters_side() -> None:
    text = SAMPLES.replace("  100 sched:sched_process_fork: comm=tines pid=100",
                           "  150 sched:sched_process_fork: comm=tines pid=150") + (
        "  100 sched:sched_process_fork: comm=tines pid=100 child_comm=tines child_pid=150 "
        "ffffffff813a5371 __traceiter_sched_process_fork ([kernel.kallsyms])\n"
        "  150     cpu-clock/freq=1000/:  ffffffff816e71d3 copy_page_range ([kernel.kallsyms])\n")
    lines = fork_breakdown.profile(text, master=100, fork_server=150)
    assert "the master 50% of the server's (its fork server 17%), the workers 50%" in lines[0]
    # The fork server is no worker: one worker forked, 3 ms of the master's side per request.
    assert "about 3,000 µs of the master's CPU and 3,000 µs of its workers'" in lines[0]


def test_peers_rows_are_judged_by_per_round_ratios_too() -> None:
    c1 = Scenario("hello", "close", 1)
    runs = rounds_of([600, 300], [1000, 500], c1)
    runs[im.run_key(im.GUNICORN_PER_REQUEST, c1, 1)] = run(200)
    runs[im.run_key(im.GUNICORN_PER_REQUEST, c1, 2)] = run(100)
    runs[im.run_key(im.UWSGI_PER_REQUEST, c1, 2)] = run(150, failed="did not start")
    ratios = im.round_ratios(runs, c1, 2)
    assert ratios["gunicorn"] == [3.0, 3.0] and ratios["uwsgi"] == []
    text = im.markdown({"started": "x", "plan": "p", "commands": [], "machine": {}, "versions": {}},
                       runs, ["hello"], 2, {})
    assert "gunicorn's process per request 3.00 (2), uWSGI's -." in text
    assert "| gunicorn-sync-per-request | 2/2 |" in text and "| uwsgi-per-request | 0/2 |" in text
