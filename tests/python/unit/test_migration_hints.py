"""The "coming from another server" table: one set of rows gives docs/settings.md its table and
``tines serve`` its answer to another server's flag Tines spells differently or lacks (gunicorn's
and uvicorn's rows come from ``tines.config.peers``: tests/python/unit/test_peer_flags.py)."""

from __future__ import annotations

import re

import pytest

from tines.cli import _unknown_message
from tines.config import EQUIVALENTS, SETTINGS, load, migration_hint, peers, render_markdown
from tines.serve_cli import resolve_peer_flags

TINES_FLAGS = {flag for setting in SETTINGS.values() for flag in setting.flags} | {
    f"--no-{flag[2:]}" for setting in SETTINGS.values() if setting.is_flag for flag in setting.flags
    if flag.startswith("--")} | {"-c", "--config", "-h", "--help", "--version"}


def test_the_three_reported_flags_are_taken_or_answered() -> None:
    # gunicorn's and uvicorn's flags go through tines.config.peers now (test_peer_flags.py).
    assert [row.name for row in peers.by_flag("--timeout")] == ["timeout"] and migration_hint("--timeout") is None
    assert "--reload" in TINES_FLAGS and migration_hint("--reload") is None  # the reload setting
    assert _unknown_message(["--reload-dir"]) == (
        "unknown option '--reload-dir' (uvicorn): none: --reload watches the tree the app is imported from "
        "(docs/signals.md); --reload-include and --reload-exclude choose its files")
    assert "--pid" in SETTINGS["pid_file"].flags and migration_hint("--pid") is None


def test_renamed_settings_are_aliases_or_given_as_tines_settings() -> None:
    assert "--keep-alive" in SETTINGS["keepalive_timeout"].flags
    assert "--timeout-keep-alive" in SETTINGS["keepalive_timeout"].flags
    # gunicorn's --limit-request-fields is its peer row's (0, no limit, gets the row's hint), not an alias.
    assert "--limit-request-fields" not in SETTINGS["max_headers"].flags
    assert resolve_peer_flags([("--limit-request-fields", "50")], ()).settings == {"max_headers": "50"}
    assert resolve_peer_flags([("--no-server-header", False)], ()).settings == {"server_header": ""}
    assert resolve_peer_flags([("-k", "sync")], ()).settings == {"mpm": "prefork"}
    assert resolve_peer_flags([("--worker-class", "gthread")], ()).settings == {"mpm": "thread"}


def test_a_flag_outside_the_table_gets_no_hint() -> None:
    assert migration_hint("--wokers") is None
    assert migration_hint("--workers") is None


def test_every_reference_names_a_setting_and_every_value_is_valid() -> None:
    for row in EQUIVALENTS:
        for planned, name, equals, value in re.findall(r"\{(planned:)?([a-z_][a-z0-9_]*)(?:(=)([^}]*))?\}", row.ours):
            if planned:
                # When it lands, the row must name the real setting instead.
                assert name not in SETTINGS, f"{name} exists now: write {{{name}}} in {row}"
                continue
            assert name in SETTINGS, row
            if equals:
                SETTINGS[name].to_value(value)


def test_their_flags_are_ones_tines_does_not_accept() -> None:
    # A flag Tines accepts never reaches the hint, so listing it would be a claim nobody checks.
    for row in EQUIVALENTS:
        assert not set(row.flags) & TINES_FLAGS, row


def test_a_flag_in_several_rows_gets_one_answer() -> None:
    answers: dict[str, set[str]] = {}
    for row in EQUIVALENTS:
        for flag in row.flags:
            answers.setdefault(flag, set()).add(row.ours)
    assert all(len(ours) == 1 for ours in answers.values()), answers


