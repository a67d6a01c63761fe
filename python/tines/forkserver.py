"""The fork server (ADR 0026): a process that stays at the preloaded state and forks the workers
on the master's request, so that the master itself never forks a worker.

Why: with a process per request (``max_requests`` 1) every fork made the master's whole heap
copy-on-write again, and the master's Python loop then wrote into it: 60% of the page faults on
the server's CPU were the master's. The fork server waits in Rust (``tines._core.serve_forks``)
and touches almost nothing between forks; it forks with ``clone(CLONE_PARENT)``, so every
worker is still the master's child (reaping, ``PR_SET_PDEATHSIG``, the life pipe and the notify
pipe as in ADR 0001). It does once what every worker did after the master's fork and that does
not depend on the worker's slot: the signal reset, closing the master's fds, the fault handler.

Owns: the policy (``wanted``: pure), and the master's side of the mechanism (``ForkServer``:
start it, ask it for a fork, take its death, stop it) and the fork server's own life
(``_serve``). ``tines.fleet`` asks it for each fork and falls back to ``os.fork`` whenever it
has none to give (not wanted, not started yet, dead or wedged).

Must not: decide the worker count, or touch a worker once it is forked (it is the fleet's).
"""

from __future__ import annotations

import gc
import os
import select
import signal
import struct
import time
import traceback
from typing import NoReturn

from setproctitle import setproctitle

from tines import logs, serving
from tines import worker as worker_process
from tines.config import Config

log = logs.get("arbiter")

REQUEST_FORMAT = "<IIB"
"""slot, generation, standby (``REQUEST_SIZE`` in crates/python/src/fork_server.rs)."""
REPLY_FORMAT = "<i"
"""The worker's pid, or minus the errno of a failed fork."""

REPLY_TIMEOUT = 5.0
"""Seconds the master waits for a fork's reply before it takes the fork server for lost (a
stopped or wedged one): it kills it and forks by itself meanwhile."""

RESTART_DELAY = 0.1
RESTART_DELAY_MAX = 5.0
"""The backoff between restarts of a fork server that keeps dying or wedging (the master forks
by itself meanwhile, so nothing waits for it)."""

STABLE_AFTER = 60.0
"""Seconds a fork server must have served for its loss to count as a first one again (the
backoff starts over at ``RESTART_DELAY``)."""


def wanted(cfg: Config) -> bool:
    """Whether the master forks its workers through a fork server: with a preloaded app (the
    state it keeps) and a process per request (``max_requests`` 1), where a fork follows every
    request. With a larger ``max_requests`` a fork is rare and the master forks by itself:
    the fork server's process would then cost its memory for nothing measurable (ADR 0026)."""
    return bool(cfg.preload) and cfg.max_requests == 1


