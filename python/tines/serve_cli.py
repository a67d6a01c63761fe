"""``tines serve``'s command line, below both ``tines.cli`` and ``tines.tune``: the parser of APP
and the settings' flags (derived from the registry), its help (``--help``: the settings that
matter first, ``ESSENTIALS``; ``--help-all``: every flag; ``tines help SETTING``'s text), and what
``check-config`` checks.

The ``tines`` command (``tines.cli``) builds its ``serve`` and ``check-config`` subcommands from
these and hands ``tune`` to ``tines.tune``; ``tines tune`` starts its servers with the flags given
after its ``--`` and reads them as ``serve`` does (``tines.tune.report`` writes them into the
``tines.toml`` it proposes, ``tines.tune.detect`` checks them and the app as ``tines check-config
--check-app`` does). Here, below both, they tie neither to the other: ``tines.cli`` imports
``tines.tune`` (to hand it ``tune``'s argv), never the reverse.

Must not: declare settings (they come from ``tines.config.SETTINGS``), import ``tines.cli`` or
``tines.tune``, or run the server.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from tines import serving
from tines.config import SECTIONS, SETTINGS, Config, Setting, format_value
from tines.config import peers
from tines.errors import AppLoadError, ConfigError

EXIT_USAGE = 2
"""Exit status for a bad command line, config or APP (argparse's convention)."""

APP_FORMS = "module:attr or path/to/file.py:attr"

SERVE_DESCRIPTION = (f"Run the server for the WSGI or ASGI app APP ({APP_FORMS}). Settings come from "
                     "the command line, then TINES_* environment variables, then the config "
                     "file, then the defaults.")
"""``tines serve --help``'s description."""


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, as wide as the terminal as ``shutil.get_terminal_size`` finds it
    (``$COLUMNS``, else standard output's terminal, else 80), less 2 as argparse does; without
    importing ``shutil``, which argparse does for that (every parser and sub-parser makes a
    formatter while its arguments are added): it loads zlib, bz2 and lzma, which the master that
    ``serve`` becomes would hold, and every fork copy."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position,
                         width if width is not None else _terminal_columns() - 2)


def _terminal_columns() -> int:
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns > 0:
        return columns
    stdout = sys.__stdout__
    if stdout is None:
        return 80
    try:
        return os.get_terminal_size(stdout.fileno()).columns or 80
    except (AttributeError, ValueError, OSError):
        return 80


class ArgumentParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line, ``tines: error: <message>``, exit 2.

    argparse prints the whole usage block before an error; with dozens of flags that buries the
    message. ``--help`` still shows the usage. Its help is formatted by ``HelpFormatter`` unless
    another formatter is given.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"tines: error: {message}\n")


def add_settings(parser: argparse.ArgumentParser) -> None:
    """Add ``-c/--config`` and one option per setting, grouped by section.

    Every option defaults to ``argparse.SUPPRESS`` so the namespace holds only what was typed
    (``load`` treats a present key as given). Values stay strings: ``load`` converts them, so
    the messages are the same as for the environment and the file.
    """
    parser.add_argument("-c", "--config", metavar="PATH", default=argparse.SUPPRESS,
                        help="config file: TOML, or gunicorn's Python config (FILE.py or "
                             "python:MODULE; ./gunicorn.conf.py is never read unless named); "
                             "default: $TINES_CONFIG, else ./tines.toml when it exists")
    for section in SECTIONS:
        group = parser.add_argument_group(section)
        for setting in SETTINGS.values():
            if setting.section != section or not setting.flags:
                continue
            default = (setting.default_text if setting.default_text is not None
                       else format_value(setting.default))
            help_text = f"{_plain(setting.description)} (default: {default}; env {setting.env})"
            if setting.is_flag:
                group.add_argument(*setting.flags, dest=setting.name,
                                   action=argparse.BooleanOptionalAction,
                                   default=argparse.SUPPRESS, help=help_text)
                continue
            metavar = "{" + ",".join(setting.choices) + "}" if setting.choices else setting.metavar
            group.add_argument(*setting.flags, dest=setting.name, metavar=metavar,
                               action="append" if setting.multiple else "store",
                               default=argparse.SUPPRESS, help=help_text)


