"""The status process: the master binds ``status_bind``, forks one process that serves
``/healthz``, ``/readyz`` and ``/status.json`` from the scoreboard (Rust,
``tines._core.run_status``; docs/status.md), and starts it again when it dies.

Owns: refusing a status address that is also a public one, binding it, warning what a bind on
every interface exposes (``exposure_warning``; ``status_allow`` is enforced by the Rust
server), the status process's
life (fork, restart with a backoff, stop after the workers), and what it inherits. It decides
when the process is due (``due``: bound, none running, the backoff over) and the master starts
it then with what it must close and keep (``Inheritance``); those rules are unit-tested without
a process (tests/python/unit/test_status_policy.py). Must not: import ``tines.arbiter``, read
the scoreboard itself (the Rust server does), read the clock (the caller passes ``now``) or
start threads (the master forks).

The process runs no app: it answers while every worker is busy or stuck. It is stopped last
(after the workers), so ``/readyz`` says "stopping" for the whole of a graceful stop.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import sys
import traceback
from dataclasses import dataclass
from typing import NoReturn

from setproctitle import setproctitle

from tines import logs
from tines.config import Config
from tines.errors import ConfigError
from tines.config.validators import split_bind
from tines.sockets import Listener, bind_all
from tines.upgrade import ENV_STATUS_FD

log = logs.get("status")

BACKLOG = 64
RESTART_DELAY_MAX = 5.0
"""A status process that keeps dying is started again at most this often."""


@dataclass(frozen=True)
class Inheritance:
    """What the status process is given by the master at its fork."""

    close: tuple[int, ...]
    """The master's fds it must not keep: its pipes' other ends and the public listeners."""
    life_read: int
    """The life pipe's read end: its EOF means the master is gone (the process then exits)."""
    scoreboard: object
    """The ``tines._core.Scoreboard`` it serves from."""


class StatusProcess:
    """The status listener and its process (nothing when ``status_bind`` is unset)."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.listener: Listener | None = None
        self.pid: int | None = None
        self.next_start = 0.0
        self.delay = 0.1

    def bind(self, public: list[Listener]) -> None:
        """Binds ``status_bind``; ConfigError when it is one of the public binds (as written,
        or as bound: port 0 picks a free port, so only the bound address tells). A new
        master of a binary upgrade takes its old master's listener over instead (the old
        one still holds the address)."""
        inherited = os.environ.pop(ENV_STATUS_FD, None)
        address = self.cfg.status_bind
        if inherited is not None:
            if not address:
                os.close(int(inherited))  # the new config has no status listener
                return
            address = f"fd://{inherited}"
        if not address:
            return
        refused = ConfigError(f"status_bind {address!r} is also a public bind: the status "
                              "listener must be off the public port")
        if address in {split_bind(bind)[1] for bind in self.cfg.bind} and not address.endswith(":0"):
            raise refused
        self.listener = bind_all([address], BACKLOG)[0]
        if self.listener.address in {listener.address for listener in public}:
            self.listener.close()
            self.listener = None
            raise refused
        scheme = "unix" if self.listener.address.startswith("unix:") else "http"
        where = self.listener.address if scheme == "unix" else f"http://{self.listener.address}"
        log.info("Status at: %s", where)
        warning = exposure_warning(self.listener.address, self.cfg.status_allow, self.cfg.status_redact_paths)
        if warning is not None:
            log.warning("%s", warning)

    def due(self, now: float) -> bool:
        """The process should be started now: a listener is bound, no process runs, and the
        backoff after the last one's death is over."""
        return self.listener is not None and self.pid is None and now >= self.next_start

    def start(self, passed: Inheritance) -> None:
        """Fork the process (``due`` said so)."""
        assert self.listener is not None
        pid = os.fork()
        if pid == 0:
            _run(self.cfg, self.listener, passed)  # never returns
        self.pid = pid
        log.debug("status process %d started", pid)

    def reaped(self, pid: int, status: int, now: float) -> bool:
        """True when ``pid`` was the status process (``due`` again after the backoff, unless the
        master stopped it)."""
        if pid != self.pid:
            return False
        self.pid = None
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM:
            return True  # stopped by the master
        how = (f"killed by {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status)
               else f"exited with code {os.WEXITSTATUS(status)}")
        log.warning("status process %d %s: starting another in %.1f s", pid, how, self.delay)
        self.next_start = now + self.delay
        self.delay = min(self.delay * 2, RESTART_DELAY_MAX)
        return True

    def stop(self) -> None:
        """TERM the process and reap it; close (and unlink) the listener."""
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGTERM)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.pid = None
        if self.listener is not None:
            self.listener.close()
            self.listener = None

    def listeners(self) -> list[Listener]:
        """The status listener, if bound (what a binary upgrade hands over)."""
        return [self.listener] if self.listener is not None else []

    def close_in_child(self) -> list[int]:
        """What a worker must close: the status listener is not its to serve."""
        return [self.listener.fileno()] if self.listener is not None else []


def exposure_warning(address: str, allow: tuple[str, ...], redact_paths: bool) -> str | None:
    """What a status listener on every interface (``0.0.0.0``, ``::``) exposes, for a warning;
    None for any other address. A Kubernetes probe needs such a bind, so it is not refused:
    the allow list is what keeps the rest of it to the operator's peers."""
    host = address.rpartition(":")[0].strip("[]") if not address.startswith(("unix:", "fd://")) else ""
    try:
        unspecified = ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return None
    if not unspecified:
        return None
    who = "any peer" if "*" in allow else f"only status_allow ({', '.join(allow) or 'no TCP peer'})"
    paths = "" if redact_paths else "; set status_redact_paths to show methods only"
    return (f"status_bind {address} listens on every interface: /healthz and /readyz answer any peer; "
            f"/, /status.json and /metrics (every in-flight request's method and path, the workers' pids "
            f"and memory) answer {who}{paths}")


def _run(cfg: Config, listener: Listener, passed: Inheritance) -> NoReturn:
    status = 1
    try:
        setproctitle(f"tines: status [{cfg.app}]")
        for name in ("TERM", "INT", "QUIT", "HUP", "USR1", "USR2", "CHLD", "TTIN", "TTOU", "WINCH"):
            signal.signal(getattr(signal, f"SIG{name}"), signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        # INT and QUIT go to the whole foreground group from a terminal: the master decides
        # when this process stops (last), so it ignores them.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGQUIT, signal.SIG_IGN)
        for fd in passed.close:
            try:
                os.close(fd)
            except OSError:
                pass
        import tines._core as _core

        assert isinstance(passed.scoreboard, _core.Scoreboard)
        _core.run_status(listener.fileno(), passed.life_read, passed.scoreboard, cfg.mpm,
                         cfg.status_show_query, cfg.status_redact_paths, list(cfg.status_allow),
                         cfg.status_timeout)
        status = 0
    except BaseException:  # noqa: BLE001 - the last resort before os._exit
        log.error("status process failed:\n%s", traceback.format_exc())
    finally:
        sys.stderr.flush()
        os._exit(status)
