"""Logging set-up for the master and the workers.

Owns: the error-log format, which the Rust core writes too
(``[2026-11-22 10:20:00 +0000] [pid] [LEVEL] message``, UTC), and where lines go.

The error log is file descriptor 2 in every process: with ``--error-log PATH`` the master opens
the file (append mode) and puts it on fd 2 before forking, so Python tracebacks, Rust error
lines and anything a C extension prints all land in one place. ``reopen()`` (USR1) does that
again after log rotation. No handler threads, no queue: the master starts no threads.

Also the app's own ``logging`` records (docs/logging.md): ``log_config`` (a dictConfig file in
JSON or YAML, or a ``fileConfig`` ini) is read and checked in the master before the first fork
(``read_config``) and applied in each worker after fork (``apply_config``), never in the master,
whose handlers a config could give threads; without it, a root logger the app left without a
handler gets one in the error log's format (``handle_app_records``).

Must not: touch Tines' own handler from a ``log_config`` (a config that disables existing
loggers leaves the ``tines`` ones enabled).
"""

from __future__ import annotations

import configparser
import importlib
import json
import logging
import os
import sys
import time
from collections.abc import Collection
from typing import Any

from tines.errors import ConfigError

FORMAT = "[%(asctime)s] [%(process)d] [%(levelname)s] %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S +0000"

LOGGER_NAME = "tines"
"""Parent of every Tines logger (``tines.arbiter``, ``tines.worker``, ``tines.error``)."""


class _UTCFormatter(logging.Formatter):
    # The Rust core writes UTC; so does Python (logging's documented way to switch).
    converter = time.gmtime  # type: ignore[assignment]


def open_for_append(path: str, what: str) -> int:
    """Open (creating) a log file for appending; its fd. ConfigError (one line) if it cannot be.

    ``what`` names the setting in the message (``error log``, ``access log``).
    """
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise ConfigError(f"cannot open {what} {path!r}: [Errno {error.errno}] {error.strerror}") from None


def check_access_log(path: str | None) -> None:
    """Open the access log file once, as each worker will (Rust opens it again by path), so a
    path no worker could open stops the start with one line instead of failing every worker."""
    if path is not None and path != "-":
        os.close(open_for_append(path, "access log"))


def _point_stderr_at(path: str) -> None:
    fd = open_for_append(path, "error log")
    try:
        sys.stderr.flush()
        os.dup2(fd, 2)
    finally:
        os.close(fd)


def configure(error_log: str, level: str) -> None:
    """Send Tines' log records to fd 2 (after pointing it at ``error_log`` unless it is "-").

    Raises ConfigError when the error log file cannot be opened.
    """
    if error_log != "-":
        _point_stderr_at(error_log)
    logger = logging.getLogger(LOGGER_NAME)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_UTCFormatter(FORMAT, DATE_FORMAT))
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False


def reopen(error_log: str) -> None:
    """Reopen the error-log file (USR1, after rotation); nothing to do for stderr."""
    if error_log != "-":
        _point_stderr_at(error_log)


def get(name: str) -> logging.Logger:
    """The logger ``tines.<name>``."""
    return logging.getLogger(f"{LOGGER_NAME}.{name}")


YAML_SUFFIXES = (".yaml", ".yml")