def _plain(doc: str) -> str:
    """Docs use Markdown backticks; ``--help`` does not. Also escape % for argparse."""
    return doc.replace("`", "").replace("%", "%%")


ESSENTIALS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("Binding", (
        ("bind", "HOST:PORT, unix:PATH or fd://N; repeat for more"),
        ("status_bind", "the status page, /metrics, tines status listen here"),
        ("forwarded_allow_ips", "proxies trusted for X-Forwarded-*"),
        ("root_path", "the prefix the app is mounted at behind a proxy, as /api"),
    )),
    ("App", (
        ("interface", "wsgi, asgi, asgi2, or auto: ASGI 3 for an async def app"),
        ("preload", "import the app once in the master, before forking the workers"),
        ("reload", "restart the workers when a source file changes: development only"),
        ("hooks", "a module of server hooks: on_starting, post_fork..."),
    )),
    ("Workers", (
        ("workers", "worker processes"),
        ("mpm", "a WSGI app's: prefork, or event/thread with --threads"),
        ("threads", "app threads per worker, with the event or thread MPM"),
        ("max_requests", "recycle a worker after N requests, 0 never"),
    )),
    ("Timeouts", (
        ("request_timeout", "seconds the app may hold a thread without progress"),
        ("keepalive_timeout", "seconds an idle kept-alive connection stays open"),
        ("graceful_timeout", "seconds workers get to finish on a stop or reload"),
        ("boot_timeout", "seconds a worker may take to load the app"),
    )),
    ("Logging", (
        ("access_log", "the access log: a path, or - for stdout"),
        ("error_log", "the error log: a path, or - for stderr"),
        ("log_level", "debug, info, warning, error or critical"),
        ("log_config", "a dictConfig file for the app's logging: JSON, YAML or ini"),
    )),
    ("TLS and HTTP", (
        ("certfile", "the certificate chain (PEM): serve HTTPS"),
        ("keyfile", "its private key, PEM"),
        ("max_body_size", "the largest request body; a larger one gets 413"),
    )),
    ("Process", (
        ("user", "the user the workers run as, switched to after binding"),
        ("pid_file", "write the master's pid there"),
    )),
)
"""The settings ``tines serve --help`` shows, grouped, one line each (the rest: ``--help-all``,
``tines help SETTING``, docs/settings.md). Kept here, not in each ``Setting``: which settings
matter first is a choice about the help, not a property of a setting. Each line's default, in
brackets, is the registry's (``brief_default``), never written here."""


def brief_default(setting: Setting) -> str | None:
    """A setting's default as the brief help shows it: its ``default_text`` (a size as people
    read it: ``100 MiB``), else the default without TOML's quotes (a list comma-separated, an
    empty string ``none``); None for an on/off flag (off by default, said by its name)."""
    if setting.default_text is not None:
        text = setting.default_text.replace("`", "")
        readable = re.fullmatch(r"\d+ \((.+)\)", text)
        return readable[1] if readable else text
    default = setting.default
    if isinstance(default, bool):
        return None
    if isinstance(default, (tuple, list)):
        return ", ".join(str(item) for item in default) or "none"
    if isinstance(default, str):
        return default or "none"
    return "unset" if default is None else format_value(default)


def _invocation(name: str) -> str:
    """A setting's flags as the brief help shows them: ``-w, --workers N``."""
    setting = SETTINGS[name]
    shown = [flag for flag in setting.flags if not flag.startswith("--")]
    shown += [flag for flag in setting.flags if flag.startswith("--")][:1]
    flags = ", ".join(shown)
    if setting.is_flag:
        return flags
    return f"{flags} {'CHOICE' if setting.choices else setting.metavar}"


