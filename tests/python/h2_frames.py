"""A raw HTTP/2 client for the end-to-end tests (tests/python/e2e/test_h2_*.py): exact frames
over a real socket (cleartext, prior knowledge), so a test sends
precisely the flood or the malformed request it means, and reads every frame the server sends.

Frames are hyperframe's; header blocks are encoded with hpack (both come with the ``h2``
package). A reader thread collects every frame the server sends into ``frames`` from the moment
the preface is written, so a GOAWAY sent while the test is still writing a flood is never lost
to a reset that follows it. It answers nothing on its own: no SETTINGS ack, no PING ack, no
WINDOW_UPDATE unless the test asks (``settle``, ``request``), so a test controls every byte.
This module does not start servers and asserts nothing about them.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from hpack import Decoder, Encoder
from hyperframe.frame import (ContinuationFrame, DataFrame, Frame, GoAwayFrame, HeadersFrame, PingFrame,
                              RstStreamFrame, SettingsFrame, WindowUpdateFrame)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME_TIMEOUT = 20.0
"""How long a test waits for a frame it expects (generous: a loaded 2-core machine)."""

NO_ERROR = 0x0
PROTOCOL_ERROR = 0x1
CANCEL = 0x8
ENHANCE_YOUR_CALM = 0xB
ERROR_NAMES = {0x0: "NO_ERROR", 0x1: "PROTOCOL_ERROR", 0x2: "INTERNAL_ERROR", 0x3: "FLOW_CONTROL_ERROR",
               0x4: "SETTINGS_TIMEOUT", 0x5: "STREAM_CLOSED", 0x6: "FRAME_SIZE_ERROR", 0x7: "REFUSED_STREAM",
               0x8: "CANCEL", 0x9: "COMPRESSION_ERROR", 0xA: "CONNECT_ERROR", 0xB: "ENHANCE_YOUR_CALM",
               0xC: "INADEQUATE_SECURITY", 0xD: "HTTP_1_1_REQUIRED"}
Header = tuple[bytes, bytes]


@dataclass
class Response:
    """One stream's answer as the raw client saw it."""

    stream_id: int
    headers: list[Header] = field(default_factory=list)
    """Every field of every HEADERS block (informational, final, trailers), in order."""
    body: bytes = b""
    reset: int | None = None
    """The RST_STREAM error code, when the server reset the stream."""
    ended: bool = False

    @property
    def status(self) -> int:
        """The final ``:status`` (the last one: a 1xx comes first)."""
        statuses = [int(value) for name, value in self.headers if name == b":status"]
        return statuses[-1] if statuses else 0


