"""WebSocket conformance cases in the spirit of the Autobahn test suite (its sections 1-7, 9, 12
and 13), run by a raw client against the echo route of apps/asgi_websocket.py.

Each case sends frames exactly as written (masked unless it says otherwise) and expects either
the echoes, in order, or a close frame with a code, then the server's close of the connection.
docs/websocket-conformance.md lists every case (checked by the last test here).
"""

from __future__ import annotations

import base64
import os
import re
import socket
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import ROOT, Server

APP = "asgi_websocket:app"
TEXT, BINARY, CLOSE, PING, PONG, CONT = 0x1, 0x2, 0x8, 0x9, 0xA, 0x0


def frame(opcode: int, payload: bytes = b"", fin: bool = True, rsv: int = 0,
          masked: bool = True) -> bytes:
    first = (0x80 if fin else 0) | (rsv << 4) | opcode
    mask_bit = 0x80 if masked else 0
    length = len(payload)
    if length < 126:
        header = struct.pack("!BB", first, mask_bit | length)
    elif length < 65536:
        header = struct.pack("!BBH", first, mask_bit | 126, length)
    else:
        header = struct.pack("!BBQ", first, mask_bit | 127, length)
    if not masked:
        return header + payload
    mask = os.urandom(4)
    return header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def close_payload(code: int, reason: bytes = b"") -> bytes:
    return struct.pack("!H", code) + reason


def deflate(data: bytes, compressor: zlib._Compress | None = None) -> bytes:
    """A message compressed as permessage-deflate wants it (RFC 7692 7.2.1): raw deflate,
    sync-flushed, without its last four bytes."""
    compressor = compressor or zlib.compressobj(wbits=-15)
    out = compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)
    assert out.endswith(b"\x00\x00\xff\xff")
    return out[:-4]


@dataclass
class Case:
    id: str
    section: str
    what: str
    send: list[bytes]
    # Echoed messages expected, in order: (opcode, payload) with the payload inflated.
    echoes: list[tuple[int, bytes]] = field(default_factory=list)
    # A close frame with this code is expected after the echoes (None: the test closes).
    close: int | None = None
    extension: bytes = b""


def fragments(opcode: int, pieces: list[bytes]) -> list[bytes]:
    out = []
    for index, piece in enumerate(pieces):
        out.append(frame(opcode if index == 0 else CONT, piece, fin=index == len(pieces) - 1))
    return out


