"""Resolving the settings: command line > environment > config file > default (``load``).

Owns: where each source spells a setting (a flag's value as typed, ``TINES_<NAME>`` in the
environment, the file's top-level key), finding and reading the TOML config file, converting
every value from every source, the checks that span several settings, the resolved ``Config``
(and ``Config.worker_settings``, the dict handed to the Rust worker), and the warnings about
settings that are ignored or misspelt.

Must not: declare a setting (``tines.config.registry`` does), import ``tines._core`` or anything
heavy, touch sockets or fork.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib as tomllib  # "as": tines.config re-exports it (tests read what tune writes with it)
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from tines.config import gunicorn
from tines.config.registry import SETTINGS, Setting, format_value
from tines.config.validators import is_cleartext, split_bind, temp_dir
from tines.errors import ConfigError

DEFAULT_CONFIG_FILE = "tines.toml"
"""Read from the current directory when neither ``--config`` nor ``TINES_CONFIG`` is given."""

CONFIG_ENV = "TINES_CONFIG"
"""Environment variable naming the config file (the ``-c/--config`` flag wins over it)."""


class Config:
    """The resolved value of every setting and where it came from. Immutable.

    ``cfg.<name>`` is the converted value of a setting (``cfg.workers``, ``cfg.app``); multiple
    settings are tuples; unset optional settings are None. ``config_file`` is the path of the
    file that was read (as given), or None. ``file_notes`` are the warnings reading a gunicorn
    config file gave (``tines.config.gunicorn``), which ``ignored_settings`` lists first.
    """

    __slots__ = ("_values", "_sources", "config_file", "file_notes")
    _values: Mapping[str, object]
    _sources: Mapping[str, str]
    config_file: str | None
    file_notes: tuple[str, ...]

    def __init__(self, values: Mapping[str, object], sources: Mapping[str, str],
                 config_file: str | None = None, file_notes: tuple[str, ...] = ()) -> None:
        """``values`` and ``sources`` must both have a key for every name in ``SETTINGS``."""
        missing = set(SETTINGS) - set(values)
        if missing or set(values) - set(SETTINGS) or set(sources) != set(SETTINGS):
            raise ValueError(f"Config needs exactly the registry's settings (missing {sorted(missing)})")
        object.__setattr__(self, "_values", MappingProxyType(dict(values)))
        object.__setattr__(self, "_sources", MappingProxyType(dict(sources)))
        object.__setattr__(self, "config_file", config_file)
        object.__setattr__(self, "file_notes", file_notes)

    def __getattr__(self, name: str) -> Any:
        values: Mapping[str, object] = object.__getattribute__(self, "_values")
        try:
            return values[name]
        except KeyError:
            raise AttributeError(f"no setting named {name!r}") from None

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Config is immutable")

    def __repr__(self) -> str:
        return "Config(" + ", ".join(f"{name}={_hidden(name, value)!r}" for name, value in self._values.items()) + ")"

    def value(self, name: str) -> object:
        """The converted value of setting ``name``; KeyError when there is no such setting."""
        return self._values[name]

    def source(self, name: str) -> str:
        """Where the value came from: ``cli``, ``env TINES_X``, ``file PATH`` or ``default``."""
        return self._sources[name]

    def worker_settings(self) -> dict[str, object]:
        """A new dict of every ``worker=True`` setting, for ``tines._core.run_worker``.

        Values are converted (seconds as float, sizes as int); tuples become lists.
        """
        return {
            name: list(value) if isinstance(value, tuple) else value
            for name, value in self._values.items()
            if SETTINGS[name].worker
        }

    def rows(self) -> Iterator[tuple[str, str, str]]:
        """(name, value formatted for people, source) for every setting, in registry order."""
        for name, value in self._values.items():
            show = SETTINGS[name].show
            shown = show(value) if show is not None and value is not None else format_value(_hidden(name, value))
            yield name, shown, self._sources[name]


HIDDEN = "(hidden)"
"""What is shown of a set ``secret`` setting (``keyfile_password``)."""


def _hidden(name: str, value: object) -> object:
    return HIDDEN if SETTINGS[name].secret and value is not None else value


def load(overrides: Mapping[str, object] | argparse.Namespace | None = None,
         environ: Mapping[str, str] | None = None) -> Config:
    """Resolve every setting: command line > environment > config file > default.

    ``overrides`` holds the command-line values by setting name (raw strings as typed, lists for
    repeated flags, bools for on/off flags, or already-typed values), plus ``config`` for the
    config file path; a key that is present counts as given. An ``argparse.Namespace`` may be
    passed: its attributes that are not settings (``command`` ...) are ignored, so parsers must
    leave flags that were not given out of it (``default=argparse.SUPPRESS``).
    ``environ`` defaults to ``os.environ``; unknown ``TINES_*`` variables are ignored (the CLI
    warns about them, see ``environment_warnings``).

    The config file is ``overrides["config"]``, else ``$TINES_CONFIG``, else ``./tines.toml``
    when it exists. Every value from every source is validated, even one a higher source
    overrides. Raises ConfigError with a one-line message on the first problem.
    """
    environ = os.environ if environ is None else environ
    given = _command_line(overrides)
    config_path = given.pop("config", None)
    if config_path is None:
        config_path = environ.get(CONFIG_ENV) or (
            DEFAULT_CONFIG_FILE if os.path.isfile(DEFAULT_CONFIG_FILE) else None)
    if config_path is not None and not isinstance(config_path, str):
        raise ConfigError(f"config must be a path, got {config_path!r}")

    values: dict[str, object] = {}
    sources: dict[str, str] = {}
    layers: list[tuple[Mapping[str, object], str, str]] = []
    file_notes: tuple[str, ...] = ()
    if config_path is not None and gunicorn.is_python_config(config_path):
        reading = gunicorn.read(config_path)
        layers.append((reading.values, f"file {config_path}", f"{config_path}: "))
        file_notes = reading.notes
    elif config_path is not None:
        layers.append((_read_config_file(config_path), f"file {config_path}", f"{config_path}: "))
    for setting in SETTINGS.values():
        if setting.env in environ:
            layers.append(({setting.name: environ[setting.env]}, f"env {setting.env}", f"{setting.env}: "))
    layers.append((given, "cli", ""))

    for raw_values, source, prefix in layers:
        for name, raw in raw_values.items():
            values[name] = _convert(SETTINGS[name], raw, prefix)
            sources[name] = source
    for setting in SETTINGS.values():
        if setting.name not in values:
            values[setting.name] = setting.default_value()
            sources[setting.name] = "default"
    ordered = {name: values[name] for name in SETTINGS}
    if ordered["limit_cpu_hard"] is not None:
        if ordered["limit_cpu"] is None:
            raise ConfigError(f"limit_cpu_hard needs limit_cpu ({sources['limit_cpu_hard']})")
        if ordered["limit_cpu_hard"] < ordered["limit_cpu"]:  # type: ignore[operator]
            raise ConfigError(f"limit_cpu_hard {ordered['limit_cpu_hard']} ({sources['limit_cpu_hard']}) "
                              f"must be at least limit_cpu {ordered['limit_cpu']} ({sources['limit_cpu']})")
    ordered["request_buffer_dir"] = _request_buffer_dir(ordered, sources)
    if ordered["drain_timeout"] is None:  # unset: the keep-alive timeout (the registry's rule)
        ordered["drain_timeout"] = ordered["keepalive_timeout"]
    if ordered["threads"] == 0 and ordered["mpm"] != "event":
        raise ConfigError(f"threads 0 (the app on the loop thread) needs mpm event, "
                          f"got mpm {ordered['mpm']} ({sources['threads']})")
    _websocket_limits(ordered, sources)
    _tls(ordered, sources)
    codings = list(ordered["compression"])  # type: ignore[call-overload]
    if len(set(codings)) != len(codings):
        raise ConfigError(f"compression names a coding twice ({sources['compression']}), got {','.join(codings)}")
    return Config(ordered, {name: sources[name] for name in SETTINGS}, config_path, file_notes)


WS_CEILING_PERCENT = 90
"""Unset, ``ws_max_connections`` is this percentage of ``max_connections``, rounded down (the
registry's rule): the rest is room for HTTP requests and refused handshakes in a worker full of
WebSockets."""


def _websocket_limits(values: dict[str, object], sources: Mapping[str, str]) -> None:
    """Resolves an unset ``ws_max_connections`` and checks the WebSocket settings that depend on
    others: a ceiling at or above ``max_connections`` would leave a worker full of WebSockets
    unable to answer anyone, and a receive budget smaller than a message could never hold one."""
    max_connections = values["max_connections"]
    assert isinstance(max_connections, int)
    if values["ws_max_connections"] is None:
        values["ws_max_connections"] = max_connections * WS_CEILING_PERCENT // 100
    ceiling = values["ws_max_connections"]
    assert isinstance(ceiling, int)
    if ceiling >= max_connections:
        raise ConfigError(f"ws_max_connections {ceiling} ({sources['ws_max_connections']}) must be below "
                          f"max_connections {max_connections} ({sources['max_connections']}): the rest is "
                          "the room a worker full of WebSockets keeps for HTTP requests")
    budget, message = values["ws_receive_buffer_total"], values["ws_max_message_size"]
    assert isinstance(budget, int) and isinstance(message, int)
    if budget < message:
        raise ConfigError(f"ws_receive_buffer_total {budget} ({sources['ws_receive_buffer_total']}) must be at "
                          f"least ws_max_message_size {message} ({sources['ws_max_message_size']}): "
                          "a message must fit in the budget")


def _tls(values: Mapping[str, object], sources: Mapping[str, str]) -> None:
    """The TLS settings that depend on others: a client certificate is verified against
    ``client_ca``, and a key has one password."""
    if values["client_cert"] != "none" and values["client_ca"] is None:
        raise ConfigError(f"client_cert {values['client_cert']} ({sources['client_cert']}) needs client_ca, "
                          "the CA bundle client certificates are verified against")
    if values["keyfile_password"] is not None and values["keyfile_password_file"] is not None:
        raise ConfigError(f"keyfile_password ({sources['keyfile_password']}) and keyfile_password_file "
                          f"({sources['keyfile_password_file']}) are both set: give one")


TLS_NEEDS_CERTFILE = ("keyfile", "keyfile_password_file", "keyfile_password", "sni_certificates",
                      "tls_unknown_server_name", "tls_min_version", "tls_cipher_suites", "alpn",
                      "client_cert", "client_ca", "client_crl", "tls_tickets", "tls_ticket_rotation")
"""The TLS settings that do nothing without ``certfile`` (which turns TLS on)."""


def _request_buffer_dir(values: Mapping[str, object], sources: Mapping[str, str]) -> str:
    """``request_buffer_dir`` made absolute the way the workers see it: a relative path is
    taken from ``chdir`` (they run there), else from the current directory; it must be an
    existing directory."""
    raw = values["request_buffer_dir"] or temp_dir()
    chdir = values["chdir"]
    base = os.path.abspath(chdir) if isinstance(chdir, str) else os.getcwd()
    resolved = os.path.normpath(os.path.join(base, str(raw)))
    if not os.path.isdir(resolved):
        where = f" (from chdir {chdir})" if isinstance(chdir, str) and not os.path.isabs(str(raw)) else ""
        raise ConfigError(f"request_buffer_dir must be an existing directory, got {resolved!r}{where} "
                          f"({sources['request_buffer_dir']})")
    return resolved


def ignored_settings(cfg: Config) -> list[str]:
    """One line for each setting that is valid but has no effect beside the others, else none.

    Not an error: such a value often comes from a file or environment shared by several
    starts with different MPMs. ``tines serve`` logs each line as a warning at start and
    ``tines check-config`` prints it.
    """
    found = list(cfg.file_notes)
    counted = "workers" if cfg.mpm == "prefork" else "threads"
    for kind in ("workers", "threads"):
        for bound in ("min", "max"):
            name = f"{bound}_spare_{kind}"
            if kind != counted and cfg.value(name) is not None and cfg.max_workers is not None:
                found.append(f"{name} {cfg.value(name)} ({cfg.source(name)}) is ignored by mpm {cfg.mpm}, "
                             f"whose spares are counted in {counted}: use {bound}_spare_{counted}")
    if not cfg.reload:
        for name in ("reload_include", "reload_exclude"):
            if cfg.source(name) != "default":
                found.append(f"{name} ({cfg.source(name)}) is ignored without reload (--reload)")
    if cfg.certfile is None:
        found += [f"{name} ({cfg.source(name)}) is ignored without certfile (--certfile), which turns TLS on"
                  for name in TLS_NEEDS_CERTFILE if cfg.source(name) != "default"]
    elif all(is_cleartext(address) for address in cfg.bind):
        found.append(f"certfile ({cfg.source('certfile')}) is ignored: every bind is unix: or cleartext "
                     "(plain:, h2c:, http1+h2c:), so none speaks TLS")
    found += _ignored_http2(cfg)
    found += _ignored_rate_limits(cfg)
    if cfg.mpm == "prefork" and cfg.threads > 1:
        found.append(f"threads {cfg.threads} ({cfg.source('threads')}) is ignored by mpm prefork, which runs "
                     "one request at a time per worker: for app threads use --mpm thread or --mpm event")
    return found


def _ignored_rate_limits(cfg: Config) -> list[str]:
    """The rate limits' settings that do nothing beside the others (docs/rate-limits.md)."""
    found = []
    if cfg.rate_limit is None and cfg.source("rate_limit_burst") != "default":
        found.append(f"rate_limit_burst ({cfg.source('rate_limit_burst')}) is ignored without rate_limit "
                     "(--rate-limit): path rules give their burst as PREFIX=RATE:BURST")
    if not (cfg.rate_limit or cfg.rate_limit_paths or cfg.max_connections_per_client):
        found += [f"{name} ({cfg.source(name)}) is ignored without rate_limit, rate_limit_paths or "
                  "max_connections_per_client" for name in ("rate_limit_allow", "rate_limit_ipv6_prefix")
                  if cfg.source(name) != "default"]
    return found


H2_SETTINGS = ("h2_max_concurrent_streams", "h2_initial_window_size", "h2_connection_window_size",
               "h2_max_frame_size", "h2_max_header_list_size", "h2_header_table_size", "h2_max_reset_rate",
               "h2_max_control_rate")
"""The settings of HTTP/2 connections, which do nothing when no listener speaks HTTP/2."""


def speaks_http2(cfg: Config) -> bool:
    """Some listener may speak HTTP/2: an ``h2c:`` or ``http1+h2c:`` bind, or a TLS one while
    ``http2`` is on and ``alpn`` offers ``h2``."""
    if any(split_bind(address)[0] in ("only", "both") for address in cfg.bind):
        return True
    return bool(cfg.http2 and "h2" in cfg.alpn and cfg.certfile is not None
                and not all(is_cleartext(address) for address in cfg.bind))


def _ignored_http2(cfg: Config) -> list[str]:
    found = []
    if cfg.certfile is None and cfg.source("http2") != "default":
        found.append(f"http2 ({cfg.source('http2')}) is ignored without certfile: it offers h2 on TLS "
                     "listeners (cleartext HTTP/2 is a bind written h2c: or http1+h2c:)")
    if not cfg.http2 and "h2" in cfg.alpn and cfg.source("alpn") != "default" and cfg.certfile is not None:
        found.append(f"h2 in alpn ({cfg.source('alpn')}) is not offered while http2 is off "
                     f"({cfg.source('http2')})")
    if not speaks_http2(cfg):
        why = ("http2 is off and no bind is h2c: or http1+h2c:" if not cfg.http2 else
               "no bind speaks TLS with h2 in alpn, nor is h2c: or http1+h2c:")
        found += [f"{name} ({cfg.source(name)}) is ignored: no listener speaks HTTP/2 ({why})"
                  for name in H2_SETTINGS if cfg.source(name) != "default"]
    return found


def _command_line(overrides: Mapping[str, object] | argparse.Namespace | None) -> dict[str, object]:
    if overrides is None:
        return {}
    if isinstance(overrides, argparse.Namespace):
        return {name: value for name, value in vars(overrides).items()
                if name in SETTINGS or name == "config"}
    for name in overrides:
        if name not in SETTINGS and name != "config":
            raise ConfigError(f"unknown setting {name!r}{_suggestion(name)}")
    return dict(overrides)


def _convert(setting: Setting, raw: object, prefix: str) -> object:
    try:
        return setting.to_value(raw)
    except ValueError as error:
        reason = str(error.args[0])
        shown = HIDDEN if setting.secret else error.args[1] if len(error.args) > 1 else raw
        raise ConfigError(f"{prefix}{setting.name} {reason}, got {shown!r}") from None


_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column \d+\)$")


