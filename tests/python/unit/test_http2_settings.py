"""The HTTP/2 settings (issue 38), declared once in the registry: the ``http2`` switch and the
``h2_*`` limits with their RFC 9113 ranges (one line, exit 2), ``h2`` in ALPN, the ``h2c:`` and
``http1+h2c:`` bind prefixes and the mode each listener keeps (bound, inherited from systemd or
from an old master on USR2), the worker spec's ``h2c_listeners``, the warnings about settings that
do nothing, and the peers' HTTP/2 flags in the migration table."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tines.config import SETTINGS, ignored_settings, load, migration_hint, peers, render_markdown
from tines.errors import ConfigError
from tines.serve_cli import add_settings, resolve_peer_flags
from tines.sockets import FDNAMES, bind_all, h2c_modes, tls_flags
from tines.worker import WorkerSpec

ROOT = Path(__file__).resolve().parents[3]

DEFAULTS = {"http2": True, "h2_max_concurrent_streams": 100, "h2_initial_window_size": 262144,
            "h2_connection_window_size": 1048576, "h2_max_frame_size": 16384, "h2_max_header_list_size": 65536,
            "h2_header_table_size": 4096, "h2_max_reset_rate": 100, "h2_max_control_rate": 1000}
"""The names and defaults the brief fixed (decision 8)."""


def error_of(overrides: dict[str, object], environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load(overrides, environ or {})
    return str(caught.value)


# --- the registry ---------------------------------------------------------------------------------


def test_the_http2_section_holds_the_names_and_defaults_of_the_contract() -> None:
    cfg = load({}, {})
    assert {name: cfg.value(name) for name in DEFAULTS} == DEFAULTS
    assert [setting.name for setting in SETTINGS.values() if setting.section == "HTTP/2"] == list(DEFAULTS)
    assert all(SETTINGS[name].worker for name in DEFAULTS)  # the worker's H2Config reads them
    assert SETTINGS["http2"].is_flag and SETTINGS["http2"].flags == ("--http2",)
    assert {name: SETTINGS[name].flags[0] for name in DEFAULTS if name != "http2"} == {
        name: "--" + name.replace("_", "-") for name in DEFAULTS if name != "http2"}
    # The other spellings are gunicorn's aliases (--http2-max-frame-size), from its row.
    assert all(peers.by_flag(flag) for name in DEFAULTS for flag in SETTINGS[name].flags[1:])


def test_every_source_spells_them() -> None:
    assert load({"http2": False}, {}).http2 is False
    assert load({}, {"TINES_HTTP2": "off", "TINES_H2_MAX_FRAME_SIZE": "32768"}).h2_max_frame_size == 32768
    assert load({}, {"TINES_HTTP2": "off"}).http2 is False


@pytest.mark.parametrize("name, lowest, highest", [
    ("h2_max_concurrent_streams", 1, 2**32 - 1),
    ("h2_initial_window_size", 65535, 2**31 - 1),
    ("h2_connection_window_size", 65535, 2**31 - 1),
    ("h2_max_frame_size", 16384, 16777215),
    ("h2_max_header_list_size", 1, 2**32 - 1),
    ("h2_header_table_size", 0, 2**32 - 1),
    ("h2_max_reset_rate", 1, 2**32 - 1),
    ("h2_max_control_rate", 1, 2**32 - 1),
])
def test_each_limit_takes_its_range_and_refuses_one_past_either_end(name: str, lowest: int, highest: int) -> None:
    assert load({name: str(lowest)}, {}).value(name) == lowest
    assert load({name: highest}, {}).value(name) == highest
    for wrong in (lowest - 1, highest + 1):
        message = error_of({name: str(wrong)})
        assert message.startswith(f"{name} must be an integer in {lowest}..{highest}"), message
        assert message.endswith(f", got '{wrong}'") and "\n" not in message
    assert error_of({name: "lots"}).endswith(", got 'lots'")
    assert error_of({name: True}).startswith(f"{name} must be an integer")


def test_the_refusals_say_why_the_range_is_what_it_is() -> None:
    assert error_of({"h2_initial_window_size": 2**31}) == (
        "h2_initial_window_size must be an integer in 65535..2147483647 (HTTP/2's own initial window, "
        "65535, is the least: RFC 9113 6.9.1 caps a window at 2^31-1), got 2147483648")
    assert error_of({"h2_connection_window_size": "65534"}) == (
        "h2_connection_window_size must be an integer in 65535..2147483647 (RFC 9113 6.9: it starts at "
        "65535, which SETTINGS cannot lower, and is at most 2^31-1), got '65534'")
    assert error_of({"h2_max_frame_size": "1024"}) == (
        "h2_max_frame_size must be an integer in 16384..16777215 (RFC 9113 6.5.2), got '1024'")


def test_a_bad_value_on_the_command_line_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = run_tines("check-config", "--h2-max-frame-size", "100", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == ("tines: error: h2_max_frame_size must be an integer in 16384..16777215 "
                             "(RFC 9113 6.5.2), got '100'\n")
    result = run_tines("serve", "--bind", "h2:127.0.0.1:0", "app:app", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == ("tines: error: bind has an unknown prefix 'h2:': the prefixes are plain:, h2c: "
                             "and http1+h2c:, got 'h2:127.0.0.1:0'\n")


def test_no_http2_is_a_flag_of_serve() -> None:
    parser = argparse.ArgumentParser()
    add_settings(parser)
    assert vars(parser.parse_args(["--no-http2"]))["http2"] is False
    assert vars(parser.parse_args(["--h2-max-concurrent-streams", "8"]))["h2_max_concurrent_streams"] == "8"


# --- binds ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("address", [
    "h2c:127.0.0.1:8000", "h2c:[::1]:80", "h2c:localhost:0", "h2c:unix:/run/a.sock", "h2c:fd://3",
    "http1+h2c:0.0.0.0:8000", "http1+h2c:unix:/run/a.sock", "http1+h2c:fd://4",
])
def test_a_bind_may_speak_h2c_or_both_on_tcp_unix_and_fd(address: str) -> None:
    assert load({"bind": [address]}, {}).bind == (address,)


@pytest.mark.parametrize("address, reason", [
    ("h2:127.0.0.1:80", "has an unknown prefix 'h2:': the prefixes are plain:, h2c: and http1+h2c:"),
    ("https:[::1]:80", "has an unknown prefix 'https:': the prefixes are plain:, h2c: and http1+h2c:"),
    ("h2c+http1:unix:/x", "has an unknown prefix 'h2c+http1:': the prefixes are plain:, h2c: and http1+h2c:"),
    ("h2c:plain:127.0.0.1:80", "must be HOST:PORT, [IPv6]:PORT, unix:/path or fd://N"),
    ("plain:h2c:127.0.0.1:80", "must be HOST:PORT, [IPv6]:PORT, unix:/path or fd://N"),
    ("http1+h2c:h2c:127.0.0.1:80", "must be HOST:PORT, [IPv6]:PORT, unix:/path or fd://N"),
    ("h2c:", "must be HOST:PORT, [IPv6]:PORT, unix:/path or fd://N"),
    ("h2c:127.0.0.1:99999", "port must be a number in 0..65535"),
    ("h2c:unix:", "unix: needs a path"),
    ("fe80::1:80", "needs brackets around an IPv6 address, as in [::1]:8000"),  # not taken for a prefix
])
def test_a_bad_bind_prefix_is_refused_in_one_line(address: str, reason: str) -> None:
    assert error_of({"bind": [address]}) == f"bind {reason}, got {address!r}"


def test_the_status_listener_takes_no_h2c_mark() -> None:
    assert error_of({"status_bind": "h2c:127.0.0.1:9000"}) == (
        "status_bind needs no h2c: (the status listener always speaks plain HTTP), got 'h2c:127.0.0.1:9000'")
    assert error_of({"status_bind": "http1+h2c:unix:/s"}) == (
        "status_bind needs no http1+h2c: (the status listener always speaks plain HTTP), got 'http1+h2c:unix:/s'")


def test_h2c_listeners_are_cleartext_even_with_tls_and_carry_their_mode(tmp_path: Path) -> None:
    listeners = bind_all(["127.0.0.1:0", "h2c:127.0.0.1:0", "http1+h2c:127.0.0.1:0", "plain:127.0.0.1:0",
                          f"h2c:unix:{tmp_path / 'a.sock'}", f"unix:{tmp_path / 'b.sock'}"], 16)
    try:
        assert h2c_modes(listeners) == ["off", "only", "both", "off", "only", "off"]
        assert tls_flags(listeners, True) == [True, False, False, False, False, False]
        assert [listener.fdname for listener in listeners] == [None, "h2c", "http1+h2c", "plain", "h2c", None]
        assert not listeners[1].address.startswith("h2c:")  # the address as bound
        assert listeners[4].address == f"unix:{tmp_path / 'a.sock'}"
    finally:
        for listener in listeners:
            listener.close()


def test_an_inherited_fd_takes_the_mode_its_bind_gives_it() -> None:
    sockets = []
    for _ in range(2):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(4)
        sockets.append(sock.detach())
    listeners = bind_all([f"h2c:fd://{sockets[0]}", f"http1+h2c:fd://{sockets[1]}"], 16)
    try:
        assert h2c_modes(listeners) == ["only", "both"]
        assert tls_flags(listeners, True) == [False, False]
    finally:
        for listener in listeners:
            listener.close()


SOCKET_ACTIVATION = """
import fcntl, os, socket, sys
from tines.sockets import bind_all, h2c_modes, tls_flags
sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(5)]
moved = []
for sock in sockets:
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    moved.append(fcntl.fcntl(sock.fileno(), fcntl.F_DUPFD, 100))
    sock.close()
