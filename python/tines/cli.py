"""The ``tines`` command: argument parsing generated from the settings registry.

Owns: the subcommands (``serve``, ``check-config``, ``status``, ``help``, ``bench``, ``tune``), turning argv into a ``Config`` through
``tines.config.load``, and the exit-status contract: 0 on success, 2 with exactly one line
``tines: error: <message>`` on stderr for a usage, config or app-loading error. The flags of
``serve`` and ``check-config`` and the checks of ``check-config`` come from ``tines.serve_cli``,
which ``tines tune`` shares (it reads the flags it passes to its servers as ``serve`` does).

Must not: declare settings (they come from ``tines.config.SETTINGS``) or run the server itself
(``tines.arbiter`` does, imported only when ``serve`` runs). ``bench`` is the exception to the
registry: its flags belong to the Rust load generator, so its argv goes to ``tines._core.bench``
untouched; so is ``tune``, whose argv goes to ``tines.tune.main``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from typing import NoReturn

from tines.config import (SECTIONS, SETTINGS, Config, environment_warnings, ignored_settings, load,
                          migration_hint, peers)
from tines.config.migration import peer_text
from tines.errors import AppLoadError, ConfigError
from tines.serve_cli import (APP_FORMS, EXIT_USAGE, SERVE_DESCRIPTION, ArgumentParser, add_peer_flags,
                             add_serve_arguments, add_settings, check_config, find_setting, reload_warnings,
                             resolve_peer_flags, setting_help, their_spellings)


class VersionAction(argparse.Action):
    """``--version``: argparse's own action, but reading ``tines.__version__`` only when the
    flag is given (it loads ``importlib.metadata``, which ``serve`` has no use for)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str = "show program's version number and exit") -> None:
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> NoReturn:
        import tines

        print(f"tines {tines.__version__}")
        parser.exit()


def build_parser() -> ArgumentParser:
    """The ``tines`` parser with its subcommands."""
    parser = ArgumentParser(
        prog="tines", allow_abbrev=False,
        description="Tines: an application server for Python web apps (WSGI and ASGI) with a Rust core.")
    parser.add_argument("--version", action=VersionAction)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    serve = commands.add_parser("serve", help="run the server for a WSGI or ASGI app", allow_abbrev=False,
                                description=SERVE_DESCRIPTION, add_help=False)
    add_serve_arguments(serve)
    add_peer_flags(serve)

    check = commands.add_parser(
        "check-config", help="print every resolved setting and where it came from",
        allow_abbrev=False,
        description="Resolve the settings as 'serve' would, check the worker settings with the "
                    "workers' own conversion, the resource limits, the dynamic pool's bounds, "
                    "the TLS files and certificates, and the hooks module, print each setting "
                    "with its value and source, the worker mode in force (a fixed count or "
                    "the dynamic pool), the app's interface as the settings tell it and what TLS "
                    "will serve, and "
                    "exit 0; exit 2 with the error when the config is invalid. With "
                    "--check-app, also import the app as a worker would and say what it is "
                    "(WSGI, ASGI 3 or ASGI 2) and what serves it.")
    check.add_argument("app", nargs="?", metavar="APP", default=argparse.SUPPRESS,
                       help=f"the WSGI or ASGI app: {APP_FORMS}")
    check.add_argument("--check-app", action="store_true",
                       help="also import APP (running its import-time code), as a worker would, "
                            "so a deploy can be checked before it runs")
    add_settings(check)
    add_peer_flags(check)

    status = commands.add_parser(
        "status", help="show the workers and totals from the status listener, like top",
        allow_abbrev=False,
        description="Read the running server's status listener (status_bind: from --status-bind, "
                    "else $TINES_STATUS_BIND, else the config file) and show its workers, their "
                    "current requests and the totals, refreshing like top on a terminal (q or "
                    "Ctrl-C quits); printed once when the output is not a terminal. Exit 1 when "
                    "the listener cannot be reached.")
    status.add_argument("-c", "--config", metavar="PATH", default=argparse.SUPPRESS,
                        help="config file to read status_bind from (default: $TINES_CONFIG, "
                             "else ./tines.toml when it exists)")
    status.add_argument("--status-bind", dest="status_bind", metavar="ADDRESS",
                        default=argparse.SUPPRESS,
                        help="the status listener: HOST:PORT or unix:/path")
    status.add_argument("--json", action="store_true",
                        help="print /status.json once (schema tines-status/1, docs/status.md)")
    status.add_argument("--once", action="store_true", help="print the table once, even on a terminal")
    status.add_argument("--interval", type=float, default=2.0, metavar="SECONDS",
                        help="seconds between refreshes (default: 2)")
    status.add_argument("--profile", action="store_true",
                        help="instead of the table: merge the workers' profiles (a server run "
                             "with --profile) and print the functions with the most samples")
    status.add_argument("--profile-dir", dest="profile_dir", metavar="DIR", default=argparse.SUPPRESS,
                        help="where the workers wrote their profiles (default: profile_dir from "
                             "the environment or the config file, else the server's default, "
                             "found through its status listener)")
    status.add_argument("--profile-out", metavar="DIR",
                        help="also write profile.pstats and profile.collapsed (flame graphs) there")
    status.add_argument("--top", type=int, default=20, metavar="N",
                        help="functions in the profile table (default: 20)")

    explain = commands.add_parser(
        "help", help="one setting's whole text, flag, env var, config key and default",
        allow_abbrev=False,
        description="Print one setting's documentation (as docs/settings.md has it): its text, "
                    "flags, environment variable, config-file key and default. SETTING is its "
                    "name, a flag, the env var or the key (workers, --workers, -w, "
                    "TINES_WORKERS). Without SETTING: the settings' names by section.")
    explain.add_argument("setting", nargs="?", metavar="SETTING", help="the setting to explain")

    # Listed for --help only: main() hands `bench` argv to Rust before argparse sees it.
    commands.add_parser(
        "bench", help="load-test an HTTP or HTTPS server (wrk/ab-style; tines bench --help for its "
                      "flags)",
        add_help=False,
        description="The load generator: closed loop (-c, -n, -d) or open loop (-R), http:// or "
                    "https:// (--insecure, --cacert, --no-resumption), text, --json or --html "
                    "results. Its flags are its own: tines bench --help.")
    # Listed for --help only, as bench: main() hands `tune` argv to tines.tune.
    commands.add_parser(
        "tune", help="measure an app under Tines and recommend its settings (tines tune --help)",
        add_help=False,
        description="Runs the app under several configurations on 127.0.0.1, measures them with "
                    "the load generator and recommends settings: tines tune --help.")
    return parser