def brief_help(prog: str) -> str:
    """``tines serve --help``: usage, then ``ESSENTIALS`` by group, one line per setting."""
    width = max(len(_invocation(name)) for _, rows in ESSENTIALS for name, _ in rows)
    shown = sum(len(rows) for _, rows in ESSENTIALS)
    import textwrap  # only for help text, as argparse does: the master that `serve` becomes never loads it

    lines = [f"usage: {prog} [APP] [options]", "", *textwrap.wrap(SERVE_DESCRIPTION, 80), "",
             f"  {'APP':<{width}}  the WSGI or ASGI app: {APP_FORMS}",
             f"  {'-c, --config PATH':<{width}}  config file: TOML, or gunicorn's FILE.py (default ./tines.toml)"]
    for title, rows in ESSENTIALS:
        lines += ["", f"{title}:"]
        lines += [f"  {_invocation(name):<{width}}  {text}{_bracketed(brief_default(SETTINGS[name]))}"
                  for name, text in rows]
    lines += ["", f"These are {shown} of the {len(SETTINGS)} settings. All of them: {prog} --help-all;",
              "one setting's whole text, env var, config key and default: tines help SETTING;",
              "docs/settings.md. Every flag also reads TINES_<NAME> and the config file's key."]
    return "\n".join(lines) + "\n"


def _bracketed(default: str | None) -> str:
    return "" if default is None else f" ({default})"


class BriefHelpAction(argparse.Action):
    """``-h/--help`` of ``tines serve``: the settings that matter first (``brief_help``)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> NoReturn:
        sys.stdout.write(brief_help(parser.prog))
        parser.exit(0)


class FullHelpAction(BriefHelpAction):
    """``--help-all``: argparse's help of every flag, each with its whole description."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> NoReturn:
        parser.print_help()
        parser.exit(0)


def find_setting(word: str) -> Setting:
    """The setting ``word`` names: its name, a flag, its env var or its config key (``workers``,
    ``--workers``, ``-w``, ``TINES_WORKERS``); ConfigError naming the closest name otherwise."""
    for setting in SETTINGS.values():
        if word in (setting.name, setting.env, setting.toml_key, *setting.flags):
            return setting
    name = word.lstrip("-").lower().removeprefix("tines_").replace("-", "_")
    if name in SETTINGS:
        return SETTINGS[name]
    import difflib  # only on this error path

    matches = difflib.get_close_matches(name, list(SETTINGS), n=1)
    hint = f" (did you mean {matches[0]!r}?)" if matches else ""
    raise ConfigError(f"no setting {word!r}{hint}; tines serve --help-all lists them all")


def setting_help(setting: Setting) -> str:
    """``tines help SETTING``: one setting's whole text, its flags, env var, config key and
    default, as docs/settings.md has them."""
    import textwrap  # only for help text, as argparse does: the master that `serve` becomes never loads it

    default = (setting.default_text if setting.default_text is not None
               else format_value(setting.default))
    if setting.is_flag:
        flags = ", ".join(f"{flag}, --no-{flag[2:]}" if flag.startswith("--") else flag for flag in setting.flags)
    else:
        metavar = "{" + ",".join(setting.choices) + "}" if setting.choices else setting.metavar
        flags = ", ".join(f"{flag} {metavar}" for flag in setting.flags)
    lines = [f"{setting.name} ({setting.section})", "", *textwrap.wrap(setting.description.replace("`", ""), 80), "",
             f"  flag:        {flags or ('APP (the positional argument)' if setting.name == 'app' else '(none)')}",
             f"  env:         {setting.env}",
             f"  config key:  {setting.toml_key}",
             f"  default:     {default.replace('`', '')}"]
    if setting.multiple:
        lines.append("  repeatable:  the flag may be given more than once (a list in the config file)")
    return "\n".join(lines) + "\n"


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """``tines serve``'s arguments: the positional APP and every setting's flag; ``--help`` is
    the brief one (``brief_help``), ``--help-all`` the full one. ``parser`` is made with
    ``add_help=False``."""
    parser.add_argument("-h", "--help", action=BriefHelpAction,
                        help="show the settings that matter first and exit")
    parser.add_argument("--help-all", action=FullHelpAction, help="show every setting's flag and exit")
    parser.add_argument("app", nargs="?", metavar="APP", default=argparse.SUPPRESS,
                        help=f"the WSGI or ASGI app: {APP_FORMS} (or the config key 'app')")
    add_settings(parser)


