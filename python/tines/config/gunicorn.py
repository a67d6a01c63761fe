"""Reading gunicorn's Python config file: ``-c gunicorn.conf.py`` or ``-c python:myproject.gunicorn``.

Owns: telling such a file from a TOML one (``is_python_config``), running it (module-level code,
as gunicorn does: ``import multiprocessing``, ``workers = multiprocessing.cpu_count() * 2 + 1``),
and what its module-level names become (``read``): a gunicorn setting goes through the peers
table (``tines.config.peers``), so it becomes Tines settings with the file as their source, with
one line when its meaning differs, or stops the start (one line naming it) when Tines has no
equivalent; a hook makes the file itself the ``hooks`` setting (``tines.hooks`` loads it with
``run`` and calls the hooks with gunicorn's arguments), or is one line when Tines has no such
moment;
anything else is ignored as gunicorn ignores it, with a line for a plain data name that is no
gunicorn setting (a typo). ADR 0039 says why the file runs, what is refused, and why
``./gunicorn.conf.py`` is never read unless named.

Must not: declare a setting or a peer row (the registry and ``tines.config.peers`` do), convert
a value (``tines.config.loading`` converts what ``read`` returns, as for TOML), call a hook, or
import ``tines._core`` or anything heavy.
"""

from __future__ import annotations

import importlib.util
import os
import re
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType

from tines.config import peers
from tines.errors import ConfigError

MODULE_PREFIX = "python:"
"""``-c python:myproject.gunicorn_conf`` names a module on ``sys.path`` (gunicorn's form)."""

HOOKS_RUN = (
    "on_starting", "when_ready", "pre_fork", "post_fork", "post_worker_init", "worker_exit",
    "child_exit", "on_exit", "pre_request", "post_request",
)
"""gunicorn's hooks Tines runs at the same moment (``tines.hooks.HOOK_NAMES``, the same names
and, but for the request hooks, the same arguments)."""

HOOKS_NOT_RUN = {
    "on_reload": "Tines reloads on HUP by starting new workers from the settings read again "
                 "(when_ready is not called again); put the work in post_fork or on_starting",
    "worker_int": "a worker's INT is the ASGI lifespan shutdown, then its exit; worker_exit "
                  "runs in the worker as it stops",
    "worker_abort": "a stuck worker's Python stacks go to the error log before it is killed "
                    "(request_timeout)",
    "pre_exec": "the binary upgrade (USR2) starts a new master that runs on_starting",
    "nworkers_changed": "TTIN/TTOU and the dynamic pool are logged by the master",
    "ssl_context": "TLS is Rust's (rustls), set by certfile, keyfile and the tls_* settings",
    "on_dirty_starting": "Tines has no dirty arbiter",
    "dirty_post_fork": "Tines has no dirty workers",
    "dirty_worker_init": "Tines has no dirty workers",
    "dirty_worker_exit": "Tines has no dirty workers",
}
"""gunicorn's hooks Tines has no moment for, each with what it does instead (a warning)."""

_PLAIN = (str, bytes, int, float, bool, type(None))

_REFERENCE = re.compile(r"\{(?:planned:)?([a-z_][a-z0-9_]*)(?:=([^}]*))?\}")


@dataclass(frozen=True)
class Reading:
    """What a gunicorn config file gives: Tines settings by registry name (raw values the
    settings' converters take, as from TOML) and the warnings to print once."""

    values: Mapping[str, object]
    notes: tuple[str, ...]


def is_python_config(location: str) -> bool:
    """True for gunicorn's config forms: a ``.py`` file, ``python:MODULE`` (or ``file:PATH``
    ending in ``.py``); False for anything else (a TOML file)."""
    return location.startswith(MODULE_PREFIX) or location.removeprefix("file:").endswith(".py")


def gives_hooks(config_file: str | None, hooks_source: str) -> bool:
    """True when the ``hooks`` setting (from ``hooks_source``) is a gunicorn config file's
    (``config_file``, the one read): its hooks take gunicorn's arguments."""
    return (config_file is not None and is_python_config(config_file)
            and hooks_source == f"file {config_file}")


def run(hooks: str) -> ModuleType:
    """The module of the ``hooks`` value ``read`` gave (an absolute path, or a module name),
    run again: the hooks are its functions. ConfigError (one line) when it no longer runs."""
    location = hooks if hooks.endswith(".py") else MODULE_PREFIX + hooks
    return _run(location, f"hooks {hooks!r}")[0]