def read_config(path: str) -> dict[str, Any] | None:
    """Read and check the ``log_config`` file as uvicorn tells its kinds apart: ``.json`` is a
    dictConfig in JSON, ``.yaml``/``.yml`` one in YAML (PyYAML needed), anything else an ini for
    ``logging.config.fileConfig``. The dictConfig's dict, or None for an ini.

    Raises ConfigError (one line naming the setting and the file) when the file cannot be read
    or is not a logging config: a missing file, bad JSON or YAML, no ``version: 1``, an ini
    without its ``[formatters]``, ``[handlers]`` and ``[loggers]`` sections.
    """
    where = f"log_config {path!r}"
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except OSError as error:
        raise ConfigError(f"{where}: cannot read it: [Errno {error.errno}] {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{where}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    if path.endswith(".json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(f"{where}: not JSON: {error.msg} (line {error.lineno}, column {error.colno})") from None
    elif path.endswith(YAML_SUFFIXES):
        try:
            yaml: Any = importlib.import_module("yaml")  # optional (PyYAML), untyped
        except ImportError:
            raise ConfigError(f"{where}: a YAML file needs PyYAML (pip install pyyaml), "
                              "or write it as JSON") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ConfigError(f"{where}: not YAML: {' '.join(str(error).split())}") from None
    else:
        _check_ini(where, text)
        return None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a dictConfig must be a mapping, got {type(data).__name__}")
    if data.get("version") != 1:
        raise ConfigError(f"{where}: a dictConfig needs \"version\": 1 (the only version "
                          f"logging.config knows), got {data.get('version')!r}")
    return data


def _check_ini(where: str, text: str) -> None:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error as error:
        raise ConfigError(f"{where}: not an ini file for logging.config.fileConfig: "
                          f"{' '.join(str(error).split())}") from None
    missing = [name for name in ("formatters", "handlers", "loggers") if not parser.has_section(name)]
    if missing:
        raise ConfigError(f"{where}: an ini file for logging.config.fileConfig needs the sections "
                          f"{', '.join(f'[{name}]' for name in missing)} (.json or .yaml for a dictConfig)")


REFUSALS = (ValueError, TypeError, AttributeError, ImportError, KeyError, OSError, configparser.Error)
"""What ``logging.config`` raises itself for a config it refuses, with a message that says why
(for anything else ``apply_config`` names the exception too)."""


def logger_names() -> frozenset[str]:
    """The names of the loggers made so far in this process (``logging.getLogger``)."""
    return frozenset(name for name, logger in logging.root.manager.loggerDict.items()
                     if isinstance(logger, logging.Logger))


def apply_config(path: str, made_by_app: Collection[str] = ()) -> None:
    """Apply the ``log_config`` file in this process (a worker, after fork). The ``tines``
    loggers stay enabled whatever the config's ``disable_existing_loggers`` says, so Tines' own
    lines still reach the error log; so do ``made_by_app``, the loggers a preloaded app made
    while the master imported it (``logger_names`` before and after): without ``preload`` the
    config is applied before the app is imported, so it does not find them to disable, and
    ``preload`` must not silence an app's module-level loggers. Raises ConfigError (one line) when logging refuses the
    config (a handler class that does not import, a file handler's directory missing, an ini
    handler's ``args`` that do not evaluate...)."""
    import logging.config  # here: only a worker with a log_config needs it (socketserver...)

    data = read_config(path)
    try:
        if data is None:
            logging.config.fileConfig(path)
        else:
            logging.config.dictConfig(data)
    except Exception as error:  # noqa: BLE001 - logging runs the config's own code: an ini's
        # ``args`` and ``kwargs`` go through eval(), a dictConfig's ``()`` factories are called;
        # whatever they raise (NameError, SyntaxError...) is the config's fault, a boot error.
        # dictConfig says which entry ("Unable to configure formatter 'default'") and chains why.
        why = str(error) if error.__cause__ is None else f"{error}: {error.__cause__}"
        if not isinstance(error, REFUSALS):  # not logging's own words: name what was raised
            why = f"{type(error).__name__}: {why}"
        raise ConfigError(f"log_config {path!r}: logging refused it: {' '.join(why.split())}") from None
    for name, logger in logging.root.manager.loggerDict.items():
        if (name == LOGGER_NAME or name.startswith(LOGGER_NAME + ".") or name in made_by_app) \
                and isinstance(logger, logging.Logger):
            logger.disabled = False


def handle_app_records() -> bool:
    """Give the root logger a handler in the error log's format (to fd 2) when it has none, so
    the app's ``logging`` records are written with a time, pid and level instead of through
    ``logging.lastResort`` (the bare message) or not at all. Called once the app is loaded, so
    an app that configured logging itself (Django's ``LOGGING``, ``logging.basicConfig``) is
    left alone. The root's level is the app's (``WARNING`` unless it set one). True when the
    handler was added."""
    root = logging.getLogger()
    if root.handlers:
        return False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_UTCFormatter(FORMAT, DATE_FORMAT))
    root.addHandler(handler)
    return True
