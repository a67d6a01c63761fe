"""The master's pid file (``--pid-file PATH``) and its ``PATH.oldbin`` during an upgrade.

Owns: writing the file atomically and exclusively (a complete temp file linked to PATH, so a
reader never sees it empty or half written, and two masters starting at once cannot both take
it), refusing to start when a live process holds it, renaming it to ``PATH.oldbin`` for an
upgrade's overlap and back on a rollback (nginx's scheme, docs/signals.md "Upgrade"), and
removing whichever of the two still holds this master's pid at exit.

The master writes it as the user it starts as and renames / removes it as the user it runs as
(``--user``): the file lives in a directory that user owns (``/run/tines/``, not ``/run``).
"""

from __future__ import annotations

import os

from tines import logs
from tines.errors import ConfigError

OLDBIN_SUFFIX = ".oldbin"
"""nginx's name for the old master's pid file during a binary upgrade."""

log = logs.get("pidfile")


def read_pid(path: str) -> int | None:
    """The pid a pid file holds, or None (missing, unreadable, not a pid)."""
    # Bytes: no codec lookup, which can fail after --user (the codec modules unreadable).
    try:
        with open(path, "rb") as handle:
            text = handle.read(64).strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) > 0 else None


def process_alive(pid: int) -> bool:
    """True while a process with this pid exists (a zombie counts: its parent still owns it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


class PidFile:
    """``--pid-file``: the path of this master's pid file (absolute: taken from the directory
    ``tines`` started in, before ``--chdir``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.oldbin = path + OLDBIN_SUFFIX

    def write(self, pid: int, may_replace: int | None = None) -> None:
        """Write ``pid`` to PATH atomically. Raises ConfigError (exit 2) when a live process
        other than this one and ``may_replace`` (the old master of an upgrade) holds it; a
        stale file (its process gone, or no pid in it) is replaced with a warning."""
        temp = f"{self.path}.{pid}.tmp"
        try:
            descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                os.write(descriptor, f"{pid}\n".encode())
            finally:
                os.close(descriptor)
            try:
                os.link(temp, self.path)  # exclusive: fails when PATH exists
            except FileExistsError:
                holder = read_pid(self.path)
                if holder is not None and holder in (pid, may_replace):
                    os.rename(temp, self.path)  # ours, or the old master's of this upgrade
                    return
                if holder is not None and process_alive(holder):
                    raise ConfigError(f"pid file {self.path} is held by running process {holder} "
                                      "(another tines master?); stop it, or remove the file if "
                                      "that process is not tines") from None
                log.warning("replacing stale pid file %s (%s)", self.path,
                            "no pid in it" if holder is None else f"process {holder} is gone")
                # Removed, then linked again: the exclusive step stays exclusive, so of two
                # masters replacing the same stale file at once, one is refused.
                try:
                    os.unlink(self.path)
                except FileNotFoundError:
                    pass
                try:
                    os.link(temp, self.path)
                except FileExistsError:
                    raise ConfigError(f"pid file {self.path} was taken by another process while "
                                      "this one replaced a stale one") from None
        except OSError as error:
            raise ConfigError(f"cannot write pid file {self.path}: {error}") from None
        finally:
            try:
                os.unlink(temp)
            except FileNotFoundError:
                pass

    def to_oldbin(self, pid: int) -> None:
        """An upgrade starts: PATH becomes PATH.oldbin (the new master writes PATH)."""
        self._move(self.path, self.oldbin, pid)

    def from_oldbin(self, pid: int) -> None:
        """A rollback: PATH.oldbin becomes PATH again (whatever the failed new master left)."""
        self._move(self.oldbin, self.path, pid)

    def _move(self, source: str, target: str, pid: int) -> None:
        if read_pid(source) != pid:
            log.warning("pid file %s does not hold this master's pid %d: not renamed to %s", source, pid, target)
            return
        try:
            os.rename(source, target)
        except OSError as error:
            log.warning("cannot rename pid file %s to %s: %s", source, target, error)

    def remove(self, pid: int) -> None:
        """At exit: remove PATH or PATH.oldbin, whichever still holds ``pid`` (never the one a
        new master owns)."""
        for path in (self.path, self.oldbin):
            if read_pid(path) == pid:
                try:
                    os.unlink(path)
                except OSError as error:
                    log.warning("cannot remove pid file %s: %s", path, error)
