"""Each HTTP/2 flood met with its documented answer (docs/http2.md) on every MPM, while a
normal client on another connection is served before, during and after it: rapid reset
(HEADERS then RST_STREAM, CVE-2023-44487) past ``h2_max_reset_rate``; PING, SETTINGS, empty
DATA and WINDOW_UPDATE floods past ``h2_max_control_rate``: GOAWAY ENHANCE_YOUR_CALM. A header
block past ``h2_max_header_list_size`` (CVE-2024-27316): the same GOAWAY before the block is
decoded (the block is not valid HPACK, which decoding would answer with COMPRESSION_ERROR), and
a CONTINUATION flood is stopped before its END_HEADERS ever comes. A zero window that never
opens: the stream ends at ``send_timeout`` and the app was not drained into memory.

The limits are set low so each flood is small: a limit is per second averaged over 10 s, so
a burst of ten times the rate passes and the floods here send well past that, in batches,
stopping at the server's answer. Frames are written raw (tests/python/h2_frames.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hpack import NeverIndexedHeaderTuple
from h2_frames import ENHANCE_YOUR_CALM, ERROR_NAMES, H2Connection, ping, rst_stream
from h2_tools import MPM_IDS, MPMS, WSGI, serve_h2c
from hyperframe.frame import (ContinuationFrame, DataFrame, Frame, GoAwayFrame, HeadersFrame, RstStreamFrame,
                              SettingsFrame, WindowUpdateFrame)

from conftest import load_app_module

APP = load_app_module("h2_app")
RESET_RATE = 5
CONTROL_RATE = 10
HEADER_LIST = 4096
LIMITS = ("--h2-max-reset-rate", str(RESET_RATE), "--h2-max-control-rate", str(CONTROL_RATE),
          "--h2-max-header-list-size", str(HEADER_LIST), "--send-timeout", "1")
BATCHES = 20
"""A flood's most batches: each batch alone is past the 10-second budget."""


def served(mpm: tuple[str, ...]) -> tuple[str, ...]:
    return (WSGI, *mpm)


def answer(connection: H2Connection) -> GoAwayFrame | None:
    """The GOAWAY already received, if any (no wait)."""
    with connection.condition:
        return next((frame for frame in connection.frames if isinstance(frame, GoAwayFrame)), None)


def flood(port: int, batch: Callable[[H2Connection], list[Frame]],
          opening: Callable[[H2Connection], None] | None = None) -> tuple[H2Connection, GoAwayFrame | None]:
    """A normal client served while another connection sends ``batch`` after batch until the
    server answers (GOAWAY or close); the flooding connection, closed, and its GOAWAY."""
    with H2Connection(port) as normal:
        normal.settle()
        assert normal.request("/").body == APP.HELLO
        attacker = H2Connection(port)
        try:
            attacker.settle()
            if opening is not None:
                opening(attacker)
            for _ in range(BATCHES):
                if answer(attacker) is not None or attacker.closed or not attacker.send(*batch(attacker)):
                    break
                served_meanwhile = normal.request("/")
                assert (served_meanwhile.status, served_meanwhile.body) == (200, APP.HELLO), normal.describe()
            goaway = attacker.goaway()
            attacker.wait_closed()
        finally:
            attacker.close()
        # The normal connection is untouched by the other's answer.
        after = normal.request("/")
        assert (after.status, after.body, after.reset) == (200, APP.HELLO, None), normal.describe()
        assert answer(normal) is None, normal.describe()
    return attacker, goaway


def assert_calm(attacker: H2Connection, goaway: GoAwayFrame | None) -> None:
    assert goaway is not None, f"closed without GOAWAY: {attacker.describe()}"
    assert goaway.error_code == ENHANCE_YOUR_CALM, \
        f"{ERROR_NAMES.get(goaway.error_code, goaway.error_code)}: {attacker.describe()}"


def request_headers(connection: H2Connection, stream_id: int, end_stream: bool = True,
                    method: bytes = b"GET") -> HeadersFrame:
    return connection.headers_frame(stream_id, [(b":method", method), (b":scheme", b"http"),
                                                (b":authority", b"localhost"), (b":path", b"/")], end_stream)


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_rapid_reset_is_answered_with_enhance_your_calm(tines_server: Any, mpm: tuple[str, ...]) -> None:
    _, port = serve_h2c(tines_server, served(mpm), *LIMITS)

    def batch(connection: H2Connection) -> list[Frame]:
        frames: list[Frame] = []
        for _ in range(RESET_RATE * 10 + 10):
            stream_id = connection.new_stream()
            frames += [request_headers(connection, stream_id), rst_stream(stream_id)]
        return frames

    assert_calm(*flood(port, batch))


