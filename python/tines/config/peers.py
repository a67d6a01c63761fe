"""gunicorn's and uvicorn's own settings, each with what it means in Tines: the one table both
their command-line flags (``tines serve -k gthread``) and gunicorn's Python config file
(``-c gunicorn.conf.py``: ``worker_class = "gthread"``) go through.

Owns: ``PEER_SETTINGS`` (one ``PeerSetting`` per setting of gunicorn 27.0.1 and uvicorn 0.54.0:
its name in their config, its flags, and either how it becomes Tines settings or why it does
not), the lookups by name (``find``) and by flag (``by_flag``), and reading their environment
values (``-e KEY=VALUE``, ``--env-file``: ``environment``). A test walks both servers' checked-in
``--help`` lists (tests/data/peers/, made by tools/peer_help.py) against this table.

Must not: declare a Tines setting (the registry does; a row names them as strings that a test
checks against ``SETTINGS``), parse a command line or read a config file (``tines.serve_cli``
and ``tines.config.gunicorn`` do), or import anything heavy. ``root_path`` and ``log_config``
are named in plain backticks, not ``{name}``, in the docs text: they are settings of their own
roles in issue 40, and a ``{name}`` is looked up in the registry when docs/settings.md renders.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

Apply = Callable[[object, Mapping[str, object]], "Mapping[str, object] | None"]
"""Their value (a string from a command line, True/False for an on/off flag, or the Python
value a config file assigned) and every other setting of theirs given from the same source, by
their name, to Tines' settings (by registry name) with raw values that the setting's converter
accepts; None when Tines refuses that value (then the row's ``note`` or ``ours`` says why)."""


@dataclass(frozen=True)
class PeerSetting:
    """One of gunicorn's or uvicorn's settings and what Tines makes of it.

    ``apply`` set, ``note`` empty: the same meaning, taken silently. ``apply`` set and a
    ``note``: taken, with the note printed once as a warning saying what Tines does instead
    (``--worker-tmp-dir``: there is nothing to do). ``apply`` None: refused, and ``note`` is
    the hint naming the nearest real thing. ``ours`` is the docs' cell for an accepted row
    (docs/settings.md's migration table; a refused row's is its ``note``). Both are Markdown
    where ``{name}`` names a Tines setting as in ``tines.config.migration``. ``takes_value``
    False for on/off flags (their value is True, or False for the ``--no-`` spelling).
    ``environ`` marks the settings that set the app's environment rather than a setting (their
    ``apply`` gives no setting; ``environment`` reads their value). ``refusal`` says why when
    ``apply`` refuses one value of a setting it otherwise takes (``-k gevent``); ``hint`` is the
    text for any refusal.
    """

    server: str
    name: str
    flags: tuple[str, ...] = ()
    apply: Apply | None = None
    note: str = ""
    takes_value: bool = True
    ours: str = ""
    environ: bool = False
    refusal: str = ""

    @property
    def accepted(self) -> bool:
        """True when Tines takes the setting (possibly with a note)."""
        return self.apply is not None

    @property
    def hint(self) -> str:
        """Why a value is refused: ``refusal`` for one value of an accepted row, else ``note``."""
        return self.refusal or self.note

    @property
    def answer(self) -> str:
        """What Tines has instead, for the docs and for an error: ``ours``, then the note."""
        return "; ".join(part for part in (self.ours, self.note) if part) or self.refusal


def _same(name: str) -> Apply:
    """Their value is Tines' setting ``name``'s."""
    return lambda value, _others: {name: value}


def _nothing(_value: object, _others: Mapping[str, object]) -> Mapping[str, object]:
    """Taken, and nothing to set (the row's note says why)."""
    return {}


def _same_row(server: str, name: str, flags: tuple[str, ...], setting: str, note: str = "",
              takes_value: bool = True) -> PeerSetting:
    return PeerSetting(server, name, flags, _same(setting), note, takes_value, "{" + setting + "}")


def _nothing_row(server: str, name: str, flags: tuple[str, ...], note: str, takes_value: bool = True) -> PeerSetting:
    return PeerSetting(server, name, flags, _nothing, note, takes_value)


def _refused(server: str, name: str, flags: tuple[str, ...], note: str, takes_value: bool = True) -> PeerSetting:
    return PeerSetting(server, name, flags, None, note, takes_value)


def _text(value: object) -> str:
    return str(value).strip()


def _limit(name: str) -> Apply:
    """gunicorn's request limits, where 0 means none: Tines always has one."""
    return lambda value, _others: None if _text(value) == "0" else {name: value}


_SYNC = ("sync", "gunicorn.workers.sync.syncworker")
_GTHREAD = ("gthread", "gunicorn.workers.gthread.threadworker")


def effective_worker_class(worker_class: object, threads: object) -> str:
    """The worker class gunicorn runs (lower case): the one given, else ``sync``; ``sync`` with
    ``threads`` above 1 is ``gthread`` (gunicorn switches). One rule for ``worker_class``,
    ``threads`` and ``timeout``, whatever order a config file assigns them in."""
    given = _text(worker_class).lower() if worker_class is not None else "sync"
    try:
        many = threads is not None and int(_text(threads)) > 1
    except ValueError:
        many = False
    if given in _SYNC:
        return "gthread" if many else "sync"
    return "gthread" if given in _GTHREAD else given


def _worker_class(value: object, others: Mapping[str, object]) -> Mapping[str, object] | None:
    """gunicorn's ``-k``: ``sync`` is prefork (gthread when ``threads`` is above 1, as gunicorn
    switches), ``gthread`` the thread MPM, an ASGI worker class (gunicorn's own ``asgi``,
    uvicorn's) says the app is ASGI; no gevent, eventlet, tornado."""
    effective = effective_worker_class(value, others.get("threads"))
    if effective == "sync":
        return {"mpm": "prefork"}
    if effective == "gthread":
        return {"mpm": "thread"}
    if effective in ASGI_WORKER_CLASSES:
        return {"interface": "asgi"}
    return None


ASGI_WORKER_CLASSES = frozenset({
    "asgi", "gunicorn.workers.gasgi.asgiworker", "uvicorn.workers.uvicornworker",
    "uvicorn.workers.uvicornh11worker", "uvicorn_worker.uvicornworker", "uvicorn_worker.uvicornh11worker"})
"""``worker_class`` values (lower case) that mean an ASGI app: gunicorn 27's ``asgi``, and the
uvicorn worker classes (``uvicorn.workers``, and the ``uvicorn-worker`` package's)."""


def _threads(value: object, others: Mapping[str, object]) -> Mapping[str, object] | None:
    """gunicorn's ``threads``: above 1 with the sync worker (its default), gunicorn runs gthread."""
    given = others.get("worker_class")
    if (given is None or _text(given).lower() in _SYNC) and effective_worker_class(given, value) == "gthread":
        return {"threads": value, "mpm": "thread"}
    return {"threads": value}


def _timeout(value: object, others: Mapping[str, object]) -> Mapping[str, object] | None:
    """gunicorn's ``-t``: a worker silent this long is killed (also at boot). ``boot_timeout``
    always; ``request_timeout`` only with ``-k sync`` given (one thread), where silence means a
    request held."""
    taken: dict[str, object] = {"boot_timeout": value}
    worker_class = others.get("worker_class")
    if worker_class is not None and effective_worker_class(worker_class, others.get("threads")) == "sync":
        taken["request_timeout"] = value
    return taken


def _reload_extra_files(value: object, _others: Mapping[str, object]) -> Mapping[str, object] | None:
    """gunicorn's ``reload_extra_files`` (uvicorn's ``reload_includes``): watched besides the
    Python modules, where Tines' ``reload_include`` replaces its default ``*.py``: both."""
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    return {"reload_include": ["*.py", *(item for item in items if item != "*.py")]}


def _host_port(value: object, others: Mapping[str, object]) -> Mapping[str, object] | None:
    """uvicorn's ``--host`` and ``--port`` (defaults 127.0.0.1 and 8000) make one bind."""
    host = _text(others.get("host", "127.0.0.1"))
    port = _text(others.get("port", "8000"))
    return {"bind": f"[{host}]:{port}" if ":" in host else f"{host}:{port}"}


def _cert_reqs(value: object, _others: Mapping[str, object]) -> Mapping[str, object] | None:
    """Python's ``ssl.CERT_NONE``, ``CERT_OPTIONAL``, ``CERT_REQUIRED`` (0, 1, 2)."""
    mode = {"0": "none", "1": "optional", "2": "required"}.get(_text(int(value) if isinstance(value, int) else value))
    return None if mode is None else {"client_cert": mode}


def _proxy_protocol(value: object, _others: Mapping[str, object]) -> Mapping[str, object] | None:
    text = _text(value).lower()
    if text in ("off", "false", "0"):
        return {"proxy_protocol": "false"}
    return {"proxy_protocol": "true"} if text in ("v1", "v2", "auto", "true", "1", "on") else None


def _proxy_allow_ips(value: object, others: Mapping[str, object]) -> Mapping[str, object] | None:
    """Tines trusts PROXY headers and X-Forwarded-* from one list: taken when it is the only one."""
    given = others.get("forwarded_allow_ips")
    if given is not None and _text(given) != _text(value):
        return None
    return {"forwarded_allow_ips": value}


def _http_protocols(value: object, _others: Mapping[str, object]) -> Mapping[str, object] | None:
    items = {item.strip().lower() for item in _text(value).split(",") if item.strip()}
    return None if items - {"h1", "h2"} else {"http2": "true" if "h2" in items else "false"}


def _protocol(value: object, _others: Mapping[str, object]) -> Mapping[str, object] | None:
    return {} if _text(value).lower() == "http" else None


def _no_when_false(setting: str, off: object) -> Apply:
    """An on/off pair whose on spelling is Tines' default: off sets ``setting`` to ``off``."""
    return lambda value, _others: {} if value is True or _text(value).lower() == "true" else {setting: off}


def _only_when_true(value: object, _others: Mapping[str, object]) -> Mapping[str, object] | None:
    """An on/off pair whose off spelling Tines cannot do."""
    return {} if value is None or value is True or _text(value).lower() in ("true", "1", "on") else None


def _http(value: object, _others: Mapping[str, object]) -> Mapping[str, object] | None:
    """uvicorn's ``--http`` names its parser (nothing to do); Granian's ``--http 1`` and ``2``
    choose the protocol, which Tines sets otherwise (``_GRANIAN_HTTP``): refused."""
    return {} if _text(value).lower() in ("auto", "h11", "httptools", "zttp") else None


def _ws(value: object, _others: Mapping[str, object]) -> Mapping[str, object] | None:
    return {"ws_max_connections": 0} if _text(value).lower() == "none" else {}


def _access_log(value: object, _others: Mapping[str, object]) -> Mapping[str, object] | None:
    return {"access_log": "-"} if value is True or _text(value).lower() == "true" else {}


def environment(value: object, read_file: bool) -> dict[str, str]:
    """The variables of ``-e``/``--env``/``raw_env`` (``KEY=VALUE``, one or a list of them) or,
    with ``read_file``, of an ``--env-file`` (``KEY=VALUE`` lines, ``#`` comments, an optional
    ``export``, values optionally quoted, as python-dotenv reads the common case). Raises
    ValueError("...") with what is wrong; OSError when the file cannot be read."""
    if read_file:
        with open(_text(value), encoding="utf-8") as file:
            lines = [line.strip() for line in file]
        items = [line.removeprefix("export ").strip() for line in lines if line and not line.startswith("#")]
    else:
        items = [_text(item) for item in (value if isinstance(value, (list, tuple)) else [value])]
    found: dict[str, str] = {}
    for item in items:
        key, equals, raw = item.partition("=")
        if not equals or not key.strip():
            raise ValueError(f"must be KEY=VALUE, got {item!r}")
        raw = raw.strip() if read_file else raw
        if read_file and len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
            raw = raw[1:-1]
        found[key.strip()] = raw
    return found


def _environ_row(server: str, name: str, flags: tuple[str, ...], ours: str, apply: Apply = _nothing) -> PeerSetting:
    return PeerSetting(server, name, flags, apply, "", True, ours, environ=True)


def _raw_env(value: object, _others: Mapping[str, object]) -> Mapping[str, object] | None:
    """gunicorn's ``-e``/``raw_env``: the app's environment (read by ``environment``), and
    ``SCRIPT_NAME`` in it, gunicorn's path prefix for every request, is ``root_path`` (a malformed
    item gives nothing here: ``environment`` says what is wrong with it)."""
    try:
        found = environment(value, read_file=False)
    except ValueError:
        return {}
    return {"root_path": found["SCRIPT_NAME"]} if "SCRIPT_NAME" in found else {}


def script_name_line(environ: Mapping[str, str]) -> str:
    """The line said when gunicorn's environment (``-e``, ``raw_env``) sets ``SCRIPT_NAME``: it
    is taken as ``root_path``; empty when it does not."""
    if "SCRIPT_NAME" not in environ:
        return ""
    return (f"SCRIPT_NAME={environ['SCRIPT_NAME']} is taken as root_path: Tines gives the app SCRIPT_NAME "
            "(and PATH_INFO the rest of the path) from that setting (--root-path)")


_STATSD = "none: Tines has no StatsD client; it serves Prometheus `/metrics` (and `/status.json`) on {status_bind}"
_SYSLOG = ("none: Tines writes its error log to {error_log} (a file or stderr, which journald takes under "
           "systemd); a `log_config` file can add Python's `SysLogHandler` for the app's records")
_CERT_REQS = "0, 1 or 2 (Python's `ssl.CERT_*`): {client_cert} `none`, `optional`, `required`"
_CIPHERS = ("none as an OpenSSL cipher string: {tls_cipher_suites} takes IANA names (`TLS_AES_128_GCM_SHA256`), "
            "AEAD and forward-secret suites only")
_TLS_VERSION = "none as an `ssl` module constant: {tls_min_version} (`1.2` or `1.3`; 1.0 and 1.1 are never offered)"
_PARSER = "none: Tines' own HTTP/1.1 parser has no leniency switches (it refuses what RFC 9112 refuses)"
_DIRTY = "none: Tines has no dirty arbiters; run long tasks in a task queue beside it"
_CONTROL = "none: Tines is driven by signals (docs/signals.md) and observed through {status_bind} (`tines status`)"
_HOOK = "a function of that name in the `-c FILE.py` config file (gunicorn's arguments) or in {hooks} (docs/hooks.md)"
_NO_HOOK = "none: Tines has no such moment; the hooks it runs are listed under {hooks} (docs/hooks.md)"
_KILL_SILENT = ("in gunicorn a worker silent this long is killed, at boot too; Tines sets {boot_timeout} (a worker "
                "not ready in time is killed) and, with `-k sync` only, {request_timeout} (a request held that long "
                "without progress replaces its worker); a streaming response that keeps producing is never cut")

_GRANIAN_HTTP = ("uvicorn's `auto`, `h11`, `httptools` or `zttp` (its parser, nothing to do); as Granian's protocol: "
                 "{http2=false} for HTTP/1.1 only (`1`), a cleartext {bind} written `h2c:HOST:PORT` for HTTP/2 only "
                 "(`2`), `http1+h2c:HOST:PORT` for both")

_G = "gunicorn"
_U = "uvicorn"

GUNICORN: tuple[PeerSetting, ...] = (
    PeerSetting(_G, "config", ("-c", "--config"), _same("config"), "", True,
                "`-c FILE`: Tines' TOML file, or gunicorn's Python config when FILE ends in `.py` (or is "
                "`python:module`); `./gunicorn.conf.py` is read only when named"),
    _same_row(_G, "wsgi_app", (), "app"),
    _same_row(_G, "bind", ("-b", "--bind"), "bind"),
    _same_row(_G, "backlog", ("--backlog",), "backlog"),
    _same_row(_G, "workers", ("-w", "--workers"), "workers"),
    PeerSetting(_G, "worker_class", ("-k", "--worker-class"), _worker_class, "", True,
                "{mpm=prefork} for `sync`, {mpm=thread} with {threads} for `gthread`; an ASGI worker (`asgi`, "
                "`uvicorn.workers.UvicornWorker`, `uvicorn_worker.UvicornWorker`) sets {interface=asgi}, served by "
                "the event reactor", refusal="none: Tines has no gevent, eventlet or tornado worker; `sync` is "
                "{mpm=prefork}, `gthread` {mpm=thread}, an ASGI worker class {interface=asgi}"),
    PeerSetting(_G, "threads", ("--threads",), _threads, "", True,
                "{threads}; above 1 with the sync worker, {mpm=thread} as gunicorn switches to gthread"),
    _same_row(_G, "worker_connections", ("--worker-connections",), "max_connections"),
    _same_row(_G, "max_requests", ("--max-requests",), "max_requests"),
    _same_row(_G, "max_requests_jitter", ("--max-requests-jitter",), "max_requests_jitter"),
    PeerSetting(_G, "timeout", ("-t", "--timeout"), _timeout, _KILL_SILENT, True,
                "{boot_timeout}, and {request_timeout} with `-k sync`"),
    _same_row(_G, "graceful_timeout", ("--graceful-timeout",), "graceful_timeout"),
    _same_row(_G, "keepalive", ("--keep-alive",), "keepalive_timeout"),
    PeerSetting(_G, "limit_request_line", ("--limit-request-line",), _limit("max_request_line"), "", True,
                "{max_request_line}", refusal="none for 0 (no limit): Tines always limits the request line, "
                "{max_request_line}"),
    PeerSetting(_G, "limit_request_fields", ("--limit-request-fields",), _limit("max_headers"), "", True,
                "{max_headers}", refusal="none for 0 (no limit): Tines always limits the fields, {max_headers}"),
    _nothing_row(_G, "limit_request_field_size", ("--limit-request-field_size",), "not taken: Tines limits the "
                 "whole head (request line and every field together) with max_head_size, not each field; set that "
                 "for a bound"),
    _same_row(_G, "reload", ("--reload",), "reload", takes_value=False),
    _nothing_row(_G, "reload_engine", ("--reload-engine",), "nothing to do: Tines' reload always uses inotify"),
    PeerSetting(_G, "reload_extra_files", ("--reload-extra-file",), _reload_extra_files,
                "taken as reload_include with `*.py` (as gunicorn watches the app's modules too): the paths are "
                "globs relative to the watched tree (the app's directory); a file outside it is not watched", True,
                "{reload_include} `*.py` and the files, relative to the watched tree"),
    _refused(_G, "spew", ("--spew",), "none: {profile} samples the app's stacks instead of tracing every line",
             takes_value=False),
    _refused(_G, "check_config", ("--check-config",), "none as a flag: the `tines check-config` command",
             takes_value=False),
    _refused(_G, "print_config", ("--print-config",), "none as a flag: the `tines check-config` command prints "
             "every setting and where it came from", takes_value=False),
    _same_row(_G, "preload_app", ("--preload",), "preload", takes_value=False),
    PeerSetting(_G, "sendfile", ("--no-sendfile",), _only_when_true, "", False, "always on",
                refusal="none: Tines always sends files with sendfile on plain HTTP/1.1"),
    _refused(_G, "reuse_port", ("--reuse-port",), "none: the master binds each socket once and every worker "
             "accepts on it", takes_value=False),
    _same_row(_G, "chdir", ("--chdir",), "chdir"),
    _refused(_G, "daemon", ("-D", "--daemon"), "none: run Tines in the foreground under a supervisor (systemd, "
             "a container)", takes_value=False),
    _environ_row(_G, "raw_env", ("-e", "--env"), "the app's environment: set in the master before any worker "
                 "starts, as gunicorn does; `SCRIPT_NAME` in it sets `root_path` (with a line)", _raw_env),
    _same_row(_G, "pidfile", ("-p", "--pid"), "pid_file"),
    _nothing_row(_G, "worker_tmp_dir", ("--worker-tmp-dir",), "nothing to do: Tines' workers show they are alive "
                 "in the scoreboard in shared memory, not by touching a temporary file"),
    _same_row(_G, "user", ("-u", "--user"), "user"),
    _same_row(_G, "group", ("-g", "--group"), "group"),
    _same_row(_G, "umask", ("-m", "--umask"), "umask"),
    _refused(_G, "initgroups", ("--initgroups",), "none: with {group}, a worker's supplementary groups are that "
             "one group only", takes_value=False),
    _same_row(_G, "tmp_upload_dir", (), "request_buffer_dir"),
    _refused(_G, "secure_scheme_headers", (), "none: from the peers in {forwarded_allow_ips} Tines reads "
             "`X-Forwarded-Proto` and `Forwarded` for the scheme; the header names are fixed"),
    _same_row(_G, "forwarded_allow_ips", ("--forwarded-allow-ips",), "forwarded_allow_ips"),
    _same_row(_G, "accesslog", ("--access-logfile",), "access_log"),
    _refused(_G, "disable_redirect_access_to_syslog", ("--disable-redirect-access-to-syslog",), _SYSLOG,
             takes_value=False),
    _same_row(_G, "access_log_format", ("--access-logformat",), "access_log_format",
              "the same %(atom)s atoms, but not the environ variables (%({NAME}e)s)"),
    _same_row(_G, "errorlog", ("--error-logfile", "--log-file"), "error_log"),
    _same_row(_G, "loglevel", ("--log-level",), "log_level"),
    _nothing_row(_G, "capture_output", ("--capture-output",), "nothing to do for stderr: with error_log set to a "
                 "file every process's stderr goes to it; stdout is not redirected", takes_value=False),
    _refused(_G, "logger_class", ("--logger-class",), "none: the error log is Tines' own; a `log_config` file "
             "configures Python's logging for the app"),
    PeerSetting(_G, "logconfig", ("--log-config",), _same("log_config"), "", True, "`log_config` (an ini file too)"),
    _refused(_G, "logconfig_dict", (), "none as a dict: write it to a JSON file and name it with `log_config`"),
    PeerSetting(_G, "logconfig_json", ("--log-config-json",), _same("log_config"), "", True, "`log_config`"),
    _refused(_G, "syslog_addr", ("--log-syslog-to",), _SYSLOG),
    _refused(_G, "syslog", ("--log-syslog",), _SYSLOG, takes_value=False),
    _refused(_G, "syslog_prefix", ("--log-syslog-prefix",), _SYSLOG),
    _refused(_G, "syslog_facility", ("--log-syslog-facility",), _SYSLOG),
    _nothing_row(_G, "enable_stdio_inheritance", ("-R", "--enable-stdio-inheritance"), "nothing to do: Tines never "
                 "daemonizes, so its processes always keep their stdio", takes_value=False),
    _refused(_G, "statsd_host", ("--statsd-host",), _STATSD),
    _refused(_G, "dogstatsd_tags", ("--dogstatsd-tags",), _STATSD),
    _refused(_G, "statsd_prefix", ("--statsd-prefix",), _STATSD),
    _refused(_G, "enable_backlog_metric", ("--enable-backlog-metric",), _STATSD, takes_value=False),
    _nothing_row(_G, "proc_name", ("-n", "--name"), "nothing to do: Tines titles its processes itself "
                 "(`tines: master [APP]`, `tines: worker ...`)"),
    _nothing_row(_G, "default_proc_name", (), "nothing to do: Tines titles its processes itself"),
    _refused(_G, "pythonpath", ("--pythonpath",), "none: set PYTHONPATH in the environment, or {chdir} (the app "
             "is imported from there)"),
    _refused(_G, "paste", ("--paste", "--paster"), "none: Tines reads no PasteDeploy file; name the app "
             "as APP, `module:attr`"),
    _refused(_G, "raw_paste_global_conf", ("--paste-global",), "none: Tines reads no PasteDeploy file"),
    *(PeerSetting(_G, hook, (), _nothing, "", True, _HOOK)
      for hook in ("on_starting", "when_ready", "pre_fork", "post_fork", "post_worker_init", "worker_exit",
                   "child_exit", "on_exit", "pre_request", "post_request")),
    *(_refused(_G, hook, (), _NO_HOOK)
      for hook in ("on_reload", "worker_int", "worker_abort", "pre_exec", "nworkers_changed")),
    _refused(_G, "ssl_context", (), "none: TLS is rustls, not Python's `ssl`: its settings ({certfile}, "
             "{tls_min_version}, {tls_cipher_suites}, {client_cert} ...) instead of a hook"),
    PeerSetting(_G, "proxy_protocol", ("--proxy-protocol",), _proxy_protocol, "", True,
                "{proxy_protocol} (versions 1 and 2 both, from the peers in {forwarded_allow_ips})",
                refusal="`off`, `v1`, `v2` or `auto`: {proxy_protocol} takes versions 1 and 2 alike"),
    PeerSetting(_G, "proxy_allow_ips", ("--proxy-allow-from",), _proxy_allow_ips,
                "taken as forwarded_allow_ips: Tines trusts the PROXY header and X-Forwarded-* from one list", True,
                "{forwarded_allow_ips} (one list for both, refused when it differs from gunicorn's "
                "`forwarded_allow_ips`)", refusal="none apart: Tines trusts the PROXY header and X-Forwarded-* "
                "from one list, {forwarded_allow_ips}; give that one only"),
    PeerSetting(_G, "protocol", ("--protocol",), _protocol, "", True,
                "`http` only", refusal="none: Tines does not speak the uwsgi protocol"),
    _refused(_G, "uwsgi_allow_ips", ("--uwsgi-allow-from",), "none: Tines does not speak the uwsgi protocol"),
    _same_row(_G, "keyfile", ("--keyfile",), "keyfile"),
    _same_row(_G, "certfile", ("--certfile",), "certfile"),
    _refused(_G, "ssl_version", ("--ssl-version",), _TLS_VERSION),
    PeerSetting(_G, "cert_reqs", ("--cert-reqs",), _cert_reqs, "", True,
                "{client_cert} `none`, `optional`, `required` for 0, 1, 2", refusal=_CERT_REQS),
    _same_row(_G, "ca_certs", ("--ca-certs",), "client_ca"),
    _nothing_row(_G, "suppress_ragged_eofs", ("--suppress-ragged-eofs",), "nothing to do: a ragged end is a "
                 "closed connection", takes_value=False),
    _nothing_row(_G, "do_handshake_on_connect", ("--do-handshake-on-connect",), "nothing to do: the handshake "
                 "always completes in the worker's loop before the request is read", takes_value=False),
    _refused(_G, "ciphers", ("--ciphers",), _CIPHERS),
    PeerSetting(_G, "http_protocols", ("--http-protocols",), _http_protocols, "", True,
                "{http2}: `h2` offered by ALPN on TLS binds when the list has it",
                refusal="`h1` and `h2` only: {http2} offers h2 by ALPN; Tines speaks no HTTP/3"),
    _refused(_G, "http2_cleartext", ("--http2-cleartext",), "none as a switch: a cleartext bind written "
             "`h2c:HOST:PORT` or `http1+h2c:HOST:PORT` in {bind} speaks h2c"),
    _same_row(_G, "http2_max_concurrent_streams", ("--http2-max-concurrent-streams",), "h2_max_concurrent_streams"),
    _same_row(_G, "http2_initial_window_size", ("--http2-initial-window-size",), "h2_initial_window_size"),
    _same_row(_G, "http2_max_frame_size", ("--http2-max-frame-size",), "h2_max_frame_size"),
    _same_row(_G, "http2_max_header_list_size", ("--http2-max-header-list-size",), "h2_max_header_list_size"),
    _refused(_G, "permit_obsolete_folding", ("--permit-obsolete-folding",), _PARSER, takes_value=False),
    _refused(_G, "strip_header_spaces", ("--strip-header-spaces",), _PARSER, takes_value=False),
    _refused(_G, "permit_unconventional_http_method", ("--permit-unconventional-http-method",), _PARSER,
             takes_value=False),
    _refused(_G, "permit_unconventional_http_version", ("--permit-unconventional-http-version",), _PARSER,
             takes_value=False),
    _refused(_G, "casefold_http_method", ("--casefold-http-method",), _PARSER, takes_value=False),
    _refused(_G, "forwarder_headers", ("--forwarder-headers",), "none: a proxy cannot set SCRIPT_NAME or PATH_INFO; "
             "`root_path` sets SCRIPT_NAME (docs/wsgi.md)"),
    _refused(_G, "header_map", ("--header-map",), "none: not configurable in Tines"),
    _same_row(_G, "asgi_loop", ("--asgi-loop",), "loop"),
    _same_row(_G, "asgi_lifespan", ("--asgi-lifespan",), "lifespan"),
    _refused(_G, "asgi_disconnect_grace_period", ("--asgi-disconnect-grace-period",), "none: an ASGI app learns "
             "of a client gone by `http.disconnect` at once; {graceful_timeout} bounds a stop"),
    _same_row(_G, "websocket_max_message_size", ("--websocket-max-message-size",), "ws_max_message_size"),
    _nothing_row(_G, "http_parser", ("--http-parser",), "nothing to do: the HTTP parser is Tines' own (Rust)"),
    PeerSetting(_G, "root_path", ("--root-path",), _same("root_path"), "", True, "`root_path`"),
    *(_refused(_G, name, (flag,), _DIRTY)
      for name, flag in (("dirty_apps", "--dirty-app"), ("dirty_workers", "--dirty-workers"),
                         ("dirty_timeout", "--dirty-timeout"), ("dirty_threads", "--dirty-threads"),
                         ("dirty_graceful_timeout", "--dirty-graceful-timeout"))),
    *(_refused(_G, hook, (), _DIRTY)
      for hook in ("on_dirty_starting", "dirty_post_fork", "dirty_worker_init", "dirty_worker_exit")),
    _refused(_G, "control_socket", ("--control-socket",), _CONTROL),
    _refused(_G, "control_socket_mode", ("--control-socket-mode",), _CONTROL),
    _nothing_row(_G, "control_socket_disable", ("--no-control-socket",), "nothing to do: Tines has no control "
                 "socket", takes_value=False),
    _refused(_G, "version", ("-v",), "none in `serve`: `tines --version`", takes_value=False),
)
"""gunicorn 27.0.1's settings (its ``config.py``), in its order."""

UVICORN: tuple[PeerSetting, ...] = (
    PeerSetting(_U, "host", ("--host",), _host_port, "", True, "{bind} `HOST:PORT` (with `--port`, default 8000)"),
    PeerSetting(_U, "port", ("--port",), _host_port, "", True, "{bind} `HOST:PORT` (with `--host`, default 127.0.0.1)"),
    PeerSetting(_U, "uds", ("--uds",), lambda value, _others: {"bind": f"unix:{_text(value)}"}, "", True,
                "{bind} `unix:/path`"),
    PeerSetting(_U, "fd", ("--fd",), lambda value, _others: {"bind": f"fd://{_text(value)}"}, "", True,
                "{bind} `fd://N`"),
    _same_row(_U, "reload", ("--reload",), "reload", takes_value=False),
    _refused(_U, "reload_dirs", ("--reload-dir",), "none: {reload} watches the tree the app is imported from "
             "(docs/signals.md); {reload_include} and {reload_exclude} choose its files"),
    PeerSetting(_U, "reload_includes", ("--reload-include",), _reload_extra_files, "", True,
                "{reload_include}, which replaces the default `*.py` where uvicorn adds to it: list `*.py` "
                "too (a warning says so when it is missing)"),
    _same_row(_U, "reload_excludes", ("--reload-exclude",), "reload_exclude"),
    _nothing_row(_U, "reload_delay", ("--reload-delay",), "nothing to do: reload acts once a save has gone quiet "
                 "for 0.1 s"),
    _same_row(_U, "workers", ("--workers",), "workers"),
    _same_row(_U, "loop", ("--loop",), "loop"),
    PeerSetting(_U, "http", ("--http",), _http, "nothing to do: the HTTP/1.1 parser and HTTP/2 are Tines' own",
                True, "nothing to do for `auto`, `h11`, `httptools`, `zttp`", refusal=_GRANIAN_HTTP),
    _same_row(_U, "http2", ("--http2",), "http2", takes_value=False),
    PeerSetting(_U, "ws", ("--ws",), _ws, "nothing to do: the WebSocket protocol is Tines' own "
                "(`none` sets ws_max_connections 0)", True, "nothing to do (`none`: {ws_max_connections=0})"),
    _same_row(_U, "ws_max_size", ("--ws-max-size",), "ws_max_message_size"),
    _refused(_U, "ws_max_queue", ("--ws-max-queue",), "none by messages: {ws_receive_buffer_total} bounds the "
             "bytes a worker holds received and not yet read by the app"),
    _same_row(_U, "ws_ping_interval", ("--ws-ping-interval",), "ws_ping_interval"),
    _same_row(_U, "ws_ping_timeout", ("--ws-ping-timeout",), "ws_ping_timeout"),
    _same_row(_U, "ws_per_message_deflate", ("--ws-per-message-deflate",), "ws_per_message_deflate"),
    _same_row(_U, "lifespan", ("--lifespan",), "lifespan"),
    _same_row(_U, "interface", ("--interface",), "interface"),
    _environ_row(_U, "env_file", ("--env-file",), "the app's environment: `KEY=VALUE` lines read by the master "
                 "before any worker starts"),
    PeerSetting(_U, "log_config", ("--log-config",), _same("log_config"), "", True, "`log_config`"),
    _same_row(_U, "log_level", ("--log-level",), "log_level"),
    PeerSetting(_U, "access_log", ("--access-log", "--no-access-log"), _access_log, "", False,
                "{access_log}: off unless it names a file, or `-` for stdout (`--access-log` alone)"),
    _nothing_row(_U, "use_colors", ("--use-colors", "--no-use-colors"), "nothing to do: Tines' logs are never "
                 "coloured", takes_value=False),
    PeerSetting(_U, "proxy_headers", ("--proxy-headers", "--no-proxy-headers"),
                _no_when_false("forwarded_allow_ips", ""), "", False,
                "always on for the peers in {forwarded_allow_ips}; `--no-proxy-headers` is {forwarded_allow_ips=}"),
    PeerSetting(_U, "server_header", ("--server-header", "--no-server-header"), _no_when_false("server_header", ""),
                "", False, "{server_header} (`--no-server-header` is {server_header=})"),
    PeerSetting(_U, "date_header", ("--date-header", "--no-date-header"), _only_when_true, "", False,
                "always sent", refusal="none to turn off: Tines always sends `Date` (RFC 9110 asks it of a "
                "server with a clock)"),
    _same_row(_U, "forwarded_allow_ips", ("--forwarded-allow-ips",), "forwarded_allow_ips"),
    PeerSetting(_U, "root_path", ("--root-path",), _same("root_path"), "", True, "`root_path`"),
    _same_row(_U, "limit_concurrency", ("--limit-concurrency",), "max_concurrency",
              "taken as max_concurrency: ASGI requests one worker serves at once, beyond it 503 "
              "(idle connections do not count: max_connections bounds those)"),
    _same_row(_U, "backlog", ("--backlog",), "backlog"),
    _same_row(_U, "limit_max_requests", ("--limit-max-requests",), "max_requests"),
    _same_row(_U, "limit_max_requests_jitter", ("--limit-max-requests-jitter",), "max_requests_jitter"),
    _same_row(_U, "timeout_keep_alive", ("--timeout-keep-alive",), "keepalive_timeout"),
    _same_row(_U, "timeout_graceful_shutdown", ("--timeout-graceful-shutdown",), "graceful_timeout"),
    _refused(_U, "timeout_worker_healthcheck", ("--timeout-worker-healthcheck",), "none: the master watches its "
             "workers through the scoreboard; a stuck request has {request_timeout}, a slow boot {boot_timeout}"),
    _same_row(_U, "ssl_keyfile", ("--ssl-keyfile",), "keyfile"),
    _same_row(_U, "ssl_certfile", ("--ssl-certfile",), "certfile"),
    _refused(_U, "ssl_keyfile_password", ("--ssl-keyfile-password",), "none on the command line (every user can "
             "read it): {keyfile_password_file}, or `TINES_KEYFILE_PASSWORD`"),
    _refused(_U, "ssl_version", ("--ssl-version",), _TLS_VERSION),
    PeerSetting(_U, "ssl_cert_reqs", ("--ssl-cert-reqs",), _cert_reqs, "", True,
                "{client_cert} `none`, `optional`, `required` for 0, 1, 2", refusal=_CERT_REQS),
    _same_row(_U, "ssl_ca_certs", ("--ssl-ca-certs",), "client_ca"),
    _refused(_U, "ssl_ciphers", ("--ssl-ciphers",), _CIPHERS),
    _refused(_U, "headers", ("--header",), "none: add response headers in the app (a middleware); the `Server` "
             "header is {server_header}"),
    _same_row(_U, "app_dir", ("--app-dir",), "chdir",
              "taken as chdir: Tines changes into the directory and imports the app from there"),
    _same_row(_U, "h11_max_incomplete_event_size", ("--h11-max-incomplete-event-size",), "max_head_size"),
    _refused(_U, "reset_contextvars", ("--reset-contextvars",), "none: not configurable in Tines",
             takes_value=False),
    _same_row(_U, "factory", ("--factory",), "factory", takes_value=False),
)
"""uvicorn 0.54.0's settings (its ``main.py`` options), in its order."""

PEER_SETTINGS: tuple[PeerSetting, ...] = GUNICORN + UVICORN
"""Every gunicorn and uvicorn setting Tines answers, accepted or refused with a hint."""


def find(server: str, name: str) -> PeerSetting | None:
    """The row for ``server``'s setting ``name`` (their config-file name), or None."""
    return next((row for row in PEER_SETTINGS if row.server == server and row.name == name), None)


def by_flag(flag: str) -> tuple[PeerSetting, ...]:
    """The rows whose flags include ``flag`` (gunicorn's and uvicorn's may share one)."""
    return tuple(row for row in PEER_SETTINGS if flag in row.flags)