SIZES = [0, 125, 126, 127, 128, 65535, 65536]
CASES: list[Case] = [
    # 1. Framing: text and binary messages of every length form.
    *(Case(f"1.1.{n}", "1 framing", f"text message of {size} bytes", [frame(TEXT, b"*" * size)],
           [(TEXT, b"*" * size)]) for n, size in enumerate(SIZES, 1)),
    *(Case(f"1.2.{n}", "1 framing", f"binary message of {size} bytes",
           [frame(BINARY, b"\xfe" * size)], [(BINARY, b"\xfe" * size)]) for n, size in enumerate(SIZES, 1)),
    Case("1.3.1", "1 framing", "a message split across many TCP writes (one byte each)",
         [bytes([b]) for b in frame(TEXT, b"byte by byte")], [(TEXT, b"byte by byte")]),
    # 2. Pings and pongs.
    Case("2.1", "2 ping/pong", "ping without payload is answered with an empty pong", [frame(PING)],
         [(PONG, b"")]),
    Case("2.2", "2 ping/pong", "ping with 125 bytes is answered with the same payload",
         [frame(PING, b"p" * 125)], [(PONG, b"p" * 125)]),
    Case("2.3", "2 ping/pong", "ping with binary payload", [frame(PING, bytes(range(10)))],
         [(PONG, bytes(range(10)))]),
    Case("2.4", "2 ping/pong", "ping with 126 bytes (over the control limit) is 1002",
         [frame(PING, b"p" * 126)], close=1002),
    Case("2.5", "2 ping/pong", "an unsolicited pong is ignored", [frame(PONG, b"unasked"), frame(TEXT, b"after")],
         [(TEXT, b"after")]),
    Case("2.6", "2 ping/pong", "ten pings get ten pongs, in order",
         [frame(PING, str(i).encode()) for i in range(10)], [(PONG, str(i).encode()) for i in range(10)]),
    Case("2.7", "2 ping/pong", "a fragmented ping is 1002", [frame(PING, b"frag", fin=False)], close=1002),
    # 3. Reserved bits (no extension agreed).
    *(Case(f"3.{n}", "3 reserved bits", f"RSV{n} set without an extension is 1002",
           [frame(TEXT, b"x", rsv=1 << (3 - n))], close=1002) for n in (1, 2, 3)),
    Case("3.4", "3 reserved bits", "RSV2 on a ping is 1002", [frame(PING, b"", rsv=2)], close=1002),
    # 4. Opcodes.
    *(Case(f"4.1.{op}", "4 opcodes", f"reserved data opcode {op} is 1002", [frame(op, b"x")], close=1002)
      for op in (3, 4, 5, 6, 7)),
    *(Case(f"4.2.{op}", "4 opcodes", f"reserved control opcode {op} is 1002", [frame(op, b"")], close=1002)
      for op in (11, 12, 13, 14, 15)),
    # 5. Fragmentation.
    Case("5.1", "5 fragmentation", "a text message in three fragments",
         fragments(TEXT, [b"frag", b"ment", b"ed"]), [(TEXT, b"fragmented")]),
    Case("5.2", "5 fragmentation", "a binary message in three fragments",
         fragments(BINARY, [b"\x00", b"\x01", b"\x02"]), [(BINARY, b"\x00\x01\x02")]),
    Case("5.3", "5 fragmentation", "a ping between fragments is answered at once",
         [frame(TEXT, b"one ", fin=False), frame(PING, b"now"), frame(CONT, b"two")],
         [(PONG, b"now"), (TEXT, b"one two")]),
    Case("5.4", "5 fragmentation", "empty fragments", fragments(TEXT, [b"", b"x", b""]), [(TEXT, b"x")]),
    Case("5.5", "5 fragmentation", "a continuation with no message started is 1002",
         [frame(CONT, b"orphan")], close=1002),
    Case("5.6", "5 fragmentation", "a new message before the last ended is 1002",
         [frame(TEXT, b"first", fin=False), frame(TEXT, b"second")], close=1002),
    Case("5.7", "5 fragmentation", "unmasked client frame is 1002", [frame(TEXT, b"bare", masked=False)],
         close=1002),
    # 6. UTF-8.
    Case("6.1", "6 UTF-8", "valid multi-byte text", [frame(TEXT, "κόσμε 𝄞 €".encode())],
         [(TEXT, "κόσμε 𝄞 €".encode())]),
    Case("6.2", "6 UTF-8", "a code point split across fragments is valid",
         [frame(TEXT, "𝄞".encode()[:2], fin=False), frame(CONT, "𝄞".encode()[2:])], [(TEXT, "𝄞".encode())]),
    Case("6.3", "6 UTF-8", "an invalid byte is 1007", [frame(TEXT, b"bad \xff")], close=1007),
    Case("6.4", "6 UTF-8", "an overlong encoding is 1007", [frame(TEXT, b"\xc0\xaf")], close=1007),
    Case("6.5", "6 UTF-8", "a surrogate is 1007", [frame(TEXT, b"\xed\xa0\x80")], close=1007),
    Case("6.6", "6 UTF-8", "a code point above U+10FFFF is 1007", [frame(TEXT, b"\xf4\x90\x80\x80")], close=1007),
    Case("6.7", "6 UTF-8", "invalid bytes in the first fragment fail before the message ends",
         [frame(TEXT, b"\xff", fin=False)], close=1007),
    Case("6.8", "6 UTF-8", "a message ending inside a code point is 1007",
         [frame(TEXT, "𝄞".encode()[:3])], close=1007),
    Case("6.9", "6 UTF-8", "binary messages are not checked", [frame(BINARY, b"\xff\xfe")], [(BINARY, b"\xff\xfe")]),
    # 7. Close handling.
    Case("7.1", "7 close", "a close without payload is answered with a close", [frame(CLOSE)], close=1000),
    Case("7.2", "7 close", "the client's code is echoed", [frame(CLOSE, close_payload(1000, b"bye"))], close=1000),
    *(Case(f"7.3.{code}", "7 close", f"valid code {code} is echoed", [frame(CLOSE, close_payload(code))],
           close=code) for code in (1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999, 4000, 4999)),
    *(Case(f"7.4.{code}", "7 close", f"invalid code {code} is 1002", [frame(CLOSE, close_payload(code))],
           close=1002) for code in (0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535)),
    Case("7.5", "7 close", "a one-byte close payload is 1002", [frame(CLOSE, b"\x03")], close=1002),
    Case("7.6", "7 close", "a close reason that is not UTF-8 is 1007",
         [frame(CLOSE, close_payload(1000, b"\xff"))], close=1007),
    Case("7.7", "7 close", "frames after the client's close are ignored",
         [frame(CLOSE, close_payload(1000)), frame(TEXT, b"too late")], close=1000),
    Case("7.8", "7 close", "a ping, then a close: the pong comes first",
         [frame(PING, b"p"), frame(CLOSE, close_payload(1000))], [(PONG, b"p")], close=1000),
    # 9. Limits: large messages and many small frames.
    Case("9.1", "9 limits", "a 1 MiB text message", [frame(TEXT, b"a" * (1 << 20))], [(TEXT, b"a" * (1 << 20))]),
    Case("9.2", "9 limits", "a 4 MiB binary message in 64 fragments",
         fragments(BINARY, [b"\x07" * (1 << 16)] * 64), [(BINARY, b"\x07" * (1 << 22))]),
    Case("9.3", "9 limits", "1,000 small messages, echoed in order",
         [frame(TEXT, str(i).encode()) for i in range(1000)], [(TEXT, str(i).encode()) for i in range(1000)]),
    Case("9.4", "9 limits", "a message over ws_max_message_size (16 MiB) is 1009",
         [frame(BINARY, b"\x00" * ((16 << 20) + 1))], close=1009),
]