class ServeParser(ArgumentParser):
    """``tines serve``'s parser alone (``tines tune`` reads the flags after its ``--`` with it):
    it reads gunicorn's and uvicorn's flags as ``tines serve`` does (``their_spellings``, then
    ``resolve_peer_flags`` into the settings given on the command line; their warnings are the
    server's to print, and a refused one is this parser's one-line error). The app's environment
    they set (``-e``, ``--env-file``) is in ``peer_environ``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.peer_environ: dict[str, str] = {}

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        words = their_spellings(list(sys.argv[1:] if args is None else args))
        arguments, unknown = super().parse_known_args(words, namespace)
        given = getattr(arguments, "peer_flags", [])
        if given:
            delattr(arguments, "peer_flags")
            try:
                resolved = resolve_peer_flags(
                    given, {name: value for name, value in vars(arguments).items() if name in SETTINGS})
            except ConfigError as error:
                self.error(str(error))
            for name, raw in resolved.settings.items():
                setattr(arguments, name, raw)
            self.peer_environ = resolved.environ
        return arguments, unknown


def serve_parser() -> ServeParser:
    """The parser of ``tines serve``'s arguments (APP, then flags, gunicorn's and uvicorn's
    too), as the subcommand's, for an argv without the word ``serve``."""
    parser = ServeParser(prog="tines serve", allow_abbrev=False, description=SERVE_DESCRIPTION, add_help=False)
    add_serve_arguments(parser)
    add_peer_flags(parser)
    return parser


_ON = frozenset({"true", "yes", "on", "1"})
_OFF = frozenset({"false", "no", "off", "0"})
_THEIR_VALUES = {("--interface", "asgi3"): "asgi", ("--log-level", "trace"): "debug"}
"""uvicorn's names for values Tines spells otherwise (its ``trace`` is Tines' most verbose level)."""


def their_spellings(words: Sequence[str]) -> list[str]:
    """``words`` (a ``serve`` or ``check-config`` command line) with gunicorn's and uvicorn's
    spellings of Tines' own flags that argparse would misread spelt as Tines' are: an on/off flag
    given a value (uvicorn's ``--ws-per-message-deflate false``, gunicorn's ``--proxy-protocol
    v2``), uvicorn's ``--access-log`` alone (its access log on stdout: ``--access-log -``) and
    ``--server-header`` alone (on, Tines' default too: dropped; "alone" also when APP follows:
    ``--access-log main:app`` keeps main:app the APP), ``--interface asgi3``,
    ``--log-level trace``."""
    switches = {flag for setting in SETTINGS.values() if setting.is_flag for flag in setting.flags}
    spelt: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        following = words[index + 1] if index + 1 < len(words) else None
        value = following.lower() if following is not None else None
        alone = following is None or (following.startswith("-") and following != "-") or _could_be_app(following)
        if word in switches and value is not None and (
                value in _ON | _OFF or (word == "--proxy-protocol" and value in ("v1", "v2", "auto"))):
            spelt.append("--no-" + word[2:] if value in _OFF else word)
            index += 2
            continue
        if word == "--access-log" and alone:
            spelt += [word, "-"]
        elif word == "--server-header" and alone:
            pass
        elif following is not None and (word, following) in _THEIR_VALUES:
            spelt += [word, _THEIR_VALUES[word, following]]
            index += 1
        else:
            spelt.append(word)
        index += 1
    return spelt


