"""``tines serve``'s command line, below both ``tines.cli`` and ``tines.tune``: the parser of APP
and the settings' flags (derived from the registry), and what ``check-config`` checks.

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
import sys
from typing import Any, NoReturn

from tines.config import SECTIONS, SETTINGS, Config, format_value
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


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """``tines serve``'s arguments: the positional APP and every setting's flag."""
    parser.add_argument("app", nargs="?", metavar="APP", default=argparse.SUPPRESS,
                        help=f"the WSGI or ASGI app: {APP_FORMS} (or the config key 'app')")
    add_settings(parser)


def serve_parser() -> ArgumentParser:
    """The parser of ``tines serve``'s arguments (APP, then flags), as the subcommand's, for an
    argv without the word ``serve``."""
    parser = ArgumentParser(prog="tines serve", allow_abbrev=False, description=SERVE_DESCRIPTION)
    add_serve_arguments(parser)
    return parser


def check_config(cfg: Config, check_app: bool) -> list[str]:
    """What ``serve`` would refuse before forking (``tines.preflight``: worker settings with the
    workers' own conversion, resource limits, the dynamic pool's bounds, the TLS files and
    material, the hooks module) and, with ``check_app``, the app itself (imported from ``chdir``
    as the workers do; a traceback from the app's code goes to stderr before the error line).
    Returns the lines to print after the table: what TLS will serve, then (last) the worker
    mode in force (fixed count or dynamic pool); warnings (a certificate that expires soon) go to stderr."""
    from tines import pool, preflight, tls

    checked = preflight.check(cfg, tls.new_ticket_secret())
    for warning in checked.warnings:
        print(f"tines: warning: {warning}", file=sys.stderr)
    lines = [f"tls: {checked.tls}", f"mode: {pool.describe_mode(cfg, checked.pool)}"]
    if not check_app:
        return lines
    if cfg.app is None:
        raise ConfigError(f"--check-app needs APP ({APP_FORMS})")
    from tines.app_loader import check_mpm, interface_of, load_app

    try:
        app = load_app(cfg.app, cfg.factory, cfg.interface)
        if interface_of(app, cfg.interface, repr(str(cfg.app))) != "wsgi":
            check_mpm(cfg)
    except AppLoadError as error:
        if error.traceback:
            sys.stderr.write(error.traceback)
        raise
    return lines