@pytest.mark.parametrize("flag", [
    "--timeout", "-t", "--reload-dir", "--reload-engine", "--reload-delay", "--pid", "-p", "--daemon", "-D", "--worker-class", "-k",
    "--worker-connections", "--capture-output", "--limit-request-line",
    "--limit-request-fields", "--keep-alive", "--access-logfile", "--error-logfile",
    "--host", "--port", "--uds", "--proxy-headers", "--no-proxy-headers", "--timeout-keep-alive",
    "--limit-concurrency", "--limit-max-requests",
    "--timeout-graceful-shutdown", "--no-access-log", "--app-dir",
    "--ca-certs", "--cert-reqs", "--ssl-version", "--ciphers", "--do-handshake-on-connect",
    "--suppress-ragged-eofs", "--ssl-keyfile-password", "--ssl-cert-reqs", "--ssl-ca-certs", "--ssl-ciphers",
])
def test_common_gunicorn_and_uvicorn_flags_are_covered(flag: str) -> None:
    assert flag in TINES_FLAGS or peers.by_flag(flag)


@pytest.mark.parametrize("flag, setting", [
    ("--certfile", "certfile"), ("--keyfile", "keyfile"),  # gunicorn's
    ("--ssl-certfile", "certfile"), ("--ssl-keyfile", "keyfile"),  # uvicorn's
])
def test_gunicorn_and_uvicorn_tls_flags_are_tines_flags(flag: str, setting: str) -> None:
    """Once answered "not supported yet: terminate TLS in a proxy" (issue 37): now the settings."""
    assert flag in SETTINGS[setting].flags
    assert migration_hint(flag) is None


def test_tls_rows_say_what_to_use_instead() -> None:
    assert _unknown_message(["--ssl-keyfile-password"]) == (
        "unknown option '--ssl-keyfile-password' (uvicorn): none on the command line (every user can read it): "
        "--keyfile-password-file, or TINES_KEYFILE_PASSWORD")
    assert resolve_peer_flags([("--cert-reqs", "1")], ()).settings == {"client_cert": "optional"}
    assert resolve_peer_flags([("--ssl-cert-reqs", "2")], ()).settings == {"client_cert": "required"}
    assert "--ca-certs" in SETTINGS["client_ca"].flags and "--ssl-ca-certs" in SETTINGS["client_ca"].flags
    assert _unknown_message(["--ssl-version"]) == (
        "unknown option '--ssl-version' (gunicorn, uvicorn): none as an ssl module constant: --tls-min-version "
        "(1.2 or 1.3; 1.0 and 1.1 are never offered)")
    assert "IANA names" in _unknown_message(["--ciphers"]) and "IANA names" in _unknown_message(["--ssl-ciphers"])
    text = render_markdown()
    assert "| uWSGI | `https-socket` (`ADDRESS,CERT,KEY`), `https-socket-req-client-ca` | `bind` with `certfile`" in text
    assert "terminate TLS in a proxy" not in text


def test_the_settings_it_suggests_are_accepted_as_written() -> None:
    cfg = load({"forwarded_allow_ips": [""], "server_header": "", "keepalive_timeout": "0"}, {})
    assert (cfg.forwarded_allow_ips, cfg.server_header, cfg.keepalive_timeout) == ((), "", 0.0)


def test_the_docs_table_is_rendered_from_the_same_rows() -> None:
    text = render_markdown()
    assert "| gunicorn | `keepalive` (`--keep-alive`) | `keepalive_timeout` |" in text
    assert "| uvicorn | `proxy_headers` (`--proxy-headers`, `--no-proxy-headers`) |" in text
    assert "| Apache | `KeepAlive Off` | `keepalive_timeout = 0` |" in text
    assert ("| gunicorn | `timeout` (`-t`, `--timeout`) | `boot_timeout`, and `request_timeout` with "
            "`-k sync`; ") in text
    assert "| uWSGI | `harakiri` | `request_timeout` (also answers 503" in text
    assert len([line for line in text.splitlines() if line.startswith("| gunicorn |")]) == len(
        [row for row in EQUIVALENTS if row.server == "gunicorn"])


def test_the_unknown_option_message_prefers_the_table_to_spelling() -> None:
    assert _unknown_message(["--check-static", "x"]) == "unknown option '--check-static' " + str(migration_hint("--check-static"))
    assert _unknown_message(["--static-map=/s=d"]) == "unknown option '--static-map' " + str(migration_hint("--static-map"))
    assert _unknown_message(["--wokers"]) == "unknown option '--wokers' (did you mean '--workers'?)"