def bench(argv: Sequence[str]) -> int:
    """``tines bench``: run the Rust load generator in-process (GIL released); its exit status."""
    from tines import _core

    sys.stdout.flush()
    sys.stderr.flush()
    return int(_core.bench(list(argv)))


def _unknown_message(unknown: list[str]) -> str:
    """Name the first unknown option, with what Tines has instead when it is gunicorn's or
    uvicorn's (``tines.config.peers``) or another server's flag (``tines.config.migration_hint``),
    else with the closest known flag when it is a likely misspelling of one (``close_flag``)."""
    options = [word.partition("=")[0] for word in unknown if word.startswith("-")]
    if not options:
        return "unrecognized arguments: " + " ".join(unknown)
    theirs = [row for row in peers.by_flag(options[0]) if row.hint]
    if theirs:
        servers = ", ".join(dict.fromkeys(row.server for row in theirs))
        return f"unknown option {options[0]!r} ({servers}): {peer_text(theirs[0].hint)}"
    instead = migration_hint(options[0])
    if instead is not None:
        return f"unknown option {options[0]!r} {instead}"
    secret = SETTINGS.get(options[0].removeprefix("--").replace("-", "_"))
    if secret is not None and secret.secret:
        return (f"unknown option {options[0]!r}: {secret.name} is never given on the command line (every user "
                f"of the machine can read it): set {secret.env}, or {secret.toml_key} in the config file")
    flags = ["--config", "--help", "--help-all", "--version"]
    for setting in SETTINGS.values():
        flags += [flag for flag in setting.flags if flag.startswith("--")]
        flags += [f"--no-{flag[2:]}" for flag in setting.flags if setting.is_flag and flag.startswith("--")]
    match = close_flag(options[0], flags)
    hint = f" (did you mean {match!r}?)" if match else ""
    return f"unknown option {options[0]!r}{hint}"


def close_flag(option: str, flags: list[str]) -> str | None:
    """The flag ``option`` is a likely misspelling of, or None: a guess only for a slip of a letter
    or two (``--wrokers``, ``--max-request``), never for a flag that merely shares letters or a
    word with another (``--statsd-host`` is not ``--start-workers``, ``--http`` not ``--help``,
    ``--timeout`` not ``--send-timeout``)."""
    import difflib  # only on this error path: the master that `serve` becomes has no use for it

    matches = difflib.get_close_matches(option, flags, n=1, cutoff=0.85)
    return matches[0] if matches else None


COMMANDS = ("serve", "check-config", "status", "bench", "tune", "help")
"""The subcommands; any other first word is the APP of an implied ``serve`` (``tines app:app``)."""


def _implied_serve(words: list[str]) -> list[str]:
    """``tines APP [flags]`` and ``tines --bind ... APP`` serve, as gunicorn's and uvicorn's
    command lines do; a first word that looks like a misspelt command is left for the error."""
    if not words or words[0] in COMMANDS or words[0] in ("-h", "--help", "--version"):
        return words
    first = words[0]
    if not first.startswith("-") and ":" not in first and "." not in first and "/" not in first:
        import difflib  # a misspelt command (`tines stauts`) is an error, not an app to import

        if difflib.get_close_matches(first, COMMANDS, n=1, cutoff=0.75):
            return words
    return ["serve", *words]