class H2Connection:
    """One cleartext HTTP/2 connection (prior knowledge) to 127.0.0.1:``port``. Cleartext
    only: the reader thread reads while the test writes, which an OpenSSL session does not
    allow from two threads; the TLS tests use real clients (httpx, curl, nghttp, h2spec)."""

    def __init__(self, port: int, settings: dict[int, int] | None = None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=FRAME_TIMEOUT)
        self.encoder = Encoder()
        self.decoder = Decoder()
        self.frames: list[Frame] = []
        """Every frame the server sent, in order (appended by the reader thread)."""
        self.closed = False
        """Set by the reader once the server closed (or reset) the connection."""
        self.read_error: BaseException | None = None
        self.condition = threading.Condition()
        self.next_stream_id = 1
        self._write_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read_frames, daemon=True)
        self.send_raw(PREFACE + SettingsFrame(0, settings=settings or {}).serialize())
        self._reader.start()

    # Writing.

    def send_raw(self, data: bytes) -> bool:
        """Write ``data``; False when the server had closed (a reset or a broken pipe)."""
        try:
            with self._write_lock:
                self.sock.sendall(data)
            return True
        except OSError:  # a reset, a broken pipe, a timeout
            return False

    def send(self, *frames: Frame) -> bool:
        """Write ``frames`` in one write."""
        return self.send_raw(b"".join(frame.serialize() for frame in frames))

    def encode(self, headers: Sequence[Header]) -> bytes:
        """An HPACK block for ``headers`` (names and values as given: no lowercasing)."""
        return self.encoder.encode(list(headers))  # type: ignore[no-any-return]

    def new_stream(self) -> int:
        """The next client stream id."""
        stream_id = self.next_stream_id
        self.next_stream_id += 2
        return stream_id

    def headers_frame(self, stream_id: int, headers: Sequence[Header], end_stream: bool = True) -> HeadersFrame:
        """A HEADERS frame (END_HEADERS set) carrying ``headers``."""
        frame = HeadersFrame(stream_id, self.encode(headers))
        frame.flags.add("END_HEADERS")
        if end_stream:
            frame.flags.add("END_STREAM")
        return frame

    def send_request(self, path: str = "/", method: str = "GET", body: bytes | None = None,
                     extra: Iterable[Header] = (), authority: str = "localhost", scheme: str = "http",
                     chunk: int = 16384, content_length: bool = True) -> int:
        """Open a stream with a request (the body in DATA frames of ``chunk`` bytes, which the
        server's windows must allow: small bodies only); its stream id."""
        stream_id = self.new_stream()
        headers: list[Header] = [(b":method", method.encode()), (b":scheme", scheme.encode()),
                                 (b":authority", authority.encode()), (b":path", path.encode())]
        if body is not None and content_length:
            headers.append((b"content-length", str(len(body)).encode()))
        headers.extend(extra)
        frames: list[Frame] = [self.headers_frame(stream_id, headers, end_stream=body is None)]
        if body is not None:
            pieces = [body[i:i + chunk] for i in range(0, len(body), chunk)] or [b""]
            for index, piece in enumerate(pieces):
                data = DataFrame(stream_id, piece)
                if index == len(pieces) - 1:
                    data.flags.add("END_STREAM")
                frames.append(data)
        self.send(*frames)
        return stream_id

    def ack_settings(self) -> None:
        """Acknowledge the server's SETTINGS."""
        ack = SettingsFrame(0)
        ack.flags.add("ACK")
        self.send(ack)

    # Reading.

    def _read_frames(self) -> None:
        buffer = b""
        block: list[HeadersFrame | ContinuationFrame] = []  # a header block waiting for its END_HEADERS
        try:
            while True:
                try:
                    chunk = self.sock.recv(65536)
                except socket.timeout:
                    continue
                if not chunk:
                    break
                buffer += chunk
                while len(buffer) >= 9:
                    frame, length = Frame.parse_frame_header(memoryview(buffer[:9]))
                    if len(buffer) < 9 + length:
                        break
                    frame.parse_body(memoryview(buffer[9:9 + length]))
                    buffer = buffer[9 + length:]
                    if isinstance(frame, (HeadersFrame, ContinuationFrame)):
                        # Decoded here, in the order the server sent them, whatever stream a
                        # test waits on: the HPACK table is the connection's.
                        block.append(frame)
                        if "END_HEADERS" in frame.flags:
                            setattr(block[0], "decoded", self.decoder.decode(b"".join(f.data for f in block), raw=True))
                            block = []
                    with self.condition:
                        self.frames.append(frame)
                        self.condition.notify_all()
        except OSError as error:  # a reset after the server's close
            self.read_error = error
        finally:
            with self.condition:
                self.closed = True
                self.condition.notify_all()

    def wait_for(self, predicate: Callable[[Frame], bool], what: str, timeout: float = FRAME_TIMEOUT,
                 start: int = 0) -> Frame | None:
        """The first frame from index ``start`` on that matches; None if the connection closed
        first; AssertionError if neither happens within ``timeout``."""
        end = time.monotonic() + timeout
        with self.condition:
            while True:
                found = next((frame for frame in self.frames[start:] if predicate(frame)), None)
                if found is not None:
                    return found
                if self.closed:
                    return None
                remaining = end - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"no {what} within {timeout:.0f} s; frames: {self.describe()}")
                self.condition.wait(remaining)

    def wait_closed(self, timeout: float = FRAME_TIMEOUT) -> None:
        """Wait until the server closed the connection."""
        end = time.monotonic() + timeout
        with self.condition:
            while not self.closed:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"the connection stayed open; frames: {self.describe()}")
                self.condition.wait(remaining)

    def goaway(self, timeout: float = FRAME_TIMEOUT) -> GoAwayFrame | None:
        """The server's first GOAWAY (None if it closed without one)."""
        frame = self.wait_for(lambda f: isinstance(f, GoAwayFrame), "GOAWAY", timeout)
        return frame if isinstance(frame, GoAwayFrame) else None

    def settle(self) -> SettingsFrame:
        """Wait for the server's SETTINGS and acknowledge them; the frame."""
        frame = self.wait_for(lambda f: isinstance(f, SettingsFrame) and "ACK" not in f.flags, "server SETTINGS")
        assert isinstance(frame, SettingsFrame), f"closed before SETTINGS: {self.describe()}"
        self.ack_settings()
        return frame

    def response(self, stream_id: int, timeout: float = FRAME_TIMEOUT) -> Response:
        """The stream's answer, once it ended (END_STREAM or RST_STREAM). Every DATA frame of
        the stream is given back by WINDOW_UPDATE on the stream and the connection, so a body
        of any size arrives."""
        response = Response(stream_id)
        seen = 0
        end = time.monotonic() + timeout
        while not response.ended:
            with self.condition:
                while len(self.frames) <= seen and not self.closed:
                    remaining = end - time.monotonic()
                    if remaining <= 0:
                        raise AssertionError(f"stream {stream_id} did not end within {timeout:.0f} s; "
                                             f"frames: {self.describe()}")
                    self.condition.wait(remaining)
                new, seen = self.frames[seen:], len(self.frames)
                closed = self.closed
            for frame in new:
                if frame.stream_id != stream_id:
                    continue
                if isinstance(frame, HeadersFrame):
                    response.headers.extend(getattr(frame, "decoded", []))
                elif isinstance(frame, DataFrame):
                    response.body += frame.data
                    if frame.flow_controlled_length:
                        self.send(WindowUpdateFrame(0, frame.flow_controlled_length),
                                  WindowUpdateFrame(stream_id, frame.flow_controlled_length))
                elif isinstance(frame, RstStreamFrame):
                    response.reset = frame.error_code
                    response.ended = True
                if "END_STREAM" in frame.flags:
                    response.ended = True
            if closed and not response.ended and seen == len(self.frames):
                raise AssertionError(f"the connection closed before stream {stream_id} ended: {self.describe()}")
        return response

    def request(self, path: str = "/", **options: object) -> Response:
        """``send_request`` then ``response``."""
        return self.response(self.send_request(path, **options))  # type: ignore[arg-type]

    def describe(self, last: int = 12) -> str:
        """The last frames received, for a failure message."""
        shown = []
        for frame in self.frames[-last:]:
            text = f"{type(frame).__name__}(stream={frame.stream_id}, flags={sorted(frame.flags)}"
            if isinstance(frame, (GoAwayFrame, RstStreamFrame)):
                text += f", error={ERROR_NAMES.get(frame.error_code, hex(frame.error_code))}"
            if isinstance(frame, GoAwayFrame):
                text += f", last_stream={frame.last_stream_id}, debug={frame.additional_data!r}"
            shown.append(text + ")")
        return f"{len(self.frames)} frames, closed={self.closed}: " + ", ".join(shown)

    def close(self) -> None:
        """Close the socket (the reader ends with it)."""
        try:
            self.sock.close()
        finally:
            self._reader.join(5)

    def __enter__(self) -> H2Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def ping(payload: bytes = b"12345678") -> PingFrame:
    """A PING (not an ACK)."""
    return PingFrame(0, payload)


def rst_stream(stream_id: int, code: int = CANCEL) -> RstStreamFrame:
    """A RST_STREAM."""
    return RstStreamFrame(stream_id, code)
