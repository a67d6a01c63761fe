"""Streams over HTTP/2: 100 concurrent streams on one connection answered by a thread and an
event worker (h2load, and the raw client opening all 100 in one write); WSGI and ASGI uploads
of a few MB with and without ``content-length`` (larger than every window, so the windows open
only as the app reads); a streamed WSGI response and an ASGI stream and server-sent events
read block by block, the app held at a gate the test opens only once the previous block
arrived (an order, never a duration)."""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from h2_frames import H2Connection
from h2_tools import ASGI, SERVED, SERVED_IDS, WSGI, one_stream, run_h2load, serve_h2c
from hyperframe.frame import DataFrame, HeadersFrame, RstStreamFrame

from conftest import load_app_module

APP = load_app_module("h2_app")
CONCURRENT = [(WSGI, "thread", "--threads", "4"), (WSGI, "event", "--threads", "2"), (ASGI,)]
CONCURRENT_IDS = ["thread", "event", "asgi"]


@pytest.mark.parametrize("served", CONCURRENT, ids=CONCURRENT_IDS)
def test_100_concurrent_streams_on_one_connection_are_all_answered(tines_server: Any,
                                                                    served: tuple[str, ...]) -> None:
    _, port = serve_h2c(tines_server, served)
    load = run_h2load(f"http://127.0.0.1:{port}/", 100, 1, 100)
    assert (load.done, load.succeeded, load.ok, load.failed, load.errored) == (100, 100, 100, 0, 0), load.output
    with H2Connection(port) as connection:
        # All 100 HEADERS in one write, before the server's SETTINGS are even read: the
        # advertised limit is 100, so none may be refused.
        streams = [connection.new_stream() for _ in range(100)]
        connection.send(*(connection.headers_frame(stream, [(b":method", b"GET"), (b":scheme", b"http"),
                                                            (b":authority", b"localhost"),
                                                            (b":path", f"/?stream={stream}".encode())])
                          for stream in streams))
        settings = connection.settle()
        assert settings.settings.get(3) == 100, settings.settings  # SETTINGS_MAX_CONCURRENT_STREAMS
        answers = [connection.response(stream) for stream in streams]
        assert [(a.status, a.body, a.reset) for a in answers] == [(200, APP.HELLO, None)] * 100


def chunks(data: bytes, size: int) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start:start + size]


@pytest.mark.parametrize("served", SERVED, ids=SERVED_IDS)
def test_an_upload_of_a_few_mb_with_and_without_content_length(tines_server: Any, served: tuple[str, ...]) -> None:
    _, port = serve_h2c(tines_server, served)
    upload = os.urandom(5 << 20)  # past the stream (256 KiB) and connection (1 MiB) windows
    expected = f"{hashlib.sha256(upload).hexdigest()} {len(upload)}"
    with httpx.Client(http1=False, http2=True, timeout=60) as client:
        sized = client.post(f"http://127.0.0.1:{port}/upload", content=upload)
        assert sized.http_version == "HTTP/2" and sized.status_code == 200
        assert sized.text == expected
        # A generator: httpx sends no content-length over HTTP/2, the body ends with END_STREAM.
        unsized = client.post(f"http://127.0.0.1:{port}/upload", content=chunks(upload, 100_000))
        assert "content-length" not in unsized.request.headers
        assert unsized.http_version == "HTTP/2" and unsized.status_code == 200
        assert unsized.text == expected
        if one_stream(served):
            return
        # Both again at once on the one connection: their windows are separate. (httpx would
        # wait for ever for a second stream on a server that allows one: ask first.)
        with H2Connection(port) as probe:
            assert probe.settle().settings.get(3, 100) >= 2, "SETTINGS_MAX_CONCURRENT_STREAMS"
        with client.stream("POST", f"http://127.0.0.1:{port}/upload", content=chunks(upload, 65_536)) as first:
            second = client.post(f"http://127.0.0.1:{port}/upload", content=upload[::-1])
            assert first.read().decode() == expected
        assert second.text == f"{hashlib.sha256(upload[::-1]).hexdigest()} {len(upload)}"


def data_of(connection: H2Connection, stream_id: int) -> bytes:
    """The DATA the stream received so far."""
    with connection.condition:
        return b"".join(frame.data for frame in connection.frames
                        if isinstance(frame, DataFrame) and frame.stream_id == stream_id)


def read_gated(connection: H2Connection, gate: socket.socket, stream_id: int, items: list[bytes]) -> None:
    """Each item arrives before the app may produce the next: only then is the gate opened."""
    for index, item in enumerate(items):
        expected = b"".join(items[:index + 1])

        def arrived(frame: object) -> bool:
            return data_of(connection, stream_id) == expected or isinstance(frame, RstStreamFrame)

        connection.wait_for(arrived, f"item {index + 1} ({item!r})")
        assert data_of(connection, stream_id) == expected, connection.describe()
        if index < len(items) - 1:
            gate.sendall(b"g")  # only now may the app produce the next one
    ended = connection.wait_for(lambda f: f.stream_id == stream_id and "END_STREAM" in f.flags, "END_STREAM")
    assert ended is not None and data_of(connection, stream_id) == b"".join(items), connection.describe()


def gated_stream(port: int, path: str, items: list[bytes], content_type: bytes) -> None:
    with socket.create_server(("127.0.0.1", 0)) as gate_listener, H2Connection(port) as connection:
        connection.settle()
        gate_listener.settimeout(20)
        stream_id = connection.send_request(f"{path}&port={gate_listener.getsockname()[1]}")
        gate, _ = gate_listener.accept()
        with gate:
            read_gated(connection, gate, stream_id, items)
        headers = next(frame for frame in connection.frames if isinstance(frame, HeadersFrame)
                       and frame.stream_id == stream_id)
        fields = dict(getattr(headers, "decoded"))
        assert fields[b":status"] == b"200" and fields[b"content-type"] == content_type, fields


@pytest.mark.parametrize("served", [(WSGI, "prefork"), (WSGI, "thread", "--threads", "4"),
                                    (WSGI, "event", "--threads", "2"), (WSGI, "event", "--threads", "0")],
                         ids=["prefork", "thread", "event", "event-inline"])
def test_a_streamed_wsgi_response_arrives_block_by_block(tines_server: Any, served: tuple[str, ...]) -> None:
    _, port = serve_h2c(tines_server, served)
    gated_stream(port, "/gated?blocks=4", [APP.block(i) for i in range(1, 5)], b"text/plain")


def test_asgi_streaming_and_server_sent_events_arrive_one_by_one(tines_server: Any) -> None:
    _, port = serve_h2c(tines_server, (ASGI,))
    gated_stream(port, "/gated?blocks=4", [APP.block(i) for i in range(1, 5)], b"text/plain")
    gated_stream(port, "/sse?events=5", [APP.event(i) for i in range(1, 6)], b"text/event-stream")
