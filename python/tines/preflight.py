"""What the master checks before its first fork, in one place for ``tines serve`` and
``tines check-config``: the worker settings (with the workers' own conversion), the resource
limits against this process's hard limits, the dynamic pool's bounds, that a temporary file can
be made in ``request_buffer_dir`` (as the workers make them, for request bodies too large for
memory), and the hooks module (imported from ``chdir``).

Must not: fork, start threads, bind sockets or load the app.
"""

from __future__ import annotations

import errno
import os
import tempfile
from dataclasses import dataclass

from tines import hooks as server_hooks
from tines import limits, pool
from tines.config import Config
from tines.errors import ConfigError
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
    check_request_buffer_dir(str(settings["request_buffer_dir"] or tempfile.gettempdir()))
    pool_settings = pool.settings(cfg)
    if cfg.chdir:
        os.chdir(cfg.chdir)
    return Checked(settings, server_hooks.load(cfg.hooks), pool_settings)


def check_request_buffer_dir(directory: str) -> None:
    """Raise ConfigError unless a temporary file can be made in ``directory`` the way a worker
    makes one (``spool::temp_file``): ``O_TMPFILE``, or where the file system lacks it, a
    named file unlinked at once. Nothing is left behind."""
    try:
        fd = os.open(directory, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
    except OSError as error:
        if error.errno not in (errno.EOPNOTSUPP, errno.EISDIR):
            raise ConfigError(f"request_buffer_dir: cannot create a temporary file in {directory}: "
                              f"{error.strerror}") from None
        try:
            fd, name = tempfile.mkstemp(prefix=".tines-spool-", dir=directory)
            os.unlink(name)
        except OSError as fallback:
            raise ConfigError(f"request_buffer_dir: cannot create a temporary file in {directory}: "
                              f"{fallback.strerror}") from None
    os.close(fd)
