"""Resource limits (setrlimit) of the workers: the ``limit_*`` settings (docs/limits.md).

Owns: which setting is which RLIMIT and how its soft and hard values are derived
(``wanted``), the master's check that each value can be set before any fork (``check``), setting
them in a worker after fork, before post_fork and the app (``apply``), and the note the master
adds to a worker's exit line when a limit can be told to have ended it (``exit_cause``).

Must not: import ``tines._core``, fork, or start threads. The graceful recycling at the soft CPU
limit is Rust's (the worker's signals are Rust's: SIGXCPU, ``StopReason::CpuLimit``).
"""

from __future__ import annotations

import os
import resource
import signal

from tines.config import Config
from tines.errors import ConfigError

CPU_HARD_MARGIN = 10
"""Without ``limit_cpu_hard``, the hard CPU limit is ``limit_cpu`` + this many CPU seconds:
room for the request running at SIGXCPU to finish (SIGXCPU comes again each second until then)
before the kernel's SIGKILL."""

LIMITS = (
    ("limit_address_space", resource.RLIMIT_AS),
    ("limit_data", resource.RLIMIT_DATA),
    ("limit_cpu", resource.RLIMIT_CPU),
    ("limit_open_files", resource.RLIMIT_NOFILE),
    ("limit_core", resource.RLIMIT_CORE),
)
"""Each setting and the limit it sets."""


def wanted(cfg: Config) -> list[tuple[str, int, int, int]]:
    """(setting, resource, soft, hard) for each limit that is set. Every limit but CPU sets soft
    and hard alike, so the app cannot raise it back (and the workers' start-up raise of the
    open files soft limit to the hard one changes nothing)."""
    found = []
    for name, which in LIMITS:
        value = cfg.value(name)
        if value is None:
            continue
        assert isinstance(value, int)
        hard = value
        if name == "limit_cpu":
            hard = cfg.limit_cpu_hard if cfg.limit_cpu_hard is not None else value + CPU_HARD_MARGIN
        found.append((name, which, value, hard))
    return found


def check(cfg: Config) -> None:
    """Raise ConfigError (one line) for a limit above the hard limit this process has: a worker
    (forked from it, unprivileged) could not set it. Runs in the master before any fork."""
    for name, which, soft, hard in wanted(cfg):
        _, current_hard = resource.getrlimit(which)
        if current_hard == resource.RLIM_INFINITY or hard <= current_hard:
            continue
        if name == "limit_cpu" and cfg.limit_cpu_hard is not None:
            given = f"limit_cpu_hard {hard} ({cfg.source('limit_cpu_hard')})"
        elif name == "limit_cpu":
            given = f"limit_cpu {soft} ({cfg.source(name)}, hard limit {hard} = limit_cpu + {CPU_HARD_MARGIN})"
        else:
            given = f"{name} {hard} ({cfg.source(name)})"
        raise ConfigError(f"{given} is above this process's hard limit {current_hard}, which a worker "
                          "cannot raise: raise it before starting tines (ulimit -H, systemd Limit*=)")


def apply(cfg: Config) -> None:
    """Set every configured limit in this process (a worker, after fork). Raises OSError or
    ValueError when one cannot be set (``check`` makes that unlikely)."""
    for _name, which, soft, hard in wanted(cfg):
        resource.setrlimit(which, (soft, hard))


def exit_cause(cfg: Config, status: int, cpu_seconds: float) -> str:
    """A note naming the limit that ended a worker, where it can be told from the way it ended
    and the CPU time it used (``os.wait4``'s rusage); else an empty string.

    A SIGKILL of a worker whose CPU time is past the soft limit is taken for the kernel's kill at
    the hard limit: the master kills only workers it is stopping (not counted here), a worker
    past the soft limit has had SIGXCPU and is on its way out, and the rusage ``wait4`` reports
    can fall a little short of the limit the kernel killed at (it is scaled from samples), so
    the hard limit itself is no reliable threshold; a SIGXCPU death
    is the soft limit reached before Rust's handler was installed (while the app was loading).
    """
    if cfg.limit_cpu is None:
        return ""
    hard = next(hard for name, _, _, hard in wanted(cfg) if name == "limit_cpu")
    used = f"{cpu_seconds:.1f} s of CPU time"
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        if signum == signal.SIGKILL and cpu_seconds >= cfg.limit_cpu:
            return f" (probably limit_cpu hard limit {hard} s: {used})"
        if signum == signal.SIGXCPU:
            return f" (limit_cpu {cfg.limit_cpu} s reached before the worker could recycle: {used})"
        return ""
    if cpu_seconds >= cfg.limit_cpu:
        return f" (limit_cpu {cfg.limit_cpu} s: {used})"
    return ""