for number, fd in zip((3, 4, 5, 6, 7), moved):
    os.dup2(fd, number)
    os.close(fd)
os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS="5", LISTEN_FDNAMES=sys.argv[1])
address = socket.socket(fileno=os.dup(6)).getsockname()
listeners = bind_all(["http1+h2c:%s:%d" % address, "h2c:fd://7", "0.0.0.0:1"], 16)
print(h2c_modes(listeners), tls_flags(listeners, True), [listener.fdname for listener in listeners])
"""


def test_socket_activation_and_usr2_keep_each_listeners_mode_by_name_or_by_bind() -> None:
    """An inherited socket's mode comes from its LISTEN_FDNAMES name (systemd's
    FileDescriptorName=, or what an old master names it on USR2: ``Listener.fdname``), else from a
    prefixed bind of its address or fd number; unnamed and unmarked, it speaks TLS."""
    result = subprocess.run([sys.executable, "-c", SOCKET_ACTIVATION, "h2c:http1+h2c:tines:web:web"],
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "python")})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == (
        "['only', 'both', 'off', 'both', 'only'] [False, False, True, False, False] "
        "['h2c', 'http1+h2c', None, 'http1+h2c', 'h2c']")
    assert FDNAMES == {"plain": "off", "h2c": "only", "http1+h2c": "both"}


def test_the_worker_spec_carries_a_mode_per_listener() -> None:
    spec = WorkerSpec(settings={}, listeners=[5, 6], scoreboard=None, slot=0, h2c_listeners=["only", "both"])
    assert spec.h2c_listeners == ["only", "both"]
    assert WorkerSpec({}, [5, 6], None, 0).h2c_listeners == ["off", "off"]
    with pytest.raises(ValueError, match="h2c_listeners has 1 modes for 2 listeners"):
        WorkerSpec(settings={}, listeners=[5, 6], scoreboard=None, slot=0, h2c_listeners=["only"])
    with pytest.raises(ValueError, match="h2c_listeners must be modes of off, only, both"):
        WorkerSpec(settings={}, listeners=[5], scoreboard=None, slot=0, h2c_listeners=["h2"])


# --- what does nothing ----------------------------------------------------------------------------


def test_limits_with_no_listener_speaking_http2_are_said_to_be_ignored() -> None:
    assert ignored_settings(load({"h2_max_reset_rate": "5"}, {})) == [
        "h2_max_reset_rate (cli) is ignored: no listener speaks HTTP/2 (no bind speaks TLS with h2 in alpn, "
        "nor is h2c: or http1+h2c:)"]
    assert ignored_settings(load({"h2_max_reset_rate": "5", "bind": ["http1+h2c:127.0.0.1:0"]}, {})) == []
    assert ignored_settings(load({"h2_max_reset_rate": "5", "certfile": "c.pem"}, {})) == []
    assert ignored_settings(load({"h2_max_reset_rate": "5", "certfile": "c.pem", "alpn": "http/1.1"}, {})) == [
        "h2_max_reset_rate (cli) is ignored: no listener speaks HTTP/2 (no bind speaks TLS with h2 in alpn, "
        "nor is h2c: or http1+h2c:)"]
    assert ignored_settings(load({"h2_max_reset_rate": "5", "certfile": "c.pem", "http2": False}, {})) == [
        "h2_max_reset_rate (cli) is ignored: no listener speaks HTTP/2 (http2 is off and no bind is h2c: or "
        "http1+h2c:)"]
    # http2 off leaves an h2c bind alone: the limits then apply to it.
    assert ignored_settings(load({"h2_max_reset_rate": "5", "certfile": "c.pem", "http2": False,
                                  "bind": ["0.0.0.0:443", "h2c:127.0.0.1:0"]}, {})) == []


def test_http2_without_certfile_is_said_to_be_ignored() -> None:
    assert ignored_settings(load({"http2": False}, {})) == [
        "http2 (cli) is ignored without certfile: it offers h2 on TLS listeners (cleartext HTTP/2 is a bind "
        "written h2c: or http1+h2c:)"]
    assert ignored_settings(load({}, {})) == []


# --- coming from another server -------------------------------------------------------------------


def test_uvicorn_http_flag_is_taken_and_granian_http_is_in_the_docs() -> None:
    # uvicorn's --http chooses its parser: Tines' is its own, so it is taken with nothing to do.
    warnings = resolve_peer_flags([("--http", "h11")], ()).warnings
    assert warnings == ["uvicorn's --http: nothing to do: the HTTP/1.1 parser and HTTP/2 are Tines' own"]
    assert migration_hint("--http2") is None and "--http2" in SETTINGS["http2"].flags  # uvicorn's flag is Tines' own
    text = render_markdown()
    assert ("| Granian | `http` (`--http`: `auto` taken as uvicorn's, with nothing to do; `1` and `2` refused with "
            "this answer) | not needed: ") in text


@pytest.mark.parametrize("flag, answer", [
    ("--http2-initial-connection-window-size", "(Granian): use --h2-connection-window-size"),
    ("--http2-initial-stream-window-size", "(Granian): use --h2-initial-window-size"),
    ("--http2-max-headers-size", "(Granian): use --h2-max-header-list-size"),
    ("--http2-adaptive-window", "(Granian): not supported: the windows are fixed (--h2-initial-window-size per "
     "stream, --h2-connection-window-size per connection) and reopen as the body is read"),
    ("--insecure-bind", "(Hypercorn): use --bind with plain:HOST:PORT beside TLS binds (http1+h2c:HOST:PORT for "
     "h2c too, as Hypercorn's)"),
])
def test_granian_and_hypercorn_http2_flags_name_the_setting(flag: str, answer: str) -> None:
    assert migration_hint(flag) == answer


@pytest.mark.parametrize("flag, setting", [
    ("--http2-max-concurrent-streams", "h2_max_concurrent_streams"),  # gunicorn's and Granian's
    ("--http2-max-frame-size", "h2_max_frame_size"),
])
def test_gunicorn_http2_flags_are_aliases(flag: str, setting: str) -> None:
    assert flag in SETTINGS[setting].flags


@pytest.mark.parametrize("flag", [
    "--http2-adaptive-window", "--no-http2-adaptive-window", "--http2-initial-connection-window-size",
    "--http2-initial-stream-window-size", "--http2-keep-alive-interval", "--http2-keep-alive-timeout",
    "--http2-max-headers-size", "--http2-max-send-buffer-size", "--insecure-bind",
])
def test_every_peer_http2_flag_is_covered(flag: str) -> None:
    assert migration_hint(flag) is not None


def run_tines(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("TINES_")}
    environment["PYTHONPATH"] = str(ROOT / "python") + os.pathsep + environment.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "tines", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=60)
