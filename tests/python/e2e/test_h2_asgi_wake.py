"""An ASGI worker's HTTP/2 work left for the loop between its turns (ADR 0035): the bridge's
event loop writes a stream's response itself, on its own thread, between the reactor's turns;
what such a write leaves for the loop (the rest of a response its stream's buffer did not
take, a neighbour stream made writable by its drive, END_STREAM) is announced by the loop's
own HTTP/2 waker. The client here gives the server every window at once and then sends no
frame at all while it reads, so no WINDOW_UPDATE and no read event paces the server: every
response must still be complete, one stream or several at once, one ``send`` or many.

(Measured on the integration tree, these pass without the waker too: the writer's own drive
flushes what the windows allow and the exchange writes again at once, and the turn the bridge
runs after each ``complete`` sweeps the rest. They hold the behaviour, whichever path gives it.)
"""

from __future__ import annotations

from typing import Any

import pytest
from h2_frames import H2Connection
from h2_tools import serve_h2c
from hyperframe.frame import DataFrame, WindowUpdateFrame

WAKE_APP = "h2_wake_app:app"
MAX_WINDOW = (1 << 31) - 1
BUFFER = 16384
"""``max_response_buffer`` (the stream's output budget): far below the responses, so each
response goes out in many pieces, each written once the socket took the one before."""


def expected(size: int) -> bytes:
    return bytes(index % 251 for index in range(size))


def read_silently(connection: H2Connection, stream_ids: list[int]) -> dict[int, bytes]:
    """Every stream's body once it ended, sending nothing meanwhile (no WINDOW_UPDATE)."""
    for stream_id in stream_ids:
        ended = connection.wait_for(lambda f, s=stream_id: f.stream_id == s and "END_STREAM" in f.flags,
                                    f"the end of stream {stream_id}")
        assert ended is not None, connection.describe()
    return {stream_id: b"".join(frame.data for frame in connection.frames
                                if isinstance(frame, DataFrame) and frame.stream_id == stream_id)
            for stream_id in stream_ids}


@pytest.mark.parametrize("streams,sends", [(1, 1), (1, 8), (6, 1)], ids=["one-send", "eight-sends", "six-streams"])
def test_responses_left_to_the_loop_complete_without_client_frames(tines_server: Any, streams: int,
                                                                   sends: int) -> None:
    _, port = serve_h2c(tines_server, (WAKE_APP,), "--max-response-buffer", str(BUFFER))
    size = 48 * BUFFER
    # Every window open from the start (stream: SETTINGS_INITIAL_WINDOW_SIZE; connection: one
    # WINDOW_UPDATE), so the server never waits for a WINDOW_UPDATE.
    with H2Connection(port, settings={0x4: MAX_WINDOW}) as connection:
        connection.send(WindowUpdateFrame(0, MAX_WINDOW - 65535))
        connection.settle()
        stream_ids = [connection.send_request(f"/bytes?n={size}&sends={sends}") for _ in range(streams)]
        bodies = read_silently(connection, stream_ids)
        assert {stream_id: len(body) for stream_id, body in bodies.items()} == dict.fromkeys(stream_ids, size)
        assert all(body == expected(size) for body in bodies.values())
