"""A hooks module that appends one line per call to the file named by TINES_TEST_HOOKS_LOG:

    <hook> pid=<the calling process> worker=<worker pid or ->/<slot> [status=<post_request's>]

TINES_TEST_HOOKS_FAIL names a hook that raises (after writing its line); with
TINES_TEST_HOOKS_FAIL_WHEN set, only while the file it names exists.
"""

import os


def _record(name, worker=None, extra=""):
    worker_text = f" worker={worker.pid if worker.pid is not None else '-'}/{worker.slot}" if worker else ""
    line = f"{name} pid={os.getpid()}{worker_text}{extra}\n"
    fd = os.open(os.environ["TINES_TEST_HOOKS_LOG"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    gate = os.environ.get("TINES_TEST_HOOKS_FAIL_WHEN")
    if os.environ.get("TINES_TEST_HOOKS_FAIL") == name and (gate is None or os.path.exists(gate)):
        raise RuntimeError(f"{name} failed on purpose")


def on_starting(server):
    _record("on_starting", extra=f" app={server.app} workers={server.config.workers}")


def when_ready(server):
    _record("when_ready", extra=f" live={len(server.workers)}")


def pre_fork(server, worker):
    _record("pre_fork", worker)


def post_fork(server, worker):
    _record("post_fork", worker, extra=f" master={server.pid}")


def post_worker_init(worker):
    _record("post_worker_init", worker)


def worker_exit(server, worker):
    _record("worker_exit", worker)


def child_exit(server, worker):
    _record("child_exit", worker)


def on_exit(server):
    _record("on_exit")


def pre_request(worker, environ):
    _record("pre_request", worker, extra=f" path={environ['PATH_INFO']}")


def post_request(worker, environ, status):
    _record("post_request", worker, extra=f" path={environ['PATH_INFO']} status={status}")
