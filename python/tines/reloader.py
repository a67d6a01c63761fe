"""Development reload (``--reload``): watch the app's source tree and reload on a save.

Owns: the inotify instance (through ctypes: ``inotify_init1``, ``inotify_add_watch``), decoding
its event records, the include/exclude globs, the watches on every directory of the tree (new
directories included), the debounce (one save that an editor performs as several file
operations gives one reload), the syntax check of changed ``.py`` files, and deciding when to
reload. The master owns the rest: the inotify fd sits in its own ``select`` set
(``Arbiter.sleep`` calls ``read``), ``wait`` is part of its loop timeout, and ``check`` runs in
its loop and calls ``Arbiter.handle_hup`` (the one entry point of a reload).

This is Apache::Reload done without a stat per request: nothing happens until the kernel says
a file changed.

Must not: start a thread (the master forks; docs/adr/0001-fork-safety-and-readiness.md, which is
why ``watchfiles`` and the ``notify`` crate, each watching from a thread of its own, do not fit),
import the app (a changed file is only compiled), or sleep (the quiet period is a due time in
the master's loop timeout).
"""

from __future__ import annotations

import ctypes
import errno
import fnmatch
import importlib.util
import logging
import os
import struct
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tines.app_loader import source_directory
from tines.config import Config
from tines.errors import ConfigError

# inotify(7) flags and event bits (linux/inotify.h; the same on every Linux architecture).
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_ISDIR = 0x40000000

WATCH_MASK = (IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_MOVED_FROM
              | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)
"""What each directory watch reports. Not IN_MODIFY: a save is complete at IN_CLOSE_WRITE
(written in place) or IN_MOVED_TO (written to a temporary file and renamed over the old one),
and IN_MODIFY would wake the master on every write() of a large save."""

EVENT_HEADER = struct.Struct("iIII")
"""struct inotify_event: int wd; uint32_t mask, cookie, len; then ``len`` bytes of name,
NUL-padded (len is 0 for an event about the watched directory itself)."""

READ_SIZE = 65536
"""Bytes per read of the inotify fd: room for at least 240 events of the longest name (16 +
NAME_MAX + 1 bytes each); the loop reads until the fd is empty."""

QUIET_PERIOD = 0.1
"""Seconds without a further matching event before acting: an editor's save (a temporary file
renamed over the old one, vim's ``4913`` probe and backup, a formatter run on save) is a burst
of events well within this, and a person does not notice 100 ms."""

LONGEST_WAIT = 1.0
"""A stream of changes (a ``git checkout``, a build writing files) reloads at most this long
after its first event, even if it has not gone quiet."""

NAMES_SHOWN = 3
"""Changed files named in the ``reloading`` line; more are counted."""

OVERFLOW = "(inotify event queue overflow)"
"""What the log names as changed when the kernel dropped events (IN_Q_OVERFLOW)."""


@dataclass(frozen=True)
class Event:
    """One decoded ``struct inotify_event``."""

    watch: int
    """The watch descriptor (-1 for IN_Q_OVERFLOW)."""
    mask: int
    cookie: int
    """Pairs an IN_MOVED_FROM with its IN_MOVED_TO (0 otherwise)."""
    name: str
    """The entry's name in the watched directory; empty for the directory itself."""


def decode_events(data: bytes) -> list[Event]:
    """Every event record in one read of an inotify fd, in order. The kernel returns whole
    records only, so a short or truncated record is an error (ValueError), not a partial."""
    events = []
    offset = 0
    while offset < len(data):
        if offset + EVENT_HEADER.size > len(data):
            raise ValueError(f"truncated inotify event header at byte {offset} of {len(data)}")
        watch, mask, cookie, length = EVENT_HEADER.unpack_from(data, offset)
        start = offset + EVENT_HEADER.size
        if start + length > len(data):
            raise ValueError(f"inotify event name of {length} bytes runs past the end at byte {start}")
        raw_name = data[start:start + length].split(b"\0", 1)[0]
        events.append(Event(watch, mask, cookie, os.fsdecode(raw_name)))
        offset = start + length
    return events


@dataclass(frozen=True)
class Globs:
    """The include and exclude globs (``fnmatch``, case-sensitive). A glob matches a name
    (``app.py``, ``__pycache__``) or a path relative to the watched tree (``pkg/app.py``)."""

    include: tuple[str, ...]
    exclude: tuple[str, ...]

    @staticmethod
    def matches(globs: Iterable[str], relative: str) -> bool:
        """True when one of ``globs`` matches ``relative`` or its last component."""
        name = os.path.basename(relative)
        return any(fnmatch.fnmatchcase(name, glob) or fnmatch.fnmatchcase(relative, glob) for glob in globs)

    def wants_file(self, relative: str) -> bool:
        """A change to this file (path relative to the tree) should reload."""
        return self.matches(self.include, relative) and not self.matches(self.exclude, relative)

    def skips_directory(self, relative: str) -> bool:
        """This directory (and everything under it) is not watched."""
        return self.matches(self.exclude, relative)


