"""A hooks module for the end of an ASGI worker: ``post_worker_init`` and ``worker_exit`` append
``<pid> <hook> mpm=<worker.mpm>`` to the file named by ``EXIT_HOOKS_FILE``. With
``EXIT_HOOKS_GATE`` (a FIFO's path), ``worker_exit`` then appends ``<pid> exit-begin``, opens the
FIFO for reading (which waits for a writer) and reads it to its end, and appends
``<pid> exit-end``: a test holds the worker there, late in its exit, until it opens the FIFO."""

import os


def _record(line):
    with open(os.environ["EXIT_HOOKS_FILE"], "a") as file:
        file.write(f"{os.getpid()} {line}\n")


def post_worker_init(worker):
    _record(f"post_worker_init mpm={worker.mpm}")


def worker_exit(server, worker):
    _record(f"worker_exit mpm={worker.mpm}")
    gate = os.environ.get("EXIT_HOOKS_GATE")
    if gate is not None:
        _record("exit-begin")
        with open(gate, "rb") as fifo:
            fifo.read()
        _record("exit-end")
