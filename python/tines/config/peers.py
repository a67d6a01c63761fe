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
    # gunicorn config-file names (GC)
    PeerSetting("gunicorn", "wsgi_app", (), _same("app")),
    PeerSetting("gunicorn", "worker_class", ("-k", "--worker-class"), lambda value, _others: _worker_class(value)),
    PeerSetting("gunicorn", "timeout", ("-t", "--timeout"), lambda value, others: _timeout(value, others),
                "gunicorn kills a worker silent for that long; Tines takes it as {boot_timeout} (a worker "
                "must be ready in time) and, with sync workers (mpm prefork), as {request_timeout} "
                "(an app holding a request that long)"),
    PeerSetting("gunicorn", "graceful_timeout", ("--graceful-timeout",), _same("graceful_timeout")),
    PeerSetting("gunicorn", "keepalive", ("--keep-alive",), _same("keepalive_timeout")),
    PeerSetting("gunicorn", "max_requests", ("--max-requests",), _same("max_requests")),
    PeerSetting("gunicorn", "max_requests_jitter", ("--max-requests-jitter",), _same("max_requests_jitter")),
    PeerSetting("gunicorn", "preload_app", ("--preload",), _same("preload"), takes_value=False),
    PeerSetting("gunicorn", "forwarded_allow_ips", ("--forwarded-allow-ips",), _same("forwarded_allow_ips")),
    PeerSetting("gunicorn", "accesslog", ("--access-logfile",), _same("access_log")),
    PeerSetting("gunicorn", "errorlog", ("--error-logfile", "--log-file"), _same("error_log")),
    PeerSetting("gunicorn", "loglevel", ("--log-level",), _same("log_level")),
    PeerSetting("gunicorn", "pidfile", ("-p", "--pid"), _same("pid_file")),
    PeerSetting("gunicorn", "chdir", ("--chdir",), _same("chdir")),
    PeerSetting("gunicorn", "backlog", ("--backlog",), _same("backlog")),
    PeerSetting("gunicorn", "limit_request_line", ("--limit-request-line",), _same("max_request_line")),
    PeerSetting("gunicorn", "limit_request_fields", ("--limit-request-fields",), _same("max_headers")),
    PeerSetting("gunicorn", "limit_request_field_size", ("--limit-request-field_size",),
                lambda _value, _others: {},
                "not taken: Tines bounds the whole request head, {max_head_size}, not each field"),
    PeerSetting("gunicorn", "user", ("-u", "--user"), _same("user")),
    PeerSetting("gunicorn", "group", ("-g", "--group"), _same("group")),
    PeerSetting("gunicorn", "umask", ("-m", "--umask"), _same("umask")),
    PeerSetting("gunicorn", "reload", ("--reload",), _same("reload"), takes_value=False),
    PeerSetting("gunicorn", "certfile", ("--certfile",), _same("certfile")),
    PeerSetting("gunicorn", "keyfile", ("--keyfile",), _same("keyfile")),
    PeerSetting("gunicorn", "daemon", ("-D", "--daemon"), None,
                "Tines stays in the foreground: run it under systemd or a supervisor "
                "(`--ready-fd`, sd_notify; docs/deploy.md)"),
    PeerSetting("gunicorn", "statsd_host", ("--statsd-host",), None,
                "Tines has no StatsD client: its metrics are Prometheus `/metrics` on {status_bind}"),
)
"""Every gunicorn and uvicorn setting Tines answers, accepted or refused with a hint."""


GUNICORN_ASGI_WORKERS = ("uvicorn.workers.UvicornWorker", "uvicorn_worker.UvicornWorker",
                         "uvicorn.workers.UvicornH11Worker", "uvicorn_worker.UvicornH11Worker")
"""gunicorn worker classes that run an ASGI app (uvicorn's, now in the ``uvicorn-worker`` package)."""

GUNICORN_MPMS = {"sync": "prefork", "gunicorn.workers.sync.SyncWorker": "prefork", "egg:gunicorn#sync": "prefork",
                 "gthread": "thread", "gunicorn.workers.gthread.ThreadWorker": "thread",
                 "egg:gunicorn#gthread": "thread"}
"""gunicorn's own worker classes Tines has (in each spelling gunicorn takes), by the MPM that
does the same."""


def _worker_class(value: object) -> Mapping[str, object]:
    """gunicorn's ``worker_class``: its sync and gthread workers are MPMs; uvicorn's worker
    means the app is ASGI (served by the event reactor); the others Tines has not."""
    name = str(value).strip()
    if name in GUNICORN_ASGI_WORKERS:
        return {"interface": "asgi"}
    if name not in GUNICORN_MPMS:
        raise ValueError("must be sync, gthread or a uvicorn worker class (gevent, eventlet, tornado: "
                         "Tines' event MPM serves many connections per worker without them)")
    return {"mpm": GUNICORN_MPMS[name]}


def _timeout(value: object, others: Mapping[str, object]) -> Mapping[str, object]:
    """gunicorn's ``timeout``: the boot's bound always; a request's only on sync workers
    (gunicorn's default), where a silent worker is a stuck request. gunicorn runs its sync
    worker class as gthread when ``threads`` is over 1."""
    threads = others.get("threads", 1)
    sync = GUNICORN_MPMS.get(str(others.get("worker_class", "sync")).strip()) == "prefork"
    if sync and not (isinstance(threads, (int, str)) and str(threads).strip().isdigit() and int(threads) > 1):
        return {"boot_timeout": value, "request_timeout": value}
    return {"boot_timeout": value}


def find(server: str, name: str) -> PeerSetting | None:
    """The row for ``server``'s setting ``name`` (their config-file name), or None."""
    return next((row for row in PEER_SETTINGS if row.server == server and row.name == name), None)


def by_flag(flag: str) -> tuple[PeerSetting, ...]:
    """The rows whose flags include ``flag`` (gunicorn's and uvicorn's may share one)."""
    return tuple(row for row in PEER_SETTINGS if flag in row.flags)