def read(location: str) -> Reading:
    """Run the file (or import the module) and map its module-level names; ConfigError (one
    line, exit 2) when it cannot run, sets a gunicorn setting Tines lacks, or a value its row
    cannot take."""
    label = f"config file {location!r}"
    module, hooks_value = _run(location, label)
    names = {name: value for name, value in vars(module).items() if not name.startswith("_")}
    theirs = {name: value for name, value in names.items() if peers.find("gunicorn", name) is not None}
    values: dict[str, object] = {}
    notes: list[str] = []
    hooks = False
    for name, value in names.items():
        if name in HOOKS_RUN or name in HOOKS_NOT_RUN:
            if not callable(value):
                raise ConfigError(f"{label}: hook {name} must be a function, got {value!r}")
            if name in HOOKS_NOT_RUN:
                notes.append(f"{label}: gunicorn hook {name} is not run: {HOOKS_NOT_RUN[name]}")
            hooks = hooks or name in HOOKS_RUN
            continue
        row = peers.find("gunicorn", name)
        if row is None:
            if isinstance(value, _PLAIN) or _plain_container(value):
                notes.append(f"{label}: {name} is not a gunicorn setting: ignored{_suggestion(name)}")
            continue  # imports, helper functions and classes: gunicorn ignores them too
        if row.apply is None:
            if value is None or value is False or value in ("", [], ()):
                continue  # off (``daemon = False``): nothing Tines lacks is asked for
            hint = f": {_plain_text(row.note).removeprefix('none: ')}" if row.note else ""
            raise ConfigError(f"{label}: gunicorn setting {name} has no equivalent in Tines{hint}")
        try:
            mapped = row.apply(value, theirs)
            if row.environ:
                # gunicorn's raw_env: the app's environment, set in the master (before any fork,
                # and again at each HUP, as gunicorn's arbiter does); its SCRIPT_NAME is root_path.
                environ = peers.environment(value, read_file=False)
                os.environ.update(environ)
                if mapped is not None and "root_path" in mapped:
                    notes.append(f"{label}: {name}: {peers.script_name_line(environ)}")
        except (TypeError, ValueError) as error:
            raise ConfigError(f"{label}: {name} {error}, got {value!r}") from None
        if mapped is None:
            raise ConfigError(f"{label}: {name} = {value!r} is refused: {_plain_text(row.hint)}")
        values.update(mapped)
        if row.note:
            notes.append(f"{label}: {name}: {_plain_text(row.note)}")
    if hooks:
        values["hooks"] = hooks_value
    return Reading(values, tuple(notes))


def _run(location: str, label: str) -> tuple[ModuleType, str]:
    """The file's (or module's) fresh module, run now (a reload reads it again; gunicorn's
    ``python:`` form imports it once, but a HUP must see a change), and the ``hooks`` value
    naming it: the absolute path (the master may ``chdir`` before it loads the hooks), or the
    module's name."""
    if location.startswith(MODULE_PREFIX):
        name = location[len(MODULE_PREFIX):]
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError) as error:
            raise ConfigError(f"{label}: cannot import {name!r}: {error}") from None
        if spec is None or spec.loader is None:
            raise ConfigError(f"{label}: no module named {name!r}")
        hooks_value = name
    else:
        path = os.path.abspath(location.removeprefix("file:"))
        if not os.path.isfile(path):
            raise ConfigError(f"cannot read {label}: no such file")
        spec = importlib.util.spec_from_file_location("__gunicorn_config__", path)
        assert spec is not None and spec.loader is not None
        hooks_value = path
    module = importlib.util.module_from_spec(spec)
    try:
        if location.startswith(MODULE_PREFIX):
            spec.loader.exec_module(module)
        else:  # compiled here: no __pycache__ beside it, and an edit within the same second counts
            with open(hooks_value, "rb") as file:
                source = file.read()
            exec(compile(source, hooks_value, "exec"), vars(module))  # noqa: S102 - gunicorn's file runs
    except Exception as error:  # noqa: BLE001 - any error in the user's file is one line
        raise ConfigError(f"{label}{_line_of(error, spec.origin)}: {type(error).__name__}: {error}") from None
    return module, hooks_value


def _line_of(error: Exception, origin: str | None) -> str:
    """`` line N`` of the config file (``origin``) where ``error`` was raised (its last frame
    there), or nothing."""
    if isinstance(error, SyntaxError) and error.lineno is not None and error.filename == origin:
        return f" line {error.lineno}"
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if frame.filename == origin]
    return f" line {frames[-1].lineno}" if frames else ""


def _suggestion(name: str) -> str:
    """`` (did you mean 'workers'?)`` for the closest gunicorn setting Tines reads, or nothing.
    ``difflib`` is imported here, on the way to a message (the master does not hold it)."""
    import difflib

    known = [row.name for row in peers.PEER_SETTINGS if row.server == "gunicorn"] + list(HOOKS_RUN)
    match = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _plain_container(value: object) -> bool:
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(isinstance(item, _PLAIN) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, _PLAIN) and isinstance(item, _PLAIN) for key, item in value.items())
    return False


def _plain_text(note: str) -> str:
    """A peer row's note (Markdown, ``{name}`` naming a setting) as a config-file user reads
    it: settings by their config key."""
    return _REFERENCE.sub(lambda match: match[1] if match[2] is None else f"{match[1]} = {match[2]}",
                          note).replace("`", "")