DEFLATE = b"Sec-WebSocket-Extensions: permessage-deflate\r\n"


def _split_bomb() -> list[bytes]:
    """One compressed message in 200 fragments, each inflating to 1 MiB (200 MiB in all)."""
    compressor = zlib.compressobj(wbits=-15)
    pieces = [compressor.compress(b"\x00" * (1 << 20)) + compressor.flush(zlib.Z_SYNC_FLUSH)
              for _ in range(200)]
    frames = [frame(BINARY, pieces[0], fin=False, rsv=4)]
    frames += [frame(CONT, piece, fin=False) for piece in pieces[1:-1]]
    frames.append(frame(CONT, pieces[-1][:-4]))
    return frames
NO_TAKEOVER = b"Sec-WebSocket-Extensions: permessage-deflate; client_no_context_takeover; server_no_context_takeover\r\n"
_shared = zlib.compressobj(wbits=-15)
_takeover_first, _takeover_second = deflate(b"hello " * 50, _shared), deflate(b"hello " * 50, _shared)
CASES += [
    # 12/13. permessage-deflate.
    *(Case(f"12.1.{n}", "12 deflate", f"a compressed text message of {size} bytes is echoed",
           [frame(TEXT, deflate(b"q" * size), rsv=4)], [(TEXT, b"q" * size)], extension=DEFLATE)
      for n, size in enumerate([0, 16, 1000, 65536, 1 << 20], 1)),
    Case("12.2", "12 deflate", "a compressed message in fragments (RSV1 on the first only)",
         [frame(BINARY, deflate(b"z" * 5000)[:10], fin=False, rsv=4),
          frame(CONT, deflate(b"z" * 5000)[10:])], [(BINARY, b"z" * 5000)], extension=DEFLATE),
    Case("12.3", "12 deflate", "compressed and plain messages mixed",
         [frame(TEXT, b"plain"), frame(TEXT, deflate(b"packed " * 20), rsv=4)],
         [(TEXT, b"plain"), (TEXT, b"packed " * 20)], extension=DEFLATE),
    Case("12.4", "12 deflate", "context takeover: the second message refers to the first",
         [frame(TEXT, _takeover_first, rsv=4), frame(TEXT, _takeover_second, rsv=4)],
         [(TEXT, b"hello " * 50)] * 2, extension=DEFLATE),
    Case("12.5", "12 deflate", "no context takeover either way",
         [frame(TEXT, deflate(b"again " * 30), rsv=4), frame(TEXT, deflate(b"again " * 30), rsv=4)],
         [(TEXT, b"again " * 30)] * 2, extension=NO_TAKEOVER),
    Case("13.1", "13 deflate", "RSV1 on a continuation frame is 1002",
         [frame(TEXT, deflate(b"x" * 100), fin=False, rsv=4), frame(CONT, b"", rsv=4)], close=1002,
         extension=DEFLATE),
    Case("13.2", "13 deflate", "RSV1 on a control frame is 1002", [frame(PING, b"", rsv=4)], close=1002,
         extension=DEFLATE),
    Case("13.3", "13 deflate", "bytes that are not deflate are 1007",
         [frame(TEXT, b"\xff\xff\xff\xff not deflate", rsv=4)], close=1007, extension=DEFLATE),
    Case("13.4", "13 deflate", "compressed text that inflates to invalid UTF-8 is 1007",
         [frame(TEXT, deflate(b"bad \xff"), rsv=4)], close=1007, extension=DEFLATE),
    Case("13.5", "13 deflate", "a deflate bomb (8 KiB inflating past 16 MiB) is 1009",
         [frame(BINARY, deflate(b"\x00" * (17 << 20)), rsv=4)], close=1009, extension=DEFLATE),
    Case("13.6", "13 deflate", "a bomb split over 200 fragments (each 1 MiB inflated) is 1009",
         _split_bomb(), close=1009, extension=DEFLATE),
]


