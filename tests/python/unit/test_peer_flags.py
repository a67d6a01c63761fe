"""gunicorn's and uvicorn's flags and settings on Tines (``tines.config.peers``): every flag in
their checked-in ``--help`` lists (tests/data/peers/, made by tools/peer_help.py) is accepted, or
refused with a hint that names a real setting or says there is none; what the accepted ones come
to; and the unknown-flag path guessing only likely misspellings."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from tines.cli import _implied_serve, _unknown_message, build_parser, close_flag
from tines.config import SETTINGS, load, peers, render_markdown
from tines.config.peers import PEER_SETTINGS, environment
from tines.errors import ConfigError
from tines.serve_cli import resolve_peer_flags, their_spellings

PEERS_DIR = Path(__file__).resolve().parents[2] / "data" / "peers"
HELP_FILES = {"gunicorn": PEERS_DIR / "gunicorn-27.0.1.txt", "uvicorn": PEERS_DIR / "uvicorn-0.54.0.txt"}

ANSWERED_BY_TINES = {"-h", "--help", "--version"}
"""Flags of theirs that ``tines`` answers as itself (its own help and version)."""

NEW_SETTINGS = {"root_path", "log_config"}
"""Settings of issue 40 that other roles add to the registry (RP, LG): named by rows before they land."""

_REFERENCE = re.compile(r"\{([a-z_][a-z0-9_]*)(?:=([^}]*))?\}")


def help_flags(server: str) -> list[str]:
    """The flags of an option line of ``server``'s ``--help`` (argparse's or click's layout)."""
    flags: list[str] = []
    for line in HELP_FILES[server].read_text().splitlines():
        if not re.match(r"^ {2}-", line):
            continue
        spec = re.split(r" {2,}", line.strip())[0]
        flags += [flag for flag in re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", spec) if flag not in flags]
    return flags


ALL_FLAGS = [(server, flag) for server in HELP_FILES for flag in help_flags(server)]


def parses(words: list[str]) -> bool:
    """True when ``tines serve APP WORDS`` parses with nothing unknown."""
    _, unknown = build_parser().parse_known_args(["serve", "app:app", *their_spellings(words)])
    return not unknown


def test_the_help_lists_are_theirs() -> None:
    flags = dict.fromkeys(server for server, _ in ALL_FLAGS)
    assert list(flags) == ["gunicorn", "uvicorn"]
    assert len(help_flags("gunicorn")) > 110 and len(help_flags("uvicorn")) > 55
    assert {"-k", "--worker-class", "-t", "--statsd-host", "--worker-tmp-dir", "--no-sendfile"} <= set(
        help_flags("gunicorn"))
    assert {"--host", "--port", "--root-path", "--no-proxy-headers", "--env-file", "--ws"} <= set(help_flags("uvicorn"))


SAMPLES = {
    "-c": "tines.toml", "--config": "tines.toml", "-b": "127.0.0.1:8000", "--bind": "127.0.0.1:8000",
    "-k": "gthread", "--worker-class": "gthread", "--limit-request-line": "4094", "--chdir": "d", "--app-dir": "d",
    "-e": "A=1", "--env": "A=1", "--env-file": ".env", "--forwarded-allow-ips": "127.0.0.1",
    "--proxy-allow-from": "127.0.0.1", "--log-level": "info", "--protocol": "http", "--cert-reqs": "0",
    "--ssl-cert-reqs": "0", "--http-protocols": "h1,h2", "--http2-initial-window-size": "65535",
    "--http2-max-frame-size": "16384", "--asgi-loop": "auto", "--loop": "auto", "--asgi-lifespan": "on",
    "--lifespan": "on", "--root-path": "/api", "--http": "h11", "--interface": "asgi3",
    "--h11-max-incomplete-event-size": "16384", "--log-config": "logging.json", "--log-config-json": "logging.json",
    "--access-logfile": "-", "--error-logfile": "-", "--log-file": "-", "-p": "t.pid", "--pid": "t.pid",
    "--reload-include": "*.html", "--reload-exclude": "*.tmp", "--reload-extra-file": "templates/a.html",
    "--keyfile": "key.pem", "--certfile": "cert.pem", "--ssl-keyfile": "key.pem", "--ssl-certfile": "cert.pem",
}
"""A value their ``--help`` would show for a flag whose value is not a number (``1`` for the rest)."""

REFUSED_SPELLINGS = {"--no-sendfile", "--no-date-header"}
"""Spellings of accepted rows that turn off what Tines always does: refused with the row's hint."""


@pytest.mark.parametrize("server, flag", ALL_FLAGS)
def test_every_flag_of_theirs_is_accepted_or_refused_with_a_hint(
        server: str, flag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if flag in ANSWERED_BY_TINES:
        return
    rows = [row for row in peers.by_flag(flag) if row.server == server]
    assert rows, f"{server}'s {flag} is in no row of tines.config.peers"
    row = rows[0]
    words = [flag] if not row.takes_value else [flag, SAMPLES.get(flag, "1")]
    if row.apply is not None:
        assert parses(words), f"{flag} is accepted by its row but not by the command line"
        # Accepted means it loads: through the row (or the setting's own flag) into the settings
        # the row names, each from the command line.
        monkeypatch.chdir(tmp_path)
        (tmp_path / "tines.toml").write_text("")
        (tmp_path / ".env").write_text("A=1\n")
        (tmp_path / "logging.json").write_text('{"version": 1}')
        (tmp_path / "d").mkdir()
        if flag in REFUSED_SPELLINGS:
            with pytest.raises(ConfigError, match=re.escape(peers_text(row.hint))):
                loaded(words)
            return
        cfg = loaded(words)
        value: object = words[1] if row.takes_value else not flag.startswith("--no-")
        others = {row.name: value}
        taken = row.apply(value, others)
        assert taken is not None, (flag, value)
        for name in taken:  # ``config`` names the file the settings come from, not a setting
            assert name == "config" or cfg.sources[name] == "cli", (flag, name, cfg.sources[name])
        return
    assert not parses(words)
    message = _unknown_message(words)
    assert message.startswith(f"unknown option {flag!r} (") and "did you mean" not in message
    assert message.endswith(": " + peers_text(row.note)), message


def peers_text(text: str) -> str:
    from tines.config.migration import peer_text

    return peer_text(text)


@pytest.mark.parametrize("row", PEER_SETTINGS, ids=lambda row: f"{row.server}:{row.name}")
def test_every_hint_names_a_real_setting_or_says_there_is_none(row: peers.PeerSetting) -> None:
    for text in (row.ours, row.note, row.refusal):
        for name, value in _REFERENCE.findall(text):
            assert name in SETTINGS, f"{row.name}: {{{name}}} is not a setting"
            if value:
                SETTINGS[name].to_value(value)
    if not row.accepted:
        assert row.note.startswith("none") or _REFERENCE.search(row.note), row
    if row.refusal:
        assert row.refusal.startswith("none") or _REFERENCE.search(row.refusal), row


@pytest.mark.parametrize("row", [row for row in PEER_SETTINGS if row.accepted], ids=lambda row: row.name)
def test_what_an_accepted_row_sets_is_a_setting(row: peers.PeerSetting) -> None:
    assert row.apply is not None
    sample: object = True if not row.takes_value else "1"
    for name in row.apply(sample, {}) or {}:
        if name in NEW_SETTINGS and name not in SETTINGS:
            pytest.skip(f"{name} lands with its own role of issue 40")
        assert name in SETTINGS or name in ("config", "app"), name


def test_find_and_by_flag() -> None:
    assert (peers.find("gunicorn", "timeout") or peers.PeerSetting("", "")).flags == ("-t", "--timeout")
    assert peers.find("gunicorn", "host") is None and peers.find("uvicorn", "host") is not None
    assert [row.server for row in peers.by_flag("--log-config")] == ["gunicorn", "uvicorn"]
    assert len({(row.server, row.name) for row in PEER_SETTINGS}) == len(PEER_SETTINGS)


# --- what their flags come to ----------------------------------------------------------------------


def resolve(words: list[str]) -> tuple[dict[str, object], list[str], dict[str, str]]:
    """Parse ``tines serve APP WORDS``; the peer flags' settings, warnings and environment."""
    arguments = build_parser().parse_args(["serve", "app:app", *their_spellings(words)])
    given = getattr(arguments, "peer_flags", [])
    resolved = resolve_peer_flags(given, {name: value for name, value in vars(arguments).items() if name in SETTINGS})
    return resolved.settings, resolved.warnings, resolved.environ


def loaded(words: list[str]) -> argparse.Namespace:
    """The resolved settings of ``tines serve APP WORDS`` as ``tines.cli`` resolves them."""
    from tines.cli import _apply_peer_flags

    arguments = build_parser().parse_args(["serve", "app:app", *their_spellings(words)])
    _apply_peer_flags(arguments)
    cfg = load(arguments, {})
    return argparse.Namespace(**{name: cfg.value(name) for name in SETTINGS},
                              sources={name: cfg.source(name) for name in SETTINGS})


def test_gunicorn_timeout_is_boot_timeout_and_request_timeout_only_with_sync(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = loaded(["-t", "45"])
    assert (cfg.boot_timeout, cfg.request_timeout, cfg.sources["request_timeout"]) == (45.0, 60.0, "default")
    assert "gunicorn's -t: in gunicorn a worker silent this long is killed, at boot too" in capsys.readouterr().err
    cfg = loaded(["-k", "sync", "--timeout", "45"])
    assert (cfg.boot_timeout, cfg.request_timeout, cfg.mpm) == (45.0, 45.0, "prefork")
    cfg = loaded(["-k", "gthread", "--timeout", "45"])
    assert (cfg.boot_timeout, cfg.request_timeout, cfg.mpm) == (45.0, 60.0, "thread")


@pytest.mark.parametrize("value, settings", [
    ("sync", {"mpm": "prefork"}), ("gthread", {"mpm": "thread"}), ("asgi", {"interface": "asgi"}),
    ("uvicorn.workers.UvicornWorker", {"interface": "asgi"}), ("uvicorn_worker.UvicornWorker", {"interface": "asgi"}),
])
def test_worker_classes(value: str, settings: dict[str, object]) -> None:
    assert resolve(["-k", value])[0] == settings


def test_a_worker_class_tines_lacks_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as error:
        resolve(["-k", "gevent"])
    assert str(error.value) == (
        "-k gevent (gunicorn) is refused: none: Tines has no gevent, eventlet or tornado worker; sync is "
        "--mpm prefork, gthread --mpm thread, an ASGI worker class --interface asgi")


def test_threads_above_one_with_the_sync_worker_is_gthread_as_in_gunicorn() -> None:
    assert resolve(["--threads", "4"])[0] == {}  # --threads is Tines' own flag: the setting alone
    assert peers.find("gunicorn", "threads") is not None
    row = peers.find("gunicorn", "threads")
    assert row is not None and row.apply is not None
    assert row.apply(4, {}) == {"threads": 4, "mpm": "thread"}
    assert row.apply(4, {"worker_class": "gthread"}) == {"threads": 4}
    assert row.apply(1, {}) == {"threads": 1}


def test_a_gunicorn_worker_class_with_tines_threads_flag_is_gthread_as_in_gunicorn() -> None:
    """``-k sync --threads 4`` runs gthread in gunicorn; ``--threads`` alone stays Tines' own."""
    assert resolve(["-k", "sync", "--threads", "4"])[0] == {"mpm": "thread"}
    cfg = loaded(["-k", "sync", "--threads", "4", "-t", "45"])
    assert (cfg.mpm, cfg.threads, cfg.boot_timeout, cfg.request_timeout) == ("thread", 4, 45.0, 60.0)
    cfg = loaded(["-k", "sync", "--threads", "1", "-t", "45"])
    assert (cfg.mpm, cfg.threads, cfg.request_timeout) == ("prefork", 1, 45.0)
    assert (loaded(["--threads", "4"]).mpm, loaded(["--threads", "4"]).threads) == ("prefork", 4)


def test_one_worker_class_rule_for_threads_and_timeout_in_any_order() -> None:
    timeout = peers.find("gunicorn", "timeout")
    worker_class = peers.find("gunicorn", "worker_class")
    assert timeout is not None and timeout.apply is not None and worker_class is not None
    assert worker_class.apply is not None
    assert timeout.apply(30, {"worker_class": "sync", "threads": 4}) == {"boot_timeout": 30}
    assert timeout.apply(30, {"worker_class": "sync", "threads": 1}) == {"boot_timeout": 30, "request_timeout": 30}
    assert timeout.apply(30, {"threads": 1}) == {"boot_timeout": 30}  # sync by default, not given: no
    assert worker_class.apply("sync", {"threads": 4}) == {"mpm": "thread"}
    assert worker_class.apply("sync", {"threads": "1"}) == {"mpm": "prefork"}
    assert peers.effective_worker_class(None, None) == "sync"
    assert peers.effective_worker_class(None, 8) == "gthread"
    assert peers.effective_worker_class("uvicorn.workers.UvicornWorker", 8) == "uvicorn.workers.uvicornworker"


@pytest.mark.parametrize("words, bind", [
    (["--host", "0.0.0.0", "--port", "9000"], ("0.0.0.0:9000",)),
    (["--port", "9000"], ("127.0.0.1:9000",)),
    (["--host", "::1"], ("[::1]:8000",)),
    (["--uds", "/tmp/app.sock"], ("unix:/tmp/app.sock",)),
])
def test_uvicorn_host_and_port_make_one_bind(words: list[str], bind: tuple[str, ...]) -> None:
    cfg = loaded(words)
    assert (cfg.bind, cfg.sources["bind"]) == (bind, "cli")


def test_their_same_meaning_flags_are_aliases_of_the_setting() -> None:
    cfg = loaded(["--keep-alive", "3", "--access-logfile", "-", "--error-logfile", "err.log", "-p", "t.pid",
                  "--limit-max-requests", "100", "--timeout-graceful-shutdown", "7"])
    assert (cfg.keepalive_timeout, cfg.access_log, cfg.error_log, cfg.pid_file, cfg.max_requests,
            cfg.graceful_timeout) == (3.0, "-", "err.log", "t.pid", 100, 7.0)
    assert loaded(["--timeout-keep-alive", "4"]).keepalive_timeout == 4.0


def test_uvicorn_on_off_flags() -> None:
    assert loaded(["--no-proxy-headers"]).forwarded_allow_ips == ()
    assert loaded(["--proxy-headers"]).forwarded_allow_ips == ("127.0.0.1", "::1")
    assert loaded(["--no-server-header"]).server_header == ""
    assert resolve(["--no-access-log"])[0] == {} and resolve(["--ws", "none"])[0] == {"ws_max_connections": 0}
    with pytest.raises(ConfigError, match=r"^--no-date-header \(uvicorn\) is refused: none to turn off"):
        resolve(["--no-date-header"])


@pytest.mark.parametrize("words, spelt", [
    (["--ws-per-message-deflate", "false", "-w", "2"], ["--no-ws-per-message-deflate", "-w", "2"]),
    (["--ws-per-message-deflate", "True"], ["--ws-per-message-deflate"]),
    (["--proxy-protocol", "v2"], ["--proxy-protocol"]), (["--proxy-protocol", "off"], ["--no-proxy-protocol"]),
    (["--proxy-protocol", "app:app"], ["--proxy-protocol", "app:app"]),
    (["--access-log", "--workers", "2"], ["--access-log", "-", "--workers", "2"]), (["--access-log"], ["--access-log", "-"]),
    (["--access-log", "a.log"], ["--access-log", "a.log"]), (["--access-log", "-", "-w", "1"], ["--access-log", "-", "-w", "1"]),
    (["--server-header"], []), (["--server-header", "shop"], ["--server-header", "shop"]),
    (["--interface", "asgi3"], ["--interface", "asgi"]), (["--log-level", "trace"], ["--log-level", "debug"]),
    # uvicorn's bare switches before the APP: the APP stays the APP.
    (["--access-log", "main:app"], ["--access-log", "-", "main:app"]),
    (["--access-log", "src/app.py:app"], ["--access-log", "-", "src/app.py:app"]),
    (["--server-header", "main:app"], ["main:app"]), (["--server-header", "pkg.main:create_app()"], ["pkg.main:create_app()"]),
    (["--access-log", "/var/log/access.log"], ["--access-log", "/var/log/access.log"]),
])
def test_their_spellings_of_tines_flags(words: list[str], spelt: list[str]) -> None:
    assert their_spellings(words) == spelt


def test_a_bare_uvicorn_switch_before_the_app_leaves_the_app(capsys: pytest.CaptureFixture[str]) -> None:
    from tines.cli import main

    assert main(["check-config", "--check-app", "--server-header", "missing_module_of_fx:app"]) == 2
    assert "missing_module_of_fx" in capsys.readouterr().err  # taken as APP (and not found), not the header
    assert main(["check-config", "--access-log", "missing_module_of_fx:app"]) == 0
    out = capsys.readouterr().out
    assert "missing_module_of_fx:app" in next(line for line in out.splitlines() if line.startswith("app "))
    arguments = build_parser().parse_args(["serve", *their_spellings(["--access-log", "main:app"])])
    assert (arguments.app, arguments.access_log) == ("main:app", "-")


@pytest.mark.parametrize("flag, setting, hint", [
    ("--limit-request-line", "max_request_line", "Tines always limits the request line, --max-request-line"),
    ("--limit-request-fields", "max_headers", "Tines always limits the fields, --max-headers"),
])
def test_gunicorns_request_limits_take_a_number_and_refuse_0_with_the_hint(flag: str, setting: str, hint: str) -> None:
    """gunicorn's 0 means no limit: its row's hint, not the converter's generic error."""
    assert getattr(loaded([flag, "50"]), setting) == 50
    with pytest.raises(ConfigError) as error:
        resolve([flag, "0"])
    assert str(error.value) == f"{flag} 0 (gunicorn) is refused: none for 0 (no limit): {hint}"


@pytest.mark.parametrize("value", ["1", "2"])
def test_granian_http_values_are_refused_with_the_h2c_hint(value: str) -> None:
    """Granian's --http 2 is HTTP/2 only: not uvicorn's parser choice, so no "nothing to do"."""
    with pytest.raises(ConfigError) as error:
        resolve(["--http", value])
    assert str(error.value) == (
        f"--http {value} (uvicorn) is refused: uvicorn's auto, h11, httptools or zttp (its parser, nothing to do); "
        "as Granian's protocol: --no-http2 for HTTP/1.1 only (1), a cleartext --bind written h2c:HOST:PORT for "
        "HTTP/2 only (2), http1+h2c:HOST:PORT for both")
    for theirs in ("auto", "h11", "httptools"):
        assert resolve(["--http", theirs])[:2] == (
            {}, ["uvicorn's --http: nothing to do: the HTTP/1.1 parser and HTTP/2 are Tines' own"])


def test_uvicorn_limit_concurrency_is_max_concurrency_with_a_line() -> None:
    settings, warnings, _ = resolve(["--limit-concurrency", "50"])
    assert settings == {"max_concurrency": "50"}
    assert warnings == ["uvicorn's --limit-concurrency: taken as max_concurrency: ASGI requests one worker serves "
                        "at once, beyond it 503 (idle connections do not count: max_connections bounds those)"]


def test_nothing_to_do_flags_say_so_once() -> None:
    settings, warnings, _ = resolve(["--worker-tmp-dir", "/dev/shm", "--name", "shop", "--worker-tmp-dir", "/tmp"])
    assert settings == {}
    assert warnings == [
        "gunicorn's --worker-tmp-dir: nothing to do: Tines' workers show they are alive in the scoreboard in "
        "shared memory, not by touching a temporary file",
        "gunicorn's --name: nothing to do: Tines titles its processes itself (tines: master [APP], tines: worker ...)"]


def test_two_flags_for_one_setting_are_an_error() -> None:
    with pytest.raises(ConfigError, match=r"^--host 0.0.0.0 \(uvicorn\) and --bind both set bind: give one$"):
        resolve(["--host", "0.0.0.0", "--bind", "127.0.0.1:8000"])
    with pytest.raises(ConfigError, match=r"^--uds /x \(uvicorn\) and --port 9 both set bind: give one$"):
        resolve(["--port", "9", "--uds", "/x"])


def test_a_repeated_flag_of_a_list_setting_adds_to_it() -> None:
    settings, warnings, _ = resolve(["--reload-extra-file", "templates/*.html", "--reload-extra-file", "*.py"])
    assert settings == {"reload_include": ["*.py", "templates/*.html"]} and len(warnings) == 1
    assert loaded(["--reload-extra-file", "*.html", "--reload-extra-file", "b.txt"]).reload_include == (
        "*.py", "*.html", "b.txt")
    assert resolve(["--host", "127.0.0.1", "--port", "9000"])[0] == {"bind": ["127.0.0.1:9000"]}


def test_gunicorn_extra_reload_files_add_to_the_python_modules_as_in_gunicorn() -> None:
    """gunicorn watches the app's modules and the extra files; Tines' reload_include replaces *.py."""
    settings, warnings, _ = resolve(["--reload", "--reload-extra-file", "templates/index.html"])
    assert settings == {"reload_include": ["*.py", "templates/index.html"]}
    assert warnings == ["gunicorn's --reload-extra-file: taken as reload_include with *.py (as gunicorn watches the "
                        "app's modules too): the paths are globs relative to the watched tree (the app's directory); "
                        "a file outside it is not watched"]


def test_a_reload_include_without_python_files_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    """uvicorn's --reload-include adds to *.py; Tines' (the same flag) replaces it: a line says so."""
    from tines.serve_cli import reload_warnings

    def warnings(words: list[str]) -> list[str]:
        arguments = build_parser().parse_args(["serve", "app:app", *words])
        return reload_warnings(load(arguments, {}))

    assert warnings(["--reload", "--reload-include", "*.html"]) == [
        "reload_include *.html matches no .py file: a change to the app's code does not reload (it replaces the "
        "default *.py, where uvicorn's --reload-include adds to it): list '*.py' too"]
    assert warnings(["--reload", "--reload-include", "*.html", "--reload-include", "*.py"]) == []
    assert warnings(["--reload"]) == [] and warnings(["--reload-include", "*.html"]) == []
    row = peers.find("uvicorn", "reload_includes")
    assert row is not None and "replaces the default" in row.answer


def test_environment_from_env_and_env_file(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("# the app's\nexport DATABASE_URL='postgres://db/app'\nDEBUG=0\n\nNAME=\"a b\"\n")
    settings, _, environ = resolve(["--env-file", str(env_file), "-e", "DEBUG=1", "--env", "EMPTY="])
    assert settings == {}
    assert environ == {"DATABASE_URL": "postgres://db/app", "DEBUG": "1", "NAME": "a b", "EMPTY": ""}
    assert environment(["A=1=2", "B= x"], read_file=False) == {"A": "1=2", "B": " x"}
    with pytest.raises(ConfigError, match=r"^-e DEBUG: must be KEY=VALUE, got 'DEBUG'$"):
        resolve(["-e", "DEBUG"])
    with pytest.raises(ConfigError, match=r"^--env-file /nonexistent/.env: cannot read it: \[Errno 2\]"):
        resolve(["--env-file", "/nonexistent/.env"])


def test_gunicorn_script_name_in_its_environment_is_root_path_with_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    settings, warnings, environ = resolve(["-e", "SCRIPT_NAME=/api", "-e", "DEBUG=1"])
    assert settings == {"root_path": "/api"} and environ == {"SCRIPT_NAME": "/api", "DEBUG": "1"}
    assert warnings == ["gunicorn's -e: SCRIPT_NAME=/api is taken as root_path: Tines gives the app SCRIPT_NAME "
                        "(and PATH_INFO the rest of the path) from that setting (--root-path)"]
    cfg = loaded(["--env", "SCRIPT_NAME=/shop"])
    assert (cfg.root_path, cfg.sources["root_path"]) == ("/shop", "cli")
    assert "SCRIPT_NAME=/shop is taken as root_path" in capsys.readouterr().err
    assert resolve(["-e", "DEBUG=1"])[:2] == ({}, [])


# --- the unknown-flag path -------------------------------------------------------------------------


@pytest.mark.parametrize("words, status, says", [
    (["--statsd-host", "localhost:8125"], 2, "tines: error: unknown option '--statsd-host' (gunicorn): none: Tines "
     "has no StatsD client; it serves Prometheus /metrics (and /status.json) on --status-bind"),
    (["--worker-tmp-dir", "/dev/shm"], 0, "tines: warning: gunicorn's --worker-tmp-dir: nothing to do: Tines' "
     "workers show they are alive in the scoreboard"),
    (["--ws", "websockets"], 0, "tines: warning: uvicorn's --ws: nothing to do: the WebSocket protocol is Tines' own"),
    (["--http", "h11"], 0, "tines: warning: uvicorn's --http: nothing to do: the HTTP/1.1 parser and HTTP/2 are "
     "Tines' own"),
    (["--env-file", ".env"], 0, ""),
    (["--log-config", "logging.json"], 0, ""),
])
def test_the_reported_bad_guesses_are_gone(words: list[str], status: int, says: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Each of these once got a look-alike (--start-workers, --workers, --help, --no-profile,
    --config): now ``tines check-config`` takes it, or refuses it with its row's hint, no guess."""
    from tines.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("FX1_ENV_FILE_VALUE=1\n")
    (tmp_path / "logging.json").write_text('{"version": 1}')
    monkeypatch.setenv("FX1_ENV_FILE_VALUE", "")  # restored after the test: check-config sets it
    try:
        code = main(["check-config", "app:app", *words])
    except SystemExit as exit:  # argparse's error path (an unknown option)
        code = exit.code
    assert code == status
    out, err = capsys.readouterr()
    assert "did you mean" not in err and says in err, err
    if status == 0:
        table = dict(line.split(None, 1) for line in out.splitlines() if line.strip() and " " in line)
        assert "app:app" in table["app"]
        if words[0] == "--log-config":
            assert table["log_config"].split()[0].strip("\"").endswith("/logging.json") and "cli" in table["log_config"]
    else:
        assert err.count("\n") == 1


def test_statsd_points_to_prometheus_on_the_status_listener() -> None:
    assert _unknown_message(["--statsd-host", "localhost:8125"]) == (
        "unknown option '--statsd-host' (gunicorn): none: Tines has no StatsD client; it serves Prometheus "
        "/metrics (and /status.json) on --status-bind")


FLAGS = ["--workers", "--max-requests", "--keepalive-timeout", "--bind", "--help", "--config", "--start-workers",
         "--no-profile", "--profile", "--threads", "--send-timeout"]


@pytest.mark.parametrize("typed, meant", [
    ("--wrokers", "--workers"), ("--max-request", "--max-requests"), ("--keepalive-timout", "--keepalive-timeout"),
    ("--thread", "--threads"),
    ("--statsd-port", None), ("--frobnicate", None), ("--https", None), ("--env-files", None), ("--log-conf", None),
    ("--worker-tmp", None), ("--timeout", None),
])
def test_a_guess_only_for_a_likely_misspelling(typed: str, meant: str | None) -> None:
    assert close_flag(typed, FLAGS) == meant


def test_a_flag_in_neither_table_nor_close_gets_no_guess() -> None:
    assert _unknown_message(["--frobnicate"]) == "unknown option '--frobnicate'"
    assert _unknown_message(["--wokers"]) == "unknown option '--wokers' (did you mean '--workers'?)"


# --- the config file, the implied serve, the docs --------------------------------------------------


@pytest.mark.parametrize("line, says", [
    ("timeout = 30", "unknown setting 'timeout' in '{path}' (gunicorn's timeout: boot_timeout, and "
     "request_timeout with -k sync; in gunicorn a worker silent"),
    ('worker_class = "gthread"', "unknown setting 'worker_class' in '{path}' (gunicorn's worker_class: "
     'mpm = "prefork" for sync, mpm = "thread" with threads for gthread'),
    ("keepalive = 3", "unknown setting 'keepalive' in '{path}' (gunicorn's keepalive: keepalive_timeout)"),
    ("timeout_keep_alive = 3", "unknown setting 'timeout_keep_alive' in '{path}' (uvicorn's timeout_keep_alive: "
     "keepalive_timeout)"),
    ("wrkers = 3", "unknown setting 'wrkers' in '{path}' (did you mean 'workers'?)"),
])
def test_their_names_in_a_toml_file_get_the_same_hints(tmp_path: Path, line: str, says: str) -> None:
    path = tmp_path / "tines.toml"
    path.write_text(line + "\n")
    with pytest.raises(ConfigError) as error:
        load({"config": str(path)}, {})
    assert str(error.value).startswith(says.format(path=path)), str(error.value)
    if "did you mean" not in says:
        assert "did you mean" not in str(error.value)


@pytest.mark.parametrize("words, implied", [
    (["app:app"], ["serve", "app:app"]),
    (["app.py:app", "-w", "2"], ["serve", "app.py:app", "-w", "2"]),
    (["--host", "127.0.0.1", "app:app"], ["serve", "--host", "127.0.0.1", "app:app"]),
    (["myapp"], ["serve", "myapp"]),
    (["serve", "app:app"], ["serve", "app:app"]),
    (["status"], ["status"]), (["--version"], ["--version"]), (["--help"], ["--help"]), ([], []),
    (["stauts"], ["stauts"]),  # a misspelt command, left for the error
])
def test_tines_app_alone_serves_it(words: list[str], implied: list[str]) -> None:
    assert _implied_serve(words) == implied


def test_the_migration_table_lists_every_row_of_theirs() -> None:
    text = render_markdown()
    for row in PEER_SETTINGS:
        assert f"| {row.server} | `{row.name}`" in text, row
    assert "| uvicorn | `host` (`--host`) | `bind` `HOST:PORT` (with `--port`, default 8000) |" in text
    assert "| gunicorn | `statsd_host` (`--statsd-host`) | none: Tines has no StatsD client" in text


def test_tines_tune_reads_their_flags_after_its_double_dash_as_serve_does() -> None:
    """``tines tune -- -k gthread -t 30 --access-logfile -``: the flags ``serve_parser`` reads
    (tune's app check and the tines.toml it proposes) are the server's."""
    from tines.serve_cli import serve_parser
    from tines.tune import plan
    from tines.tune.report import serve_settings

    parser = serve_parser()
    arguments, unknown = parser.parse_known_args(["app:app", "-t", "30", "--access-logfile", "-", "-e", "A=1",
                                                  "--limit-concurrency", "64", "--access-log", "main:app"])
    assert unknown == ["main:app"] and parser.peer_environ == {"A": "1"}
    assert (arguments.boot_timeout, arguments.access_log, arguments.max_concurrency) == ("30", "-", "64")
    settings = serve_settings({"app": "app:app", "serve_args": ["--timeout", "30", "--proxy-headers",
                                                                 "--limit-concurrency", "64"]})
    assert (settings["boot_timeout"], settings["max_concurrency"]) == (30.0, 64)
    with pytest.raises(SystemExit) as exit:
        parser.parse_known_args(["app:app", "-k", "gevent"])
    assert exit.value.code == 2
    for flag in ("-k", "--host", "--port"):  # tune sets mpm and bind on each server itself
        with pytest.raises(plan.TuneError, match=f"^{flag} is set by tines tune itself"):
            plan.serve_flags_of([flag, "x"])

