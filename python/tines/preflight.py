"""What the master checks before its first fork, in one place for ``tines serve`` and
``tines check-config`` (and a reload: HUP): the worker settings (with the workers' own conversion),
the resource limits against this process's hard limits, that ``max_worker_memory``'s figure will be readable
(``memory.check_limit``), the dynamic pool's bounds, that a temporary file can
be made in ``request_buffer_dir`` (as the workers make them, for request bodies too large for
memory) and that every TLS file can be read (the master reads them again on HUP, by then as the
user it switched to), both as the user the workers run as (checked in a short-lived child that
switches to ``user`` when the master is root), the TLS material (``tines.tls``: certificates and
keys read and checked, made once here and carried by the worker settings), the hooks module
(imported from ``chdir``) and the ``log_config`` file (read and checked; each worker applies it).

The switch to ``user`` / ``group`` itself (``drop_privileges``) is here too: the master makes it
once after binding (privileged ports first), and the checking child makes the very same switch
first, so the check proves what the workers will be able to do.

Must not: fork a worker (only that one checking child, which exits at once), start threads,
bind sockets or load the app.
"""

from __future__ import annotations

import errno
import os
import pwd
import time
from dataclasses import dataclass

from tines import hooks as server_hooks
from tines import limits, logs, memory, pool, tls
from tines.config import Config
from tines.config import gunicorn as gunicorn_config
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
    warnings: tuple[str, ...] = ()
    """What does not stop a start but must be said (a certificate that expires within a week)."""
    tls: str = ""
    """``check-config``'s line about TLS (``tls.describe``)."""


def check(cfg: Config, ticket_secret: bytes) -> Checked:
    """Run every check; raise ConfigError (one line) on the first problem. The TLS material's
    ticket keys come from ``ticket_secret`` (the master's, ``tls.new_ticket_secret``).

    Relative TLS paths are taken from the current directory (the one ``tines`` started in: a
    reload goes back to it first). Changes to ``chdir`` last when it is set (the workers import
    the app, and the master the hooks module, from there).
    """
    from tines.worker import worker_settings

    base = os.getcwd()
    tls_files = tls.files(cfg, base)
    limits.check(cfg)
    memory.check_limit(cfg)
    # Resolved and absolute already (config.load: the temp dir when unset, a relative one
    # taken from chdir).
    directory = str(cfg.request_buffer_dir)
    if cfg.user is not None and os.geteuid() == 0 and cfg.user != 0:
        check_as(cfg.group, cfg.user, directory, tls_files)
    else:
        check_request_buffer_dir(directory)
        try:
            tls.check_readable(tls_files)
        except ConfigError as error:
            if cfg.user is not None and os.geteuid() == cfg.user:  # a reload, after the switch
                raise ConfigError(f"{error} (as user {_user_name(cfg.user)}, whom the master switched to)") from None
            raise
    if cfg.log_config is not None:
        logs.read_config(cfg.log_config)  # applied by each worker after fork
    material = tls.make_material(cfg, base, ticket_secret)
    settings = worker_settings(cfg, material)
    pool_settings = pool.settings(cfg)
    if cfg.chdir:
        os.chdir(cfg.chdir)
    from_gunicorn = gunicorn_config.gives_hooks(cfg.config_file, cfg.source("hooks"))
    return Checked(settings, server_hooks.load(cfg.hooks, from_gunicorn), pool_settings,
                   tuple(tls.expiry_warnings(material, time.time())), tls.describe(cfg, material))


def drop_privileges(group: int | None, user: int | None) -> None:
    """Switch to ``group`` (only group) and ``user``, skipping what is already in effect: a
    master started by an upgrade runs as the user its old master switched to, where
    ``setgroups`` would fail (EPERM) and ``setuid`` / ``setgid`` to the same ids change nothing."""
    if group is not None and not (os.getgid() == os.getegid() == group and set(os.getgroups()) <= {group}):
        os.setgid(group)
        os.setgroups([group])
    if user is not None and not os.getuid() == os.geteuid() == user:
        os.setuid(user)


def check_as(group: int | None, user: int, directory: str, tls_files: list[tuple[str, str]]) -> None:
    """``check_request_buffer_dir`` and ``tls.check_readable`` as ``user`` (and ``group``), in
    a child process that switches to them as the master will after binding (the master itself
    must stay root until then, and starts no threads: a fork is the way)."""
    name = _user_name(user)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        why = "whom the workers run as"
        try:
            os.close(read)
            drop_privileges(group, user)
            check_request_buffer_dir(directory)
            why += ", and the master once it has switched: it reads the TLS files again on HUP"
            tls.check_readable(tls_files)
            code = 0
        except ConfigError as error:
            os.write(write, f"{error} (as user {name}, {why})".encode())
            code = 1
        except BaseException as error:  # anything else: say it, never run on as a copy
            os.write(write, f"cannot check request_buffer_dir and the TLS files as user {name}: {error}".encode())
            code = 1
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        message = pipe.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise ConfigError(message or f"request_buffer_dir: the check as user {name} failed")


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


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
        import tempfile  # rarely needed: the master of the usual case does not hold it

        try:
            fd, name = tempfile.mkstemp(prefix=".tines-spool-", dir=directory)
            os.unlink(name)
        except OSError as fallback:
            raise ConfigError(f"request_buffer_dir: cannot create a temporary file in {directory}: "
                              f"{fallback.strerror}") from None
    os.close(fd)