class Peer:
    """The raw client's side: frames in, decoded; the server's compression undone."""

    def __init__(self, server: Server, extension: bytes) -> None:
        self.sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        key = base64.b64encode(os.urandom(16))
        self.sock.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                          b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + key + b"\r\n" + extension
                          + b"\r\n")
        self.buffer = b""
        head = self.until(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101 "), head
        self.deflated = b"permessage-deflate" in head
        self.takeover = b"server_no_context_takeover" not in head
        self.inflater = zlib.decompressobj(wbits=-15)

    def until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            self.fill()
        head, _, self.buffer = self.buffer.partition(marker)
        return head

    def fill(self) -> None:
        chunk = self.sock.recv(1 << 20)
        assert chunk, "the server closed the connection"
        self.buffer += chunk

    def exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            self.fill()
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def message(self) -> tuple[int, bytes]:
        """The next whole message or control frame, inflated."""
        first, second = self.exactly(2)
        assert second & 0x80 == 0, "a server frame must not be masked"
        length = second & 0x7F
        if length == 126:
            length = struct.unpack("!H", self.exactly(2))[0]
        elif length == 127:
            length = struct.unpack("!Q", self.exactly(8))[0]
        payload = self.exactly(length)
        assert first & 0x80, "the server sends whole messages"
        if first & 0x40:
            assert self.deflated
            if not self.takeover:
                self.inflater = zlib.decompressobj(wbits=-15)
            payload = self.inflater.decompress(payload + b"\x00\x00\xff\xff")
        return first & 0x0F, payload

    def closed_after(self) -> bool:
        """True when the server closes the connection (EOF) after its close frame."""
        self.sock.settimeout(30)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
        except ConnectionResetError:
            return True


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    from conftest import start_server

    started = start_server(APP, "-w", "1", "--ws-ping-interval", "0",
                           log_path=tmp_path_factory.mktemp("conformance") / "server.log")
    yield started
    started.kill()


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_case(server: Server, case: Case) -> None:
    peer = Peer(server, case.extension)
    for data in case.send:
        peer.sock.sendall(data)
    for expected_opcode, expected_payload in case.echoes:
        opcode, payload = peer.message()
        assert (opcode, len(payload)) == (expected_opcode, len(expected_payload))
        assert payload == expected_payload
    if case.close is None:
        peer.sock.sendall(frame(CLOSE, close_payload(1000)))
        opcode, payload = peer.message()
        assert (opcode, struct.unpack("!H", payload[:2])[0]) == (CLOSE, 1000)
    else:
        opcode, payload = peer.message()
        assert opcode == CLOSE, (opcode, payload[:50])
        assert struct.unpack("!H", payload[:2])[0] == case.close
    assert peer.closed_after()
    peer.sock.close()


def test_the_conformance_table_lists_every_case() -> None:
    text = (ROOT / "docs" / "websocket-conformance.md").read_text()
    listed = set(re.findall(r"^\| ([0-9][0-9.]*) \|", text, re.M))
    assert listed == {case.id for case in CASES}


def write_table(path: Path) -> None:
    """Regenerates docs/websocket-conformance.md's table (``python -m`` this file)."""
    rows = "\n".join(f"| {c.id} | {c.section} | {c.what} | "
                     f"{'close ' + str(c.close) if c.close else 'echo'} |" for c in CASES)
    text = path.read_text()
    start = text.index("| case |")
    end = text.index("\n\n", start)
    path.write_text(text[:start] + "| case | section | what the client does | expected |\n"
                    "| --- | --- | --- | --- |\n" + rows + text[end:])