def _apply_peer_flags(arguments: argparse.Namespace) -> dict[str, str]:
    """Put what gunicorn's and uvicorn's flags mean into ``arguments`` as settings given on the
    command line, print their warnings, and return the app's environment they set."""
    given = getattr(arguments, "peer_flags", [])
    if not given:
        return {}
    delattr(arguments, "peer_flags")
    resolved = resolve_peer_flags(given, {name: value for name, value in vars(arguments).items() if name in SETTINGS})
    for name, raw in resolved.settings.items():
        setattr(arguments, name, raw)
    for warning in resolved.warnings:
        print(f"tines: warning: {warning}", file=sys.stderr)
    return resolved.environ


def explain(word: str | None) -> str:
    """``tines help [SETTING]``: one setting's whole documentation, or every setting's name by
    section."""
    if word is not None:
        return setting_help(find_setting(word))
    import textwrap  # only for help text, as argparse does: the master that `serve` becomes never loads it

    out = []
    for section in SECTIONS:
        names = [setting.name for setting in SETTINGS.values() if setting.section == section]
        out += textwrap.wrap(f"{section}: {', '.join(names)}", 80, subsequent_indent="    ")
    return "\n".join(out) + "\n\ntines help SETTING for one of them; tines serve --help for the ones that matter first.\n"


def format_table(cfg: Config) -> str:
    """The check-config table: setting, value, source, in aligned columns."""
    rows = [("setting", "value", "source"), *cfg.rows()]
    name_width = max(len(row[0]) for row in rows)
    value_width = max(len(row[1]) for row in rows)
    return "".join(f"{name:<{name_width}}  {value:<{value_width}}  {source}\n"
                   for name, value, source in rows)


def serve(cfg: Config, overrides: Mapping[str, object] | None = None) -> int:
    """Run the arbiter until it stops; its return value is the exit status. ``overrides``
    (the command-line values ``cfg`` was resolved with) let HUP resolve the settings again."""
    if cfg.app is None:
        raise ConfigError(f"serve needs APP ({APP_FORMS})")
    from tines import logs
    from tines.arbiter import Arbiter

    # Once, in the master, before any worker exists; the arbiter configures logging the same way.
    ignored = ignored_settings(cfg)
    if ignored:
        logs.configure(cfg.error_log, cfg.log_level)
    for message in ignored:
        logs.get("config").warning(message)

    return int(Arbiter(cfg, overrides).run())


def status(arguments: argparse.Namespace) -> int:
    """``tines status``: the status listener's view (``tines.status_cli``)."""
    from tines import status_cli

    if arguments.interval <= 0:
        raise ConfigError(f"--interval must be positive, got {arguments.interval:g}")
    cfg = load(arguments)
    address = cfg.status_bind
    if arguments.profile:
        if arguments.top <= 0:
            raise ConfigError(f"--top must be positive, got {arguments.top}")
        return status_cli.profile(cfg.profile_dir, address, arguments.profile_out, arguments.top)
    if not address:
        raise ConfigError("no status listener: pass --status-bind ADDRESS, or set status_bind "
                          "(TINES_STATUS_BIND, or the config file)")
    return status_cli.run(address, arguments.json, arguments.once, arguments.interval)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``tines`` and ``python -m tines``; returns the exit status."""
    words = _implied_serve(list(sys.argv[1:] if argv is None else argv))
    if words[:1] in (["serve"], ["check-config"]):
        words = [words[0], *their_spellings(words[1:])]
    if words[:1] == ["bench"]:
        return bench(words[1:])
    if words[:1] == ["help"] and len(words) == 2 and words[1] not in ("-h", "--help"):
        # Before argparse, which would take a flag named as SETTING (-w) for one of its own.
        try:
            sys.stdout.write(explain(words[1]))
        except ConfigError as error:
            print(f"tines: error: {error}", file=sys.stderr)
            return EXIT_USAGE
        return 0
    if words[:1] == ["tune"]:
        from tines import tune

        return tune.main(words[1:])
    parser = build_parser()
    arguments, unknown = parser.parse_known_args(words)
    if unknown:
        parser.error(_unknown_message(unknown))
    if arguments.command is None:
        parser.error("missing COMMAND (serve, check-config, status, help, bench or tune); see tines --help")
    for warning in environment_warnings():
        print(f"tines: warning: {warning}", file=sys.stderr)
    try:
        if arguments.command == "help":
            sys.stdout.write(explain(arguments.setting))
            return 0
        if arguments.command == "status":
            return status(arguments)
        environ = _apply_peer_flags(arguments)
        cfg = load(arguments)
        os.environ.update(environ)  # the app's (-e, --env-file), after the settings: as gunicorn's raw_env
        for warning in reload_warnings(cfg):
            print(f"tines: warning: {warning}", file=sys.stderr)
        if arguments.command == "check-config":
            for message in ignored_settings(cfg):
                print(f"tines: warning: {message}", file=sys.stderr)
            lines = check_config(cfg, arguments.check_app)
            sys.stdout.write(format_table(cfg) + "".join(line + "\n" for line in lines))
            return 0
        return serve(cfg, {name: value for name, value in vars(arguments).items()
                           if name in SETTINGS or name == "config"})
    except (ConfigError, AppLoadError) as error:
        print(f"tines: error: {error}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
