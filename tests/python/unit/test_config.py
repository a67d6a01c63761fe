"""tines.config and the CLI around it: precedence, sources, conversion and error messages."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tines import config
from tines.config import SETTINGS, load
from tines.errors import ConfigError

PYTHON_DIR = str(Path(__file__).resolve().parents[3] / "python")


@pytest.fixture(autouse=True)
def in_empty_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test runs where no ./tines.toml exists unless it writes one."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def error_of(*args: object, **kwargs: object) -> str:
    with pytest.raises(ConfigError) as caught:
        load(*args, **kwargs)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "\n" not in message
    return message


# --- precedence and sources ----------------------------------------------------------------------


def test_defaults_apply_when_nothing_is_given() -> None:
    cfg = load({}, {})
    assert cfg.workers == 2 * (os.cpu_count() or 1)
    assert cfg.bind == ("127.0.0.1:8000",)
    assert cfg.keepalive_timeout == 5.0
    assert cfg.access_log is None
    assert cfg.app is None
    assert cfg.config_file is None
    assert all(cfg.source(name) == "default" for name in SETTINGS)


def test_command_line_wins_over_env_which_wins_over_file(tmp_path: Path) -> None:
    path = write(tmp_path / "x.toml", "workers = 3\nthreads = 4\nbacklog = 10\n")
    cfg = load({"config": path, "workers": "7"}, {"TINES_WORKERS": "5", "TINES_THREADS": "6"})
    assert (cfg.workers, cfg.threads, cfg.backlog, cfg.max_headers) == (7, 6, 10, 100)
    assert cfg.source("workers") == "cli"
    assert cfg.source("threads") == "env TINES_THREADS"
    assert cfg.source("backlog") == f"file {path}"
    assert cfg.source("max_headers") == "default"
    assert cfg.config_file == path


def test_tines_toml_in_the_current_directory_is_read_by_default(in_empty_directory: Path) -> None:
    write(in_empty_directory / "tines.toml", 'app = "site:app"\n')
    cfg = load({}, {})
    assert cfg.app == "site:app"
    assert cfg.source("app") == "file tines.toml"


def test_tines_config_env_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "other.toml", "workers = 9\n")
    write(tmp_path / "tines.toml", "workers = 1\n")
    assert load({}, {"TINES_CONFIG": path}).workers == 9


def test_config_flag_wins_over_tines_config_env(tmp_path: Path) -> None:
    flag = write(tmp_path / "flag.toml", "workers = 2\n")
    env = write(tmp_path / "env.toml", "workers = 3\n")
    assert load({"config": flag}, {"TINES_CONFIG": env}).workers == 2


def test_a_value_overridden_by_a_higher_source_is_still_validated(tmp_path: Path) -> None:
    path = write(tmp_path / "x.toml", "workers = 0\n")
    assert error_of({"config": path, "workers": "2"}, {}) == f"{path}: workers must be a positive integer, got 0"


def test_unknown_env_vars_are_ignored() -> None:
    assert load({}, {"TINES_WOKERS": "3", "TINES_": "x"}).workers == 2 * (os.cpu_count() or 1)


def test_argparse_namespace_keeps_only_settings() -> None:
    import argparse

    cfg = load(argparse.Namespace(command="serve", workers="3", app="a:b"), {})
    assert (cfg.workers, cfg.app, cfg.source("app")) == (3, "a:b", "cli")


def test_worker_settings_hold_only_worker_settings_as_plain_values() -> None:
    settings = load({"forwarded_allow_ips": "10.0.0.0/8", "keepalive_timeout": "2"}, {}).worker_settings()
    assert set(settings) == {name for name, setting in SETTINGS.items() if setting.worker}
    assert "workers" not in settings and "bind" not in settings
    assert settings["forwarded_allow_ips"] == ["10.0.0.0/8"]
    assert settings["keepalive_timeout"] == 2.0 and isinstance(settings["keepalive_timeout"], float)
    assert settings["mpm"] == "prefork" and settings["log_level"] == "info"


def test_config_is_immutable() -> None:
    cfg = load({}, {})
    with pytest.raises(AttributeError):
        cfg.workers = 3
    with pytest.raises(AttributeError):
        cfg.no_such_setting  # noqa: B018


def test_every_setting_derives_env_and_toml_names() -> None:
    for name, setting in SETTINGS.items():
        assert setting.env == "TINES_" + name.upper()
        assert setting.toml_key == name
        assert setting.section in config.SECTIONS
        assert setting.doc.endswith(".")


# --- conversion ------------------------------------------------------------------------------------


@pytest.mark.parametrize("word, expected", [
    ("1", True), ("true", True), ("YES", True), ("on", True),
    ("0", False), ("false", False), ("No", False), ("off", False),
])
def test_env_booleans_accept_the_usual_words(word: str, expected: bool) -> None:
    assert load({}, {"TINES_PRELOAD": word}).preload is expected


def test_env_boolean_rejects_other_words() -> None:
    assert error_of({}, {"TINES_PRELOAD": "maybe"}) == (
        "TINES_PRELOAD: preload must be one of 1/0, true/false, yes/no, on/off, got 'maybe'")


def test_toml_booleans_and_numbers_keep_their_types(tmp_path: Path) -> None:
    path = write(tmp_path / "x.toml", "preload = true\nkeepalive_timeout = 0\nheader_timeout = 0.5\n")
    cfg = load({"config": path}, {})
    assert cfg.preload is True and cfg.keepalive_timeout == 0.0 and cfg.header_timeout == 0.5


@pytest.mark.parametrize("address", [
    "127.0.0.1:8000", "localhost:0", "0.0.0.0:65535", "[::1]:8000", "[::]:80",
    "unix:/tmp/tines.sock", "fd://3",
])
def test_bind_accepts_each_address_form(address: str) -> None:
    assert load({"bind": [address]}, {}).bind == (address,)


@pytest.mark.parametrize("address, reason", [
    ("127.0.0.1", "must be HOST:PORT, [IPv6]:PORT, unix:/path or fd://N"),
    (":8000", "must be HOST:PORT, [IPv6]:PORT, unix:/path or fd://N"),
    ("127.0.0.1:65536", "port must be a number in 0..65535"),
    ("127.0.0.1:http", "port must be a number in 0..65535"),
    ("::1:8000", "needs brackets around an IPv6 address, as in [::1]:8000"),
    ("[::g]:80", "needs a valid IPv6 address between brackets"),
    ("unix:", "unix: needs a path"),
    ("fd://x", "fd:// needs a file descriptor number"),
])
def test_bind_rejects_malformed_addresses(address: str, reason: str) -> None:
    assert error_of({"bind": ["127.0.0.1:1", address]}, {}) == f"bind {reason}, got {address!r}"


def test_bind_is_repeatable_and_comma_separated_in_env_and_toml(tmp_path: Path) -> None:
    assert load({"bind": ["a:1", "b:2"]}, {}).bind == ("a:1", "b:2")
    assert load({}, {"TINES_BIND": "a:1, [::1]:2"}).bind == ("a:1", "[::1]:2")
    path = write(tmp_path / "x.toml", 'bind = ["a:1", "unix:/s"]\n')
    assert load({"config": path}, {}).bind == ("a:1", "unix:/s")


def test_bind_cannot_be_empty() -> None:
    assert error_of({}, {"TINES_BIND": ""}) == "TINES_BIND: bind must not be empty, got ''"


def test_forwarded_allow_ips_accepts_networks_and_star() -> None:
    assert load({"forwarded_allow_ips": "10.0.0.0/8,::1"}, {}).forwarded_allow_ips == ("10.0.0.0/8", "::1")
    assert load({}, {"TINES_FORWARDED_ALLOW_IPS": "*"}).forwarded_allow_ips == ("*",)
    assert error_of({"forwarded_allow_ips": "10.0.0.300"}, {}) == (
        "forwarded_allow_ips must be IP addresses or networks (CIDR), or *, got '10.0.0.300'")
    # Forms Python's ipaddress takes but the workers' parser does not: refused in the master,
    # not in every worker after the start.
    for bad in ("10.0.0.0/255.0.0.0", "fe80::1%eth0"):
        assert error_of({"forwarded_allow_ips": bad}, {}) == (
            f"forwarded_allow_ips must be IP addresses or networks (CIDR), or *, got {bad!r}")


def test_choices_are_case_insensitive_and_listed_when_wrong() -> None:
    assert load({"mpm": "THREAD", "log_level": "Debug"}, {}).mpm == "thread"
    assert load({"mpm": "Event"}, {}).mpm == "event"
    assert error_of({"mpm": "worker"}, {}) == "mpm must be one of prefork, thread, event, got 'worker'"


def test_umask_is_octal() -> None:
    assert load({"umask": "022"}, {}).umask == 0o22
    assert load({"umask": 0o27}, {}).umask == 0o27
    assert error_of({"umask": "999"}, {}) == "umask must be an octal number in 000..777, such as 022, got '999'"


def test_optional_settings_take_an_empty_string_as_unset() -> None:
    cfg = load({}, {"TINES_ACCESS_LOG": "", "TINES_READY_FD": ""})
    assert cfg.access_log is None and cfg.ready_fd is None


def test_numeric_user_and_group_are_taken_as_ids() -> None:
    cfg = load({"user": "1234", "group": "0"}, {})
    assert (cfg.user, cfg.group) == (1234, 0)


def test_user_name_must_exist() -> None:
    assert error_of({"user": "no-such-user-tines"}, {}) == (
        "user must be an existing user name or a numeric id, got 'no-such-user-tines'")


def test_server_header_rejects_line_breaks() -> None:
    assert load({"server_header": ""}, {}).server_header == ""
    assert error_of({"server_header": "a\r\nX: y"}, {}).startswith("server_header must be printable ASCII")


def test_threads_above_one_with_prefork_is_reported_as_ignored() -> None:
    assert config.ignored_settings(load({"threads": "4"}, {})) == [
        "threads 4 (cli) is ignored by mpm prefork, which runs one request at a time per worker: "
        "for app threads use --mpm thread or --mpm event"]
    assert config.ignored_settings(load({}, {"TINES_THREADS": "2", "TINES_MPM": "prefork"}))[0].startswith(
        "threads 2 (env TINES_THREADS) is ignored by mpm prefork")
    assert config.ignored_settings(load({"threads": "1"}, {})) == []
    assert config.ignored_settings(load({"threads": "4", "mpm": "thread"}, {})) == []
    assert config.ignored_settings(load({"threads": "4", "mpm": "event"}, {})) == []


# --- error messages --------------------------------------------------------------------------------


def test_bad_value_on_the_command_line_has_no_prefix() -> None:
    assert error_of({"workers": "x"}, {}) == "workers must be a positive integer, got 'x'"


def test_bad_value_in_the_environment_names_the_variable() -> None:
    assert error_of({}, {"TINES_WORKERS": "x"}) == "TINES_WORKERS: workers must be a positive integer, got 'x'"


def test_bad_value_in_the_default_file_names_it(in_empty_directory: Path) -> None:
    write(in_empty_directory / "tines.toml", "workers = 'x'\n")
    assert error_of({}, {}) == "tines.toml: workers must be a positive integer, got 'x'"


def test_wrong_toml_type_is_reported_with_the_value(in_empty_directory: Path) -> None:
    write(in_empty_directory / "tines.toml", 'threads = "abc"\n')
    assert error_of({}, {}) == "tines.toml: threads must be an integer >= 0, got 'abc'"


def test_toml_bool_is_not_an_integer(in_empty_directory: Path) -> None:
    write(in_empty_directory / "tines.toml", "workers = true\n")
    assert error_of({}, {}) == "tines.toml: workers must be a positive integer, got True"


def test_seconds_reject_negative_and_zero_where_not_allowed() -> None:
    assert error_of({"keepalive_timeout": "-1"}, {}) == "keepalive_timeout must be a number of seconds >= 0, got '-1'"
    assert error_of({"graceful_timeout": "0"}, {}) == "graceful_timeout must be a number of seconds > 0, got '0'"
    assert error_of({"header_timeout": "nan"}, {}) == "header_timeout must be a number of seconds > 0, got 'nan'"


def test_unreadable_config_file() -> None:
    assert error_of({"config": "x.toml"}, {}) == (
        "cannot read config file 'x.toml': [Errno 2] No such file or directory")


def test_toml_syntax_error_gives_the_line(in_empty_directory: Path) -> None:
    write(in_empty_directory / "x.toml", "workers = 2\nthreads = 1\nmpm = = 3\n")
    assert error_of({"config": "x.toml"}, {}) == "config file 'x.toml' line 3: Invalid value"


def test_toml_error_at_the_end_of_the_file_keeps_the_parser_message(in_empty_directory: Path) -> None:
    write(in_empty_directory / "x.toml", "bind = [\n")
    assert error_of({"config": "x.toml"}, {}).startswith("config file 'x.toml': ")


def test_unknown_key_suggests_the_closest_setting(in_empty_directory: Path) -> None:
    write(in_empty_directory / "x.toml", "wokers = 3\n")
    assert error_of({"config": "x.toml"}, {}) == "unknown setting 'wokers' in 'x.toml' (did you mean 'workers'?)"


def test_unknown_key_with_dashes_suggests_the_underscored_name(in_empty_directory: Path) -> None:
    write(in_empty_directory / "x.toml", "keepalive-timeout = 3\n")
    assert error_of({"config": "x.toml"}, {}) == (
        "unknown setting 'keepalive-timeout' in 'x.toml' (did you mean 'keepalive_timeout'?)")


def test_unknown_key_without_a_close_match(in_empty_directory: Path) -> None:
    write(in_empty_directory / "x.toml", "zzzzzz = 3\n")
    assert error_of({"config": "x.toml"}, {}) == "unknown setting 'zzzzzz' in 'x.toml'"


def test_unknown_override_key_is_an_error() -> None:
    assert error_of({"wrokers": 3}, {}) == "unknown setting 'wrokers' (did you mean 'workers'?)"


# --- the command line (subprocess) -----------------------------------------------------------------


def run_tines(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("TINES_")}
    environment["PYTHONPATH"] = PYTHON_DIR + os.pathsep + environment.get("PYTHONPATH", "")
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "tines", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=60)


def test_check_config_prints_values_and_sources(in_empty_directory: Path) -> None:
    write(in_empty_directory / "tines.toml", "threads = 4\n")
    result = run_tines("check-config", "-w", "3", "-b", "[::1]:9000", "--preload", "web:app",
                       cwd=in_empty_directory, env={"TINES_BACKLOG": "64"})
    assert result.returncode == 0, result.stderr
    *table, interface, tls, mode = result.stdout.splitlines()
    assert mode == "mode: fixed: 3 workers (max_workers unset; TTIN/TTOU add or remove one)"
    assert interface.startswith("interface: auto: not known until the app is imported (--check-app imports it)")
    assert tls == "tls: off (no certfile)"
    rows = {line.split()[0]: line.split(None, 1)[1].strip() for line in table}
    assert rows["setting"].split() == ["value", "source"]
    assert rows["workers"].split() == ["3", "cli"]
    assert rows["bind"].split() == ['["[::1]:9000"]', "cli"]
    assert rows["preload"].split() == ["true", "cli"]
    assert rows["app"].split() == ['"web:app"', "cli"]
    assert rows["backlog"].split() == ["64", "env", "TINES_BACKLOG"]
    assert rows["threads"].split() == ["4", "file", "tines.toml"]
    assert rows["mpm"].split() == ['"prefork"', "default"]
    assert set(rows) == {"setting", *SETTINGS}
    # Aligned: every value column starts at the same offset.
    assert len({line.index(line.split()[1]) for line in table}) == 1


def test_check_config_with_a_bad_value_prints_one_line_and_exits_2(in_empty_directory: Path) -> None:
    result = run_tines("check-config", "--workers", "x", cwd=in_empty_directory)
    assert result.returncode == 2
    assert result.stderr == "tines: error: workers must be a positive integer, got 'x'\n"
    assert result.stdout == ""


def test_check_config_with_a_bad_file_exits_2(in_empty_directory: Path) -> None:
    write(in_empty_directory / "tines.toml", "wokers = 2\n")
    result = run_tines("check-config", cwd=in_empty_directory)
    assert result.returncode == 2
    assert result.stderr == (
        "tines: error: unknown setting 'wokers' in 'tines.toml' (did you mean 'workers'?)\n")


def test_unknown_flag_is_one_line_without_usage(in_empty_directory: Path) -> None:
    result = run_tines("serve", "--wokers", "3", "app:app", cwd=in_empty_directory)
    assert result.returncode == 2
    assert result.stderr == "tines: error: unknown option '--wokers' (did you mean '--workers'?)\n"


def test_serve_without_app_explains_the_forms(in_empty_directory: Path) -> None:
    result = run_tines("serve", cwd=in_empty_directory)
    assert result.returncode == 2
    assert result.stderr == "tines: error: serve needs APP (module:attr or path/to/file.py:attr)\n"


def test_missing_command_is_an_error(in_empty_directory: Path) -> None:
    result = run_tines(cwd=in_empty_directory)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("tines: error: ")


def test_help_lists_commands_and_serve_help_all_lists_every_flag(in_empty_directory: Path) -> None:
    top = run_tines("--help", cwd=in_empty_directory)
    assert top.returncode == 0
    assert "serve" in top.stdout and "check-config" in top.stdout
    serve = run_tines("serve", "--help-all", cwd=in_empty_directory)
    assert serve.returncode == 0
    for setting in SETTINGS.values():
        for flag in setting.flags:
            assert flag in serve.stdout
    for section in config.SECTIONS:
        assert f"\n{section}:\n" in serve.stdout
    assert "(default: 2 x CPU cores; env TINES_WORKERS)" in " ".join(serve.stdout.split())


def test_the_serve_parser_alone_reads_and_shows_what_tines_serve_does(capsys: pytest.CaptureFixture[str]) -> None:
    """``tines tune`` reads the flags after its ``--`` with ``serve_parser`` (without ``tines.cli``)."""
    from tines.cli import build_parser
    from tines.serve_cli import serve_parser

    argv = ["app:x", "-w", "3", "--bind", "a:1", "--bind", "b:2", "--no-preload", "-c", "t.toml", "--bogus"]
    whole, whole_unknown = build_parser().parse_known_args(["serve", *argv])
    alone, alone_unknown = serve_parser().parse_known_args(argv)
    assert vars(alone) == {name: value for name, value in vars(whole).items() if name != "command"}
    assert vars(alone)["bind"] == ["a:1", "b:2"] and vars(alone)["preload"] is False
    assert alone_unknown == whole_unknown == ["--bogus"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help-all"])
    assert serve_parser().format_help() == capsys.readouterr().out
    with pytest.raises(SystemExit):
        serve_parser().parse_args(["--help"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    brief, again = capsys.readouterr().out.split("usage: tines serve ")[1:]
    assert brief == again


def test_version(in_empty_directory: Path) -> None:
    result = run_tines("--version", cwd=in_empty_directory)
    assert result.returncode == 0
    assert result.stdout.startswith("tines ")


# --- limits a request cannot fit under -----------------------------------------------------------


def test_max_head_size_below_the_smallest_valid_request_is_refused() -> None:
    smallest = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"
    assert config.MINIMAL_REQUEST == smallest
    assert f"at least {len(smallest)}," in SETTINGS["max_head_size"].doc
    assert load({"max_head_size": str(len(smallest))}, {}).max_head_size == len(smallest)
    assert error_of({"max_head_size": "10"}, {}) == (
        f"max_head_size must be at least {len(smallest)} (the smallest valid HTTP/1.1 request), got '10'")
    assert error_of({}, {"TINES_MAX_HEAD_SIZE": "26"}).startswith(
        "TINES_MAX_HEAD_SIZE: max_head_size must be at least 27")


def test_max_request_line_below_the_smallest_request_line_is_refused() -> None:
    assert load({"max_request_line": "14"}, {}).max_request_line == len("GET / HTTP/1.1")
    assert "at least 14," in SETTINGS["max_request_line"].doc
    assert error_of({"max_request_line": "13"}, {}) == (
        "max_request_line must be at least 14 (the smallest request line, 'GET / HTTP/1.1'), got '13'")


# --- unknown environment variables ---------------------------------------------------------------


def test_unknown_tines_env_vars_are_warned_about_with_the_closest_name() -> None:
    environ = {"TINES_WOKERS": "3", "TINES_WORKERS": "2", "TINES_CONFIG": "x.toml",
               "TINES_ZZZZZZ": "1", "HOME": "/root", "XTINES_WOKERS": "1"}
    assert config.environment_warnings(environ) == [
        "unknown environment variable TINES_WOKERS ignored (did you mean TINES_WORKERS?)",
        "unknown environment variable TINES_ZZZZZZ ignored",
    ]


def test_an_unknown_env_var_is_a_warning_on_stderr_not_an_error(in_empty_directory: Path) -> None:
    result = run_tines("check-config", "web:app", cwd=in_empty_directory,
                       env={"TINES_KEEPALIVE": "10"})
    assert result.returncode == 0, result.stderr
    assert result.stderr == ("tines: warning: unknown environment variable TINES_KEEPALIVE ignored"
                             " (did you mean TINES_KEEPALIVE_TIMEOUT?)\n")


def test_the_body_sizes_take_units_as_the_other_byte_settings_do() -> None:
    cfg = load({"max_body_size": "1.5MiB", "max_body_drain": "64KiB"}, {})
    assert (cfg.max_body_size, cfg.max_body_drain) == (3 << 19, 64 << 10)
    assert load({}, {"TINES_MAX_BODY_SIZE": "2G"}).max_body_size == 2 << 30
    assert load({"max_body_size": 0}, {}).max_body_size == 0
    assert error_of({"max_body_drain": "64 parsecs"}, {}).startswith("max_body_drain must be a size in bytes")


# --- WebSocket limits that depend on other settings -----------------------------------------------


def test_the_websocket_ceiling_defaults_to_90_percent_of_max_connections_rounded_down() -> None:
    assert load({}, {}).ws_max_connections == 9000
    assert load({"max_connections": "100"}, {}).ws_max_connections == 90
    assert load({"max_connections": "15"}, {}).ws_max_connections == 13
    # One connection: no room for a WebSocket beside it.
    assert load({"max_connections": "1"}, {}).ws_max_connections == 0
    assert load({"max_connections": "100", "ws_max_connections": "99"}, {}).ws_max_connections == 99


def test_a_websocket_ceiling_at_or_above_max_connections_is_refused_naming_both() -> None:
    for ceiling in ("100", "101"):
        message = error_of({"max_connections": "100", "ws_max_connections": ceiling}, {})
        assert message.startswith(f"ws_max_connections {ceiling} (cli) must be below max_connections 100 (cli)")
    # The default max_connections counts too, wherever the ceiling comes from.
    message = error_of({}, {"TINES_WS_MAX_CONNECTIONS": "10000"})
    assert message.startswith("ws_max_connections 10000 (env TINES_WS_MAX_CONNECTIONS) must be below "
                              "max_connections 10000 (default)")


def test_a_receive_budget_smaller_than_a_message_is_refused() -> None:
    message = error_of({"ws_receive_buffer_total": "8MiB"}, {})
    assert message.startswith("ws_receive_buffer_total 8388608 (cli) must be at least ws_max_message_size "
                              "16777216 (default)")
    assert load({"ws_receive_buffer_total": "1MiB", "ws_max_message_size": "1MiB"}, {}).ws_receive_buffer_total \
        == 1024 * 1024


def test_the_websocket_idle_timeout_is_off_by_default_and_takes_seconds() -> None:
    assert load({}, {}).ws_idle_timeout == 0
    assert load({"ws_idle_timeout": "2.5"}, {}).ws_idle_timeout == 2.5
    assert "ws_idle_timeout" in error_of({"ws_idle_timeout": "-1"}, {})
    assert "ws_receive_buffer_timeout" in error_of({"ws_receive_buffer_timeout": "0"}, {})
