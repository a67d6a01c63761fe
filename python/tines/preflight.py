"""What the master checks before its first fork, in one place for ``tines serve`` and
``tines check-config``: the worker settings (with the workers' own conversion), the resource
limits against this process's hard limits, the dynamic pool's bounds, and the hooks module
(imported from ``chdir``).

Must not: fork, start threads, bind sockets or load the app.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tines import hooks as server_hooks
from tines import limits, pool
from tines.config import Config
from tines.hooks import Hooks


@dataclass(frozen=True)
class Checked:
    """What the checks produced and the master keeps."""

    worker_settings: dict[str, object]
    """The dict for ``tines._core.run_worker``."""
    hooks: Hooks
    """The loaded, checked hooks module (``Hooks()`` when none is set)."""
    pool: pool.PoolSettings | None
    """The dynamic pool's resolved bounds; None for a fixed ``workers`` count."""


def check(cfg: Config) -> Checked:
    """Run every check; raise ConfigError (one line) on the first problem.

    Changes to ``chdir`` first when it is set (the workers import the app, and the master the
    hooks module, from there).
    """
    from tines.worker import worker_settings

    settings = worker_settings(cfg)
    limits.check(cfg)
    pool_settings = pool.settings(cfg)
    if cfg.chdir:
        os.chdir(cfg.chdir)
    return Checked(settings, server_hooks.load(cfg.hooks), pool_settings)