_APP = re.compile(r"(?:[A-Za-z_][\w.]*|\S*\.py):[A-Za-z_][\w.]*(?:\(.*\))?")


def _could_be_app(word: str) -> bool:
    """``word`` has APP's form (``main:app``, ``path/to/app.py:app``, a factory call): after
    uvicorn's bare ``--access-log`` or ``--server-header`` it is the APP, not their value."""
    return _APP.fullmatch(word) is not None


class PeerFlag(argparse.Action):
    """One of gunicorn's or uvicorn's flags that no setting declares (``-k``, ``--host``): kept
    as typed, in order, in ``peer_flags`` (``resolve_peer_flags`` turns them into settings)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        flag = option_string or self.option_strings[0]
        value = values if self.nargs != 0 else not flag.startswith("--no-")
        given = list(getattr(namespace, "peer_flags", []))
        setattr(namespace, "peer_flags", [*given, (flag, value)])


def add_peer_flags(parser: argparse.ArgumentParser) -> None:
    """Accept gunicorn's and uvicorn's flags that Tines takes (``tines.config.peers``) and that no
    setting declares already; left out of ``--help`` (docs/settings.md's migration table and
    docs/migrating.md list them). Their refused flags stay unknown: ``tines.cli`` answers
    those with the row's hint."""
    taken = set(parser._option_string_actions)  # argparse keeps no public view of its flags
    for row in peers.PEER_SETTINGS:
        for flag in row.flags:
            if row.apply is None or flag in taken:
                continue
            taken.add(flag)
            parser.add_argument(flag, dest="peer_flags", action=PeerFlag, nargs=None if row.takes_value else 0,
                                default=argparse.SUPPRESS, help=argparse.SUPPRESS)


@dataclass
class PeerFlags:
    """What gunicorn's and uvicorn's flags on a command line come to: Tines settings (raw values
    by name), the app's environment (``-e``, ``--env-file``) and one warning per flag whose
    meaning differs (``-t``), said once."""

    settings: dict[str, object] = field(default_factory=dict)
    environ: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def resolve_peer_flags(given: Sequence[tuple[str, object]], tines_given: Collection[str] | Mapping[str, object]
                       ) -> PeerFlags:
    """Turn ``given`` (flag, value as typed, in order) into Tines settings through each flag's row.

    A flag in both servers' tables (``--log-config``) takes the first row that accepts the value.
    Two flags that give one setting different values, or a flag and the setting's own flag
    (``tines_given``: the settings given by their Tines flags), are an error: nothing says which
    one the user meant. Raises ConfigError with one line (the flag, its value and the hint).
    When ``tines_given`` maps names to values, a Tines flag gunicorn spells the same (``--threads``)
    counts as gunicorn's for the rows that read it: ``-k sync --threads 4`` is gthread, as in
    gunicorn (``--threads`` alone stays Tines' own: a gunicorn worker class must be given)."""
    from tines.config.migration import peer_text

    others: dict[str, object] = {}
    if isinstance(tines_given, Mapping) and "threads" in tines_given:
        others["threads"] = tines_given["threads"]
    for flag, value in given:
        for row in peers.by_flag(flag):
            others.setdefault(row.name, value)
    resolved = PeerFlags()
    origin: dict[str, str] = {}
    origin_row: dict[str, peers.PeerSetting] = {}
    for flag, value in given:
        rows = [row for row in peers.by_flag(flag) if row.apply is not None]
        taken = None
        for row in rows:
            assert row.apply is not None
            taken = row.apply(value, others)
            if taken is not None:
                break
        shown = flag if value is True or value is False else f"{flag} {value}"
        if taken is None:
            raise ConfigError(f"{shown} ({rows[0].server}) is refused: {peer_text(rows[0].hint)}")
        if row.environ:
            try:
                environ = peers.environment(value, read_file=flag == "--env-file")
            except ValueError as error:
                raise ConfigError(f"{shown}: {error}") from None
            except OSError as error:
                raise ConfigError(f"{shown}: cannot read it: [Errno {error.errno}] {error.strerror}") from None
            resolved.environ.update(environ)
            line = peers.script_name_line(environ) if "root_path" in taken else ""
            if line:
                resolved.warnings.append(f"{row.server}'s {flag}: {line}")
        for name, raw in taken.items():
            if name in tines_given:
                raise ConfigError(f"{shown} ({row.server}) and --{name.replace('_', '-')} both set {name}: "
                                  "give one")
            before = resolved.settings.get(name)
            items = raw if isinstance(raw, list) else [raw]
            if isinstance(before, list) and origin_row[name] is row:
                before += [item for item in items if item not in before]  # a repeated flag (--reload-extra-file)
                continue
            value_of = items if name in SETTINGS and SETTINGS[name].multiple else raw
            if before is not None and before != value_of:
                raise ConfigError(f"{shown} ({row.server}) and {origin[name]} both set {name}: give one")
            resolved.settings[name] = value_of
            origin[name], origin_row[name] = shown, row
        warning = f"{row.server}'s {flag}: {peer_text(row.note)}"
        if row.note and warning not in resolved.warnings:
            resolved.warnings.append(warning)
    return resolved