class ForkServer:
    """The master's side: the fork server's pid and pipes, and its restarts."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.requests = -1
        """The write end of the request pipe (the master's)."""
        self.replies = -1
        """The read end of the reply pipe (the master's)."""
        self.next_start = 0.0
        self.delay = RESTART_DELAY
        self.started = 0.0
        """When the running fork server was started (``time.monotonic()``)."""

    def due(self, now: float) -> bool:
        """A fork server should be started: none runs, and the backoff after the last one's
        death is over. There is one per master: with ``--preload`` a reload (HUP) is an
        upgrade, so a master never has a second generation to fork for (ADR 0026)."""
        return self.pid is None and now >= self.next_start

    def start(self, template: worker_process.WorkerContext) -> None:
        """Fork the fork server at the master's state, for the workers ``template`` describes
        (its slot and standby are the request's)."""
        requests_read, self.requests = os.pipe2(os.O_CLOEXEC)
        self.replies, replies_write = os.pipe2(os.O_CLOEXEC)
        # Born with the stop, retire and promotion signals blocked, as a worker is (tines.fleet):
        # it keeps them blocked, so each worker it forks is born with them blocked too.
        previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, worker_process.BLOCKED_AT_FORK)
        try:
            pid = os.fork()
            if pid == 0:
                _serve(template, requests_read, replies_write, [self.requests, self.replies])  # never returns
        except OSError:
            self.forget()  # the master's ends; the caller forks by itself
            raise
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
            os.close(requests_read)
            os.close(replies_write)
        self.pid = pid
        self.started = time.monotonic()
        log.debug("fork server %d started (generation %d)", pid, template.generation)

    def fork(self, context: worker_process.WorkerContext) -> int | None:
        """Ask the fork server for the worker ``context`` describes: its pid, or None when there
        is no fork server or it did not answer (the caller forks by itself). OSError for a fork
        the kernel refused."""
        if self.pid is None:
            return None
        try:
            os.write(self.requests, struct.pack(REQUEST_FORMAT, context.slot, context.generation, context.standby))
            ready, _, _ = select.select([self.replies], [], [], REPLY_TIMEOUT)
            reply = os.read(self.replies, struct.calcsize(REPLY_FORMAT)) if ready else b""
        except OSError as error:
            reply = b""
            log.warning("fork server %d: %s", self.pid, error)
        if len(reply) != struct.calcsize(REPLY_FORMAT):
            lost, now = self.pid, time.monotonic()
            self.stop()
            self.lost(now)
            log.warning("fork server %d did not answer: forking workers in the master, starting another in %.1f s",
                        lost, self.next_start - now)
            return None
        (pid,) = struct.unpack(REPLY_FORMAT, reply)
        if pid < 0:
            raise OSError(-pid, f"fork server: fork failed: {os.strerror(-pid)}")
        return int(pid)

    def reaped(self, pid: int, status: int, now: float) -> bool:
        """True when ``pid`` was the fork server: it is started again after the backoff (the
        master forks by itself meanwhile)."""
        if pid != self.pid:
            return False
        how = (f"killed by {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status)
               else f"exited with code {os.WEXITSTATUS(status)}")
        self.forget()
        self.lost(now)
        log.warning("fork server %d %s: forking workers in the master, starting another in %.1f s",
                    pid, how, self.next_start - now)
        return True

    def lost(self, now: float) -> None:
        """The fork server died or wedged (it is gone now): the next one starts after the
        backoff, which doubles with each loss of a fork server that had not served
        ``STABLE_AFTER`` seconds and starts over after one that had."""
        if now - self.started >= STABLE_AFTER:
            self.delay = RESTART_DELAY
        self.next_start = now + self.delay
        self.delay = min(self.delay * 2, RESTART_DELAY_MAX)

    def stop(self) -> None:
        """Kill the fork server and reap it (its children are the master's: they stay)."""
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        self.forget()

    def forget(self) -> None:
        """No fork server from now on: close the master's pipe ends."""
        for fd in (self.requests, self.replies):
            if fd >= 0:
                os.close(fd)
        self.pid, self.requests, self.replies = None, -1, -1

    def fds(self) -> list[int]:
        """The master's pipe ends (what a process the master forks must close)."""
        return [fd for fd in (self.requests, self.replies) if fd >= 0]


def _serve(template: worker_process.WorkerContext, requests: int, replies: int,
           masters: list[int]) -> NoReturn:
    """The fork server's life: the set-up every worker shares, done once, then forks until the
    master closes the request pipe (or dies: its death signal). In each child, the worker's
    life (``tines.worker.run``), which never returns."""
    try:
        setproctitle(f"tines: fork server [{template.cfg.mpm}] gen {template.generation}")
        worker_process.close_fds(masters)
        worker_process.share_set_up(template)
        if template.interface not in (None, "wsgi"):  # the preloaded app is ASGI: not served by mpm
            setproctitle(f"tines: fork server [{serving.title_tag(template.interface, template.cfg.mpm)}] "
                         f"gen {template.generation}")
        worker_process.set_parent_death_signal()
        if os.getppid() != template.master_pid:
            os._exit(0)  # the master died before we set the death signal
        # The heap as it is now is what every worker starts from: keep the collector off it, so
        # neither this process nor a worker's collections write to those pages.
        gc.freeze()
        import tines._core as _core

        request = _core.serve_forks(requests, replies)
    except BaseException:  # noqa: BLE001 - the last resort before os._exit
        log.error("fork server failed:\n%s", traceback.format_exc())
        os._exit(1)
    if request is None:
        os._exit(0)  # the master closed the request pipe
    # The template is this child's own copy: set in place (``dataclasses.replace`` would build
    # a second context, touching more of the pages shared with the fork server).
    template.slot, template.generation, template.standby = request
    template.forked_by_server = True
    worker_process.run(template)