def _read_config_file(path: str) -> dict[str, object]:
    """The file's top-level table, keys checked against the registry."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as error:
        raise ConfigError(f"cannot read config file {path!r}: [Errno {error.errno}] {error.strerror}") from None
    try:
        table = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ConfigError(f"cannot read config file {path!r}: not UTF-8 ({error.reason} at byte {error.start})") from None
    except tomllib.TOMLDecodeError as error:
        message = str(error)
        position = _TOML_POSITION.search(message)
        if position is None:
            raise ConfigError(f"config file {path!r}: {message}") from None
        raise ConfigError(f"config file {path!r} line {position.group(1)}: {message[: position.start()]}") from None
    for key in table:
        if key not in SETTINGS:
            raise ConfigError(f"unknown setting {key!r} in {path!r}{_peer_hint(key) or _suggestion(key)}")
    return table


def _peer_hint(key: str) -> str:
    """`` (gunicorn's timeout: ...)`` when ``key`` is gunicorn's or uvicorn's setting: the answer
    their flag gets on the command line, in the file's terms; else an empty string."""
    from tines.config import peers
    from tines.config.migration import peer_text

    rows = [row for row in (peers.find("gunicorn", key), peers.find("uvicorn", key)) if row is not None]
    if not rows:
        return ""
    servers = " and ".join(row.server for row in rows)
    return f" ({servers}'s {key}: {peer_text(rows[0].answer, in_file=True)})"


def environment_warnings(environ: Mapping[str, str] | None = None) -> list[str]:
    """One warning per ``TINES_*`` variable that names no setting, with the closest name.

    A warning, not an error (unlike an unknown key in the config file, which is Tines' own): the
    environment is shared with other programs and shells, and a variable that merely shares the
    prefix must not stop a server from starting. ``load`` ignores these variables.
    """
    environ = os.environ if environ is None else environ
    known = {setting.env for setting in SETTINGS.values()} | {CONFIG_ENV}
    warnings = []
    for name in sorted(environ):
        if not name.startswith("TINES_") or name in known:
            continue
        match = _closest(name.upper(), sorted(known))
        hint = f" (did you mean {match}?)" if match else ""
        warnings.append(f"unknown environment variable {name} ignored{hint}")
    return warnings


def _suggestion(name: str) -> str:
    """`` (did you mean 'x'?)`` for the closest setting name, or an empty string."""
    normalized = name.strip().lower().replace("-", "_").removeprefix("tines_")
    if normalized in SETTINGS:
        return f" (did you mean {normalized!r}?)"
    match = _closest(normalized, list(SETTINGS))
    return f" (did you mean {match!r}?)" if match else ""


def _closest(word: str, candidates: list[str]) -> str | None:
    """The candidate closest to ``word``, if any is close. ``difflib`` is imported here, on
    the way to a message, so that the master does not hold it (nor copy it into every fork)."""
    import difflib

    matches = difflib.get_close_matches(word, candidates, n=1)
    return matches[0] if matches else None
