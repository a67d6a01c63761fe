"""The "coming from another server" table: one set of rows gives docs/settings.md its table and
``tines serve`` its answer to a gunicorn or uvicorn flag Tines spells differently or lacks."""

from __future__ import annotations

import re

import pytest

from tines.cli import _unknown_message
from tines.config import EQUIVALENTS, SETTINGS, load, migration_hint, render_markdown

TINES_FLAGS = {flag for setting in SETTINGS.values() for flag in setting.flags} | {
    f"--no-{flag[2:]}" for setting in SETTINGS.values() if setting.is_flag for flag in setting.flags
    if flag.startswith("--")} | {"-c", "--config", "-h", "--help", "--version"}


def test_the_three_reported_flags_get_what_tines_has_instead() -> None:
    assert migration_hint("--timeout") == (
        "(gunicorn): use --request-timeout: an app thread held this long without progress gets its "
        "worker's stacks logged and the worker replaced (a stuck request, not a silent worker: a "
        "streaming response that keeps producing is not cut; on thread and event the worker "
        "drains, its other requests finishing); waits on the client have "
        "--header-timeout, --body-timeout, --send-timeout; a slow boot --boot-timeout")
    assert "--reload" in TINES_FLAGS and migration_hint("--reload") is None  # the reload setting
    assert migration_hint("--reload-dir") == (
        "(uvicorn): not supported: --reload watches the directory the app is imported from "
        "(docs/signals.md)")
    assert migration_hint("--pid") == "(gunicorn): use --pid-file"


def test_renamed_settings_are_given_as_tines_flags_with_their_values() -> None:
    assert migration_hint("--keep-alive") == "(gunicorn): use --keepalive-timeout"
    assert migration_hint("--timeout-keep-alive") == "(uvicorn): use --keepalive-timeout"
    assert migration_hint("--limit-request-fields") == "(gunicorn): use --max-headers"
    assert migration_hint("--no-server-header") == (
        "(uvicorn): use --server-header '' (an empty value omits the header)")
    assert migration_hint("-k") == migration_hint("--worker-class") == (
        "(gunicorn): use --mpm prefork for sync, --mpm thread (the same machine as --mpm event) with "
        "--threads for gthread; an ASGI app (uvicorn.workers.UvicornWorker) needs no flag, and there is no "
        "gevent or eventlet worker")


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
    assert migration_hint(flag) is not None


@pytest.mark.parametrize("flag, setting", [
    ("--certfile", "certfile"), ("--keyfile", "keyfile"),  # gunicorn's
    ("--ssl-certfile", "certfile"), ("--ssl-keyfile", "keyfile"),  # uvicorn's
])
def test_gunicorn_and_uvicorn_tls_flags_are_tines_flags(flag: str, setting: str) -> None:
    """Once answered "not supported yet: terminate TLS in a proxy" (issue 37): now the settings."""
    assert flag in SETTINGS[setting].flags
    assert migration_hint(flag) is None


def test_tls_rows_say_what_to_use_instead() -> None:
    assert migration_hint("--ssl-keyfile-password") == (
        "(uvicorn): not on the command line (every user can read it): --keyfile-password-file, or "
        "TINES_KEYFILE_PASSWORD or keyfile_password in the config file")
    assert migration_hint("--cert-reqs") == (
        "(gunicorn): use --client-cert none, optional, required (optional also serves a client whose "
        "certificate does not verify, and tells the app why)")
    assert migration_hint("--ca-certs") == migration_hint("--ssl-ca-certs").replace("uvicorn", "gunicorn") == (
        "(gunicorn): use --client-ca")
    assert migration_hint("--ssl-version") == "(gunicorn, uvicorn): use --tls-min-version (TLS 1.0 and 1.1 are not offered)"
    assert "IANA names" in str(migration_hint("--ciphers")) and "IANA names" in str(migration_hint("--ssl-ciphers"))
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
    assert ("| gunicorn | `timeout`: a worker silent this many seconds is killed (`-t`, `--timeout`) | "
            "`request_timeout`: an app thread held this long") in text
    assert "| uWSGI | `harakiri` | `request_timeout` (also answers 503" in text
    assert len([line for line in text.splitlines() if line.startswith("| gunicorn |")]) == len(
        [row for row in EQUIVALENTS if row.server == "gunicorn"])


def test_the_unknown_option_message_prefers_the_table_to_spelling() -> None:
    assert _unknown_message(["--timeout", "30"]) == "unknown option '--timeout' " + str(migration_hint("--timeout"))
    assert _unknown_message(["--pid=x.pid"]) == "unknown option '--pid' " + str(migration_hint("--pid"))
    assert _unknown_message(["--wokers"]) == "unknown option '--wokers' (did you mean '--workers'?)"