def reload_warnings(cfg: Config) -> list[str]:
    """A line when ``reload`` is on and ``reload_include`` was given without a glob matching a
    ``.py`` file: Tines' replaces the default ``*.py`` where uvicorn's ``--reload-include`` adds to
    it, so a uvicorn command line would stop reloading on a code change without a word."""
    if not cfg.reload or cfg.source("reload_include") == "default":
        return []
    import fnmatch  # only when reload is on, a development server

    if any(fnmatch.fnmatchcase("app.py", glob) for glob in cfg.reload_include):
        return []
    return [f"reload_include {' '.join(cfg.reload_include)} matches no .py file: a change to the app's code does "
            "not reload (it replaces the default *.py, where uvicorn's --reload-include adds to it): list '*.py' too"]


def check_config(cfg: Config, check_app: bool) -> list[str]:
    """What ``serve`` would refuse before forking (``tines.preflight``: worker settings with the
    workers' own conversion, resource limits, the dynamic pool's bounds, the TLS files and
    material, the hooks module) and, with ``check_app``, the app itself (imported from ``chdir``
    as the workers do; a traceback from the app's code goes to stderr before the error line).
    Returns the lines to print after the table: the app's interface (with ``check_app``: that
    the app imported, its interface and what serves it; without, what the setting tells), what
    TLS will serve, then (last) the worker mode in force (fixed count or dynamic pool); warnings (a certificate that expires soon) go to stderr."""
    from tines import pool, preflight, tls

    checked = preflight.check(cfg, tls.new_ticket_secret())
    for warning in checked.warnings:
        print(f"tines: warning: {warning}", file=sys.stderr)
    mode = f"mode: {pool.describe_mode(cfg, checked.pool)}"
    if not check_app:
        return [serving.interface_line(cfg.interface, cfg.mpm), f"tls: {checked.tls}", mode]
    if cfg.app is None:
        raise ConfigError(f"--check-app needs APP ({APP_FORMS})")
    from tines.app_loader import check_mpm, interface_of, load_app

    try:
        app = load_app(cfg.app, cfg.factory, cfg.interface)
        interface = interface_of(app, cfg.interface, repr(str(cfg.app)))
        if interface != "wsgi":
            check_mpm(cfg)
    except AppLoadError as error:
        if error.traceback:
            sys.stderr.write(error.traceback)
        raise
    return [f"interface: {cfg.interface}", f"app: {cfg.app} imported: {serving.app_is(interface, cfg.mpm)}",
            f"tls: {checked.tls}", mode]