CONTROL_FLOODS: dict[str, Callable[[H2Connection], list[Frame]]] = {
    "ping": lambda connection: [ping(n.to_bytes(8, "big")) for n in range(CONTROL_RATE * 10 + 10)],
    "settings": lambda connection: [SettingsFrame(0) for _ in range(CONTROL_RATE * 10 + 10)],
    "window_update": lambda connection: [WindowUpdateFrame(0, 1) for _ in range(CONTROL_RATE * 10 + 10)],
    "empty_data": lambda connection: [DataFrame(1, b"") for _ in range(CONTROL_RATE * 10 + 10)],
}


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
@pytest.mark.parametrize("kind", list(CONTROL_FLOODS))
def test_a_control_frame_flood_is_answered_with_enhance_your_calm(tines_server: Any, mpm: tuple[str, ...],
                                                                   kind: str) -> None:
    _, port = serve_h2c(tines_server, served(mpm), *LIMITS)

    def open_upload(connection: H2Connection) -> None:
        # Stream 1: a POST whose body never ends, for the empty DATA frames.
        assert connection.new_stream() == 1
        connection.send(request_headers(connection, 1, end_stream=False, method=b"POST"))

    assert_calm(*flood(port, CONTROL_FLOODS[kind], open_upload if kind == "empty_data" else None))


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_a_header_block_past_the_limit_is_refused_before_it_is_decoded(tines_server: Any,
                                                                       mpm: tuple[str, ...]) -> None:
    _, port = serve_h2c(tines_server, served(mpm), *LIMITS)

    def batch(connection: H2Connection) -> list[Frame]:
        # One HEADERS frame, END_HEADERS set, twice the limit long, of bytes that are no valid
        # HPACK (0xff...: an indexed field whose index never ends): decoding it would be a
        # COMPRESSION_ERROR; bounding it first is ENHANCE_YOUR_CALM.
        frame = HeadersFrame(connection.new_stream(), b"\xff" * (2 * HEADER_LIST))
        frame.flags.add("END_HEADERS")
        frame.flags.add("END_STREAM")
        return [frame]

    assert_calm(*flood(port, batch))


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_a_continuation_flood_is_stopped_before_its_block_ends(tines_server: Any, mpm: tuple[str, ...]) -> None:
    _, port = serve_h2c(tines_server, served(mpm), *LIMITS)
    pad = NeverIndexedHeaderTuple(b"x-pad", b"p" * 1000)  # never indexed: each one adds its length

    def opening(connection: H2Connection) -> None:
        # A valid start (no END_HEADERS), then CONTINUATION frames of valid literal fields.
        stream_id = connection.new_stream()
        connection.send(HeadersFrame(stream_id, connection.encode([(b":method", b"GET"), (b":scheme", b"http"),
                                                                   (b":authority", b"localhost"),
                                                                   (b":path", b"/")])))

    def batch(connection: H2Connection) -> list[Frame]:
        # Never END_HEADERS: the server must not wait for the end of the block to judge it.
        return [ContinuationFrame(1, connection.encoder.encode([pad], huffman=False)) for _ in range(2)]

    attacker, goaway = flood(port, batch, opening)
    assert_calm(attacker, goaway)


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_a_window_that_never_opens_ends_the_stream_at_the_send_timeout(tines_server: Any,
                                                                       mpm: tuple[str, ...]) -> None:
    # What may wait for a slow reader: 1 MiB in memory, 2 MiB in all (the rest in a temporary
    # file); past that the slot waits for the client (docs/slow-clients.md), here forever.
    _, port = serve_h2c(tines_server, served(mpm), *LIMITS, "--max-response-buffer", str(APP.MIB),
                        "--max-stream-buffer", str(2 * APP.MIB))
    with H2Connection(port, settings={SettingsFrame.INITIAL_WINDOW_SIZE: 0}) as stalled, \
            H2Connection(port) as normal:
        stalled.settle()
        normal.settle()
        stream_id = stalled.send_request("/big?mib=64")
        ended = stalled.wait_for(lambda f: f.stream_id == stream_id and (isinstance(f, RstStreamFrame)
                                                                          or "END_STREAM" in f.flags),
                                 "the stalled stream's end")
        assert isinstance(ended, RstStreamFrame), stalled.describe()
        assert not any(isinstance(f, DataFrame) and f.data for f in stalled.frames), "no window, no DATA"
        # The other connection is served, and the app was pulled for what the buffers may hold
        # (2 MiB in all, 1 of them in memory) and a block or two in hand (4 blocks were seen on
        # every MPM), not for its 64 MiB.
        made = normal.request("/made")
        assert made.status == 200 and int(made.body) <= 5, made.body
        assert normal.request("/").body == APP.HELLO