class Inotify:
    """One inotify instance: non-blocking, close-on-exec (so an exec'd new master does not
    inherit it)."""

    def __init__(self) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.inotify_init1.argtypes = [ctypes.c_int]
        self.libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self.libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        fd = self.libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, f"inotify_init1: {os.strerror(code)}")
        self.fd: int = fd

    def add_watch(self, path: str, mask: int) -> int:
        """Watch ``path``; its watch descriptor (the same one again for a path already
        watched). OSError with the errno on failure (ENOSPC: fs.inotify.max_user_watches)."""
        watch = self.libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if watch < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), path)
        return int(watch)

    def remove_watch(self, watch: int) -> None:
        """Stop a watch (the kernel then queues IN_IGNORED for it); one already gone is fine."""
        self.libc.inotify_rm_watch(self.fd, watch)

    def read(self) -> list[Event]:
        """Every event queued now (none when the queue is empty)."""
        events: list[Event] = []
        while True:
            try:
                data = os.read(self.fd, READ_SIZE)
            except BlockingIOError:
                return events
            if not data:
                return events
            events.extend(decode_events(data))

    def close(self) -> None:
        """Close the fd (every watch goes with it)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class SourceWatcher:
    """Watches the tree and decides when to reload. The master calls ``read`` when
    ``fileno()`` is readable, sleeps at most ``wait(now)``, and calls ``check`` every turn of
    its loop, which calls ``reload`` (``Arbiter.handle_hup``) when it is time.

    Raises ConfigError (one line, exit 2) when inotify cannot be set up.
    """

    def __init__(self, cfg: Config, log: logging.Logger, reload: Callable[[], None]) -> None:
        self.log = log
        self.reload = reload
        self.root = os.path.abspath(source_directory(str(cfg.app)))
        self.globs = Globs(tuple(cfg.reload_include), tuple(cfg.reload_exclude))
        try:
            self.inotify = Inotify()
        except OSError as error:
            raise ConfigError(f"--reload needs inotify: {error.strerror} (fs.inotify.max_user_instances?)") from None
        self.directories: dict[int, str] = {}
        """Watch descriptor -> the directory's path."""
        self.watches: dict[str, int] = {}
        """Directory path -> its watch descriptor."""
        self.changed: dict[str, None] = {}
        """Paths changed since the last reload, in order (a dict as an ordered set)."""
        self.broken: dict[str, None] = {}
        """Changed ``.py`` files whose last compile failed: checked again before any reload."""
        self.first_change: float | None = None
        self.due: float | None = None
        """When to act on ``changed`` (the end of the quiet period); None when nothing changed."""
        self.warned_limit = False
        log.warning("reload: --reload is for development only: every save under %s reloads the "
                    "workers (in production deploy with HUP or USR2, docs/signals.md)", self.root)
        self.watch_tree(self.root, report=False)
        log.info("reload: watching %d director%s under %s (include %s; exclude %s)",
                 len(self.watches), "y" if len(self.watches) == 1 else "ies", self.root, " ".join(self.globs.include), " ".join(self.globs.exclude))

    def fileno(self) -> int:
        """The inotify fd, for the master's ``select``."""
        return self.inotify.fd

    def close(self) -> None:
        """Stop watching."""
        self.inotify.close()

    # ----- watching --------------------------------------------------------------------------

    def relative(self, path: str) -> str:
        """``path`` relative to the watched tree (as globs and log lines see it)."""
        return os.path.relpath(path, self.root)

    def watch_tree(self, top: str, report: bool) -> None:
        """Watch ``top`` and every directory under it that is not excluded. Each directory is
        watched before it is listed, so a file created meanwhile is seen one way or the other.
        With ``report`` (a directory that appeared while running), files already in it that
        match count as changed."""
        pending = [top]
        while pending:
            directory = pending.pop()
            if not self.add_watch(directory):
                continue
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                relative = self.relative(entry.path)
                try:
                    is_directory = entry.is_dir(follow_symlinks=False)
                except OSError:
                    continue
                if is_directory:
                    if not self.globs.skips_directory(relative):
                        pending.append(entry.path)
                elif report and self.globs.wants_file(relative):
                    self.note(entry.path)

    def add_watch(self, directory: str) -> bool:
        """Watch one directory; False when it cannot be (gone, unreadable, or the watch limit:
        logged once)."""
        try:
            watch = self.inotify.add_watch(directory, WATCH_MASK)
        except OSError as error:
            if error.errno == errno.ENOSPC and not self.warned_limit:
                self.warned_limit = True
                self.log.warning("reload: cannot watch %s: the inotify watch limit is reached "
                                 "(raise fs.inotify.max_user_watches, or exclude directories with "
                                 "--reload-exclude); changes there are not seen", directory)
            elif error.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ENOSPC):
                self.log.warning("reload: cannot watch %s: %s", directory, error.strerror)
            return False
        self.directories[watch] = directory
        self.watches[directory] = watch
        return True

    def forget_tree(self, top: str) -> None:
        """Stop watching ``top`` and everything under it (it moved away: its watches would
        report under the old path)."""
        prefix = top + os.sep
        for directory in [d for d in self.watches if d == top or d.startswith(prefix)]:
            watch = self.watches.pop(directory)
            self.directories.pop(watch, None)
            self.inotify.remove_watch(watch)

    # ----- events ----------------------------------------------------------------------------

    def read(self) -> None:
        """Read every queued event and note the changes that matter."""
        for event in self.inotify.read():
            self.on_event(event)

    def on_event(self, event: Event) -> None:
        """One event: note a matching file's change, follow directories that appear, move or
        go away."""
        if event.mask & IN_Q_OVERFLOW:
            # Events were dropped: something changed, and a new directory may be unwatched.
            self.note(OVERFLOW)
            self.watch_tree(self.root, report=False)
            return
        directory = self.directories.get(event.watch)
        if directory is None:
            return
        if event.mask & IN_IGNORED:
            self.directories.pop(event.watch, None)
            if self.watches.get(directory) == event.watch:
                del self.watches[directory]
            return
        if event.mask & (IN_DELETE_SELF | IN_MOVE_SELF):
            if directory == self.root:
                self.log.warning("reload: the watched directory %s was %s: changes are no longer seen",
                                 directory, "deleted" if event.mask & IN_DELETE_SELF else "moved")
            return
        path = os.path.join(directory, event.name)
        relative = self.relative(path)
        if event.mask & IN_ISDIR:
            if self.globs.skips_directory(relative):
                return
            if event.mask & (IN_CREATE | IN_MOVED_TO):
                self.watch_tree(path, report=True)
            elif event.mask & IN_MOVED_FROM and path in self.watches:
                self.forget_tree(path)
                self.note(path + os.sep)
            return
        if self.globs.wants_file(relative):
            self.note(path)

    def note(self, path: str) -> None:
        """Record a change; the quiet period starts again (up to LONGEST_WAIT after the first)."""
        self.changed[path] = None
        now = time.monotonic()
        if self.first_change is None:
            self.first_change = now
        self.due = min(now + QUIET_PERIOD, self.first_change + LONGEST_WAIT)

    # ----- acting ----------------------------------------------------------------------------

    def wait(self, now: float) -> float | None:
        """Seconds until ``check`` has something to do; None when nothing changed."""
        return None if self.due is None else max(0.0, self.due - now)

    def check(self) -> None:
        """When the quiet period is over: compile each changed ``.py`` file (and any still
        broken from before); on a syntax error log it and keep the old code, else log what
        changed and reload."""
        if self.due is None or time.monotonic() < self.due:
            return
        self.due = self.first_change = None
        for path in list(self.broken):
            self.changed.setdefault(path, None)
        for path in self.changed:
            if path.endswith(".py") and not self.compiles(path):
                self.broken[path] = None
                return  # self.changed is kept: the next save reloads for all of it
            self.broken.pop(path, None)
        changed = list(self.changed)
        self.changed.clear()
        for path in changed:
            if path.endswith(".py"):
                self.drop_bytecode(path)
        names = [self.relative(path) if path != OVERFLOW else path for path in changed]
        shown = ", ".join(names[:NAMES_SHOWN])
        if len(names) > NAMES_SHOWN:
            shown += f" and {len(names) - NAMES_SHOWN} more"
        self.log.info("reload: %d file(s) changed (%s): reloading", len(names), shown)
        self.reload()

    def compiles(self, path: str) -> bool:
        """Compile the file's source (no import); False, with the error logged, when it has a
        syntax error. A file that is gone or unreadable passes (the import will tell)."""
        try:
            with open(path, "rb") as file:
                source = file.read()
        except OSError:
            return True
        try:
            compile(source, path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as error:
            # ValueError: NUL bytes in the source (a SyntaxError from Python 3.12 on).
            self.log.error("reload: %s: syntax error; the old code keeps serving until the next save\n%s",
                           self.relative(path), "".join(traceback.format_exception_only(type(error), error)).rstrip())
            return False
        return True

    def drop_bytecode(self, path: str) -> None:
        """Remove the changed file's cached bytecode. CPython trusts a ``.pyc`` whose recorded
        source mtime (whole seconds) and size match, so an edit that keeps the size within the
        same second as the last import (or a save that restores the old mtime) would otherwise
        load the old code."""
        try:
            cached = importlib.util.cache_from_source(path)
        except NotImplementedError:
            return  # an interpreter without a bytecode cache (no cache_tag): nothing to drop
        try:
            os.unlink(cached)
        except FileNotFoundError:
            return  # never imported, or bytecode not written (PYTHONDONTWRITEBYTECODE)
        except OSError as error:
            self.log.warning("reload: cannot remove %s (%s): a same-size edit within the second "
                             "may load the old bytecode", cached, error)
