"""gunicorn's and uvicorn's own settings, each with what it means in Tines: the one table both
their command-line flags (``tines serve -k gthread``) and gunicorn's Python config file
(``-c gunicorn.conf.py``: ``worker_class = "gthread"``) go through.

Owns: ``PEER_SETTINGS`` (one ``PeerSetting`` per setting of theirs: its name in their config,
its flags, and either how it becomes Tines settings or why it does not), and the lookups by name
(``find``) and by flag (``by_flag``).

Must not: declare a Tines setting (the registry does; a row names them as strings that a test
checks against ``SETTINGS``), parse a command line or read a file (``tines.serve_cli`` and
``tines.config.gunicorn`` do), or import anything heavy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

Apply = Callable[[object, Mapping[str, object]], Mapping[str, object]]
"""Their value (a string from a command line, or the Python value a config file assigned) and
every other setting of theirs given from the same source, by their name, to Tines' settings
(by registry name) with raw values that the setting's converter accepts."""


@dataclass(frozen=True)
class PeerSetting:
    """One of gunicorn's or uvicorn's settings and what Tines makes of it.

    ``apply`` set, ``note`` empty: the same meaning, taken silently. ``apply`` set and a
    ``note``: taken, with the note printed once as a warning saying what Tines does instead
    (``--worker-tmp-dir``: there is nothing to do). ``apply`` None: refused, and ``note`` is
    the hint naming the nearest real thing (Markdown, ``{name}`` naming a Tines setting as in
    ``tines.config.migration``). ``takes_value`` False for on/off flags (their value is True).
    """

    server: str
    name: str
    flags: tuple[str, ...] = ()
    apply: Apply | None = None
    note: str = ""
    takes_value: bool = True

    @property
    def accepted(self) -> bool:
        """True when Tines takes the setting (possibly with a note)."""
        return self.apply is not None


def _same(name: str) -> Apply:
    """Their value is Tines' setting ``name``'s."""
    return lambda value, _others: {name: value}


PEER_SETTINGS: tuple[PeerSetting, ...] = (
    PeerSetting("gunicorn", "workers", ("-w", "--workers"), _same("workers")),
    PeerSetting("gunicorn", "bind", ("-b", "--bind"), _same("bind")),
    PeerSetting("gunicorn", "threads", ("--threads",), _same("threads")),
)
"""Every gunicorn and uvicorn setting Tines answers, accepted or refused with a hint."""


def find(server: str, name: str) -> PeerSetting | None:
    """The row for ``server``'s setting ``name`` (their config-file name), or None."""
    return next((row for row in PEER_SETTINGS if row.server == server and row.name == name), None)


def by_flag(flag: str) -> tuple[PeerSetting, ...]:
    """The rows whose flags include ``flag`` (gunicorn's and uvicorn's may share one)."""
    return tuple(row for row in PEER_SETTINGS if flag in row.flags)
