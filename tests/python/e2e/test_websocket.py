"""WebSocket (RFC 6455, RFC 7692) for ASGI apps, over real sockets: the `websockets` library as
the client for what a client does right, raw sockets for what a client does wrong.

Every wait is on a message, a frame or a close: assertions are on order and outcome.
"""

from __future__ import annotations

import ast
import base64
import os
import resource
import signal
import socket
import struct
from collections.abc import Callable

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from conftest import Server

APP = "asgi_websocket:app"


def url(server: Server, path: str = "/echo") -> str:
    return f"ws://127.0.0.1:{server.port}{path}"


# --- a raw client, for frames a library would never send ----------------------------------------

def upgrade(server: Server, path: str = "/echo", extra: bytes = b"") -> tuple[socket.socket, bytes]:
    """A new connection's handshake, and the head of its answer (101 or a refusal)."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=20)
    key = base64.b64encode(os.urandom(16))
    sock.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                 b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + key
                 + b"\r\n" + extra + b"\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        assert chunk, head
        head += chunk
    return sock, head


def handshake(server: Server, path: str = "/echo", extra: bytes = b"") -> socket.socket:
    sock, head = upgrade(server, path, extra)
    assert head.startswith(b"HTTP/1.1 101 "), head
    return sock


def frame(opcode: int, payload: bytes, masked: bool = True, fin: bool = True) -> bytes:
    first = (0x80 if fin else 0) | opcode
    mask_bit = 0x80 if masked else 0
    if len(payload) < 126:
        header = struct.pack("!BB", first, mask_bit | len(payload))
    else:
        header = struct.pack("!BBH", first, mask_bit | 126, len(payload))
    if not masked:
        return header + payload
    mask = os.urandom(4)
    return header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    """One server frame: (opcode, payload)."""
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, f"closed after {data!r}"
            data += chunk
        return data

    first, second = exactly(2)
    assert second & 0x80 == 0, "a server frame must not be masked"
    length = second & 0x7F
    if length == 126:
        length = struct.unpack("!H", exactly(2))[0]
    elif length == 127:
        length = struct.unpack("!Q", exactly(8))[0]
    return first & 0x0F, exactly(length)


def close_code(payload: bytes) -> int:
    return int(struct.unpack("!H", payload[:2])[0])


# --- what a client does right ----------------------------------------------------------------------

@pytest.mark.parametrize("compression", ["deflate", None])
def test_echo_of_text_and_bytes_with_and_without_permessage_deflate(
        tines_server: Callable[..., Server], compression: str | None) -> None:
    server = tines_server(APP, "-w", "1")
    with connect(url(server), compression=compression) as ws:
        extensions = ws.response.headers.get("Sec-WebSocket-Extensions")
        assert (extensions is not None and extensions.startswith("permessage-deflate")) == (
            compression == "deflate")
        assert ws.response.headers["x-accepted-by"] == "tines-test"
        ws.send("héllo")
        assert ws.recv() == "héllo"
        ws.send(b"\x00\xff" * 5000)
        assert ws.recv() == b"\x00\xff" * 5000
        big = "z" * 200_000  # compresses a lot; more than one read of the socket
        ws.send(big)
        assert ws.recv() == big
        for index in range(100):
            ws.send(f"message {index}")
        assert [ws.recv() for _ in range(100)] == [f"message {index}" for index in range(100)]
    # An HTTP request beside it is served as usual.
    assert httpx.get(server.url + "/", timeout=20).text == "http beside websockets"


def test_a_fragmented_message_arrives_whole_and_pings_are_answered(
        tines_server: Callable[..., Server]) -> None:
    server = tines_server(APP, "-w", "1")
    with connect(url(server), compression=None) as ws:
        ws.send(iter(["frag", "ment", "ed"]))
        assert ws.recv() == "fragmented"
        assert ws.ping(b"are you there").wait(20)
    sock = handshake(server)
    # A ping between the fragments of a message is answered at once (RFC 6455 5.4).
    sock.sendall(frame(0x1, b"one ", fin=False) + frame(0x9, b"ping!") + frame(0x0, b"two"))
    assert read_frame(sock) == (0xA, b"ping!")
    assert read_frame(sock) == (0x1, b"one two")
    sock.close()


def test_the_scope_of_a_websocket(tines_server: Callable[..., Server]) -> None:
    server = tines_server(APP, "-w", "1")
    with connect(url(server, "/scope?x=1"), subprotocols=["chat", "superchat"]) as ws:
        shown = ws.recv()
    assert shown == repr(sorted({
        "type": "websocket", "scheme": "ws", "path": "/scope", "query_string": "x=1",
        "subprotocols": ["chat", "superchat"], "http_version": "1.1",
        "extensions": {"websocket.http.response": {}}}.items()))


def test_the_scheme_of_a_websocket_is_wss_when_a_trusted_proxy_says_https(
        tines_server: Callable[..., Server]) -> None:
    """The proxy rule of `Exchange::url_scheme`, as `ws`/`wss` (http's cases: test_asgi.py)."""
    def scheme(server: Server, proto: str) -> str:
        with connect(url(server, "/scope"), additional_headers={"X-Forwarded-Proto": proto}) as ws:
            shown = ws.recv()
        assert isinstance(shown, str)
        return dict(ast.literal_eval(shown))["scheme"]  # type: ignore[no-any-return]

    trusted = tines_server(APP, "-w", "1")
    assert [scheme(trusted, proto) for proto in ("https", "http", "HTTPS, http", "ftp")] == [
        "wss", "ws", "wss", "ws"]
    untrusted = tines_server(APP, "-w", "1", "--forwarded-allow-ips", "10.0.0.1")
    assert scheme(untrusted, "https") == "ws"


def test_the_subprotocol_the_app_picks_is_agreed(tines_server: Callable[..., Server]) -> None:
    server = tines_server(APP, "-w", "1")
    with connect(url(server), subprotocols=["chat", "superchat"]) as ws:
        assert ws.subprotocol == "superchat"


def test_close_codes_both_ways(tines_server: Callable[..., Server]) -> None:
    server = tines_server(APP, "-w", "1")
    with connect(url(server, "/close-4000")) as ws:
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv()
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4000, "bye")  # type: ignore[union-attr]
    with connect(url(server)) as ws:
        ws.send("hi")
        assert ws.recv() == "hi"
        ws.close(code=4321, reason="done here")
    assert httpx.get(server.url + "/last-disconnect", timeout=20).text == "4321 done here"


def test_a_reserved_close_code_from_the_app_is_an_error_closed_with_1011(
        tines_server: Callable[..., Server]) -> None:
    server = tines_server(APP, "-w", "1")
    with connect(url(server, "/bad-close")) as ws:
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv()
    assert closed.value.rcvd.code == 1011  # type: ignore[union-attr]
    server.wait_for_log(r"ValueError: websocket.close code 1006 may not be sent")


def test_a_receive_cancelled_by_the_app_loses_no_message(tines_server: Callable[..., Server]) -> None:
    server = tines_server(APP, "-w", "1")
    with connect(url(server, "/cancelled-receive")) as ws:
        assert ws.recv() == "ready"
        ws.send("this one")
        assert ws.recv() == "got this one"


def test_a_refusal_before_accept_is_403_and_the_denial_extension_sends_the_apps_response(
        tines_server: Callable[..., Server]) -> None:
    server = tines_server(APP, "-w", "1")
    with pytest.raises(InvalidStatus) as refused:
        connect(url(server, "/deny"))
    assert refused.value.response.status_code == 403
    with pytest.raises(InvalidStatus) as denied:
        connect(url(server, "/deny-custom"))
    assert denied.value.response.status_code == 401
    assert denied.value.response.body == b"who are you?"


# --- what a client does wrong ----------------------------------------------------------------------

def test_a_bad_handshake_is_answered_426_or_400_with_a_reason(tines_server: Callable[..., Server]) -> None:
    server = tines_server(APP, "-w", "1")
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=20)
    sock.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 b"Sec-WebSocket-Version: 8\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
    data = sock.recv(65536)
    assert data.startswith(b"HTTP/1.1 426 ") and b"Sec-WebSocket-Version: 13" in data
    sock.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 b"Sec-WebSocket-Version: 13\r\n\r\n")
    data = sock.recv(65536)
    assert data.startswith(b"HTTP/1.1 400 ")
    sock.close()


@pytest.mark.parametrize("payload, code", [
    (frame(0x1, b"\xff\xfe not utf-8"), 1007),                 # text that is not UTF-8
    (frame(0x1, b"unmasked", masked=False), 1002),            # a client frame must be masked
    (frame(0x9, b"x" * 126), 1002),                           # a control frame over 125 bytes
    (frame(0x0, b"no message to continue"), 1002),            # a continuation out of nowhere
])
def test_a_client_that_breaks_the_protocol_is_closed_with_the_right_code(
        tines_server: Callable[..., Server], payload: bytes, code: int) -> None:
    server = tines_server(APP, "-w", "1")
    sock = handshake(server)
    sock.sendall(payload)
    opcode, body = read_frame(sock)
    assert (opcode, close_code(body)) == (0x8, code)
    assert sock.recv(65536) == b""  # then the server closes the connection
    sock.close()
    assert httpx.get(server.url + "/last-disconnect", timeout=20).text.startswith(str(code))


def test_a_message_over_ws_max_message_size_is_1009_also_after_inflation(
        tines_server: Callable[..., Server]) -> None:
    server = tines_server(APP, "-w", "1", "--ws-max-message-size", "64KiB")
    with connect(url(server), compression=None, max_size=None) as ws:
        ws.send(b"x" * 70_000)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv()
    assert closed.value.rcvd.code == 1009  # type: ignore[union-attr]
    # A deflate bomb: a few hundred bytes on the wire that inflate past the limit.
    with connect(url(server), compression="deflate", max_size=None) as ws:
        ws.send(b"\x00" * 10_000_000)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv()
    assert closed.value.rcvd.code == 1009  # type: ignore[union-attr]


def test_a_client_that_does_not_answer_pings_is_closed_with_1011(tines_server: Callable[..., Server]) -> None:
    server = tines_server(APP, "-w", "1", "--ws-ping-interval", "0.2", "--ws-ping-timeout", "0.2")
    sock = handshake(server)
    opcode, _ = read_frame(sock)
    assert opcode == 0x9  # the server pings a silent client
    opcode, body = read_frame(sock)  # never answered: closed
    assert (opcode, close_code(body)) == (0x8, 1011)
    sock.close()


def test_a_graceful_stop_closes_websockets_with_1001(tines_server: Callable[..., Server]) -> None:
    server = tines_server(APP, "-w", "1")
    with connect(url(server)) as ws:
        ws.send("still here")
        assert ws.recv() == "still here"
        server.signal(signal.SIGTERM)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv()
    assert closed.value.rcvd.code == 1001  # type: ignore[union-attr]
    assert server.wait() == 0


def test_a_starlette_websocket_route(tines_server: Callable[..., Server]) -> None:
    server = tines_server("starlette_app:app", "-w", "1")
    with connect(url(server, "/ws")) as ws:
        ws.send("ping")
        assert ws.recv() == "pong: ping"
        ws.send('{"n": 41}')
        assert ws.recv() == '{"n":42}'


IDLE = 10_000


def read_head(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, data
        data += chunk
    return data


def test_ten_thousand_idle_websockets_cost_under_8_kib_each_and_block_nobody(
        tines_server: Callable[..., Server]) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < IDLE + 100:
        pytest.skip(f"RLIMIT_NOFILE hard limit is {hard}: {IDLE} client sockets need {IDLE + 100}")
    socks: list[socket.socket] = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        # The defaults but for max_connections: accepted WebSockets are no requests at work, so
        # max_concurrency (1024) does not count them.
        server = tines_server(APP, "-w", "1", "--max-connections", "20000",
                              "--ws-ping-interval", "0")
        [worker] = server.worker_pids()
        with connect(url(server)) as warm:  # the first WebSocket's one-time costs
            warm.send("warm")
            assert warm.recv() == "warm"
        rss_before = rss_kib(worker)
        key = base64.b64encode(b"0123456789abcdef")
        request = (b"GET /echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + key + b"\r\n\r\n")
        while len(socks) < IDLE:
            batch = []
            for _ in range(min(1000, IDLE - len(socks))):
                sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
                sock.sendall(request)
                batch.append(sock)
            for sock in batch:
                assert read_head(sock).startswith(b"HTTP/1.1 101 ")
            socks += batch
            # Another client is answered between batches.
            assert httpx.get(server.url + "/", timeout=20).text == "http beside websockets"
        rss_after = rss_kib(worker)
        # They are live: a sample echoes.
        for sock in socks[::500]:
            sock.sendall(frame(0x1, b"still here"))
            assert read_frame(sock) == (0x1, b"still here")
        growth = (rss_after - rss_before) * 1024 / IDLE
        print(f"worker RSS {rss_before} KiB -> {rss_after} KiB with {IDLE} idle WebSockets "
              f"({growth:.0f} bytes per connection)")
        assert growth < 8 * 1024, f"{growth:.0f} bytes per idle WebSocket"
    finally:
        for sock in socks:
            sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_wsgi_app_ignores_the_upgrade_header_and_the_connection_stays_http(
        tines_server: Callable[..., Server]) -> None:
    server = tines_server("examples/hello.py:app", "-w", "1")
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=20)
    for _ in range(2):
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
        head = read_head(sock)
        assert head.startswith(b"HTTP/1.1 200 "), head
        body = head.partition(b"\r\n\r\n")[2]
        while len(body) < 2:
            body += sock.recv(100)
        assert body == b"OK"
    sock.close()


def test_the_chat_example_broadcasts_to_everyone_in_the_room(tines_server: Callable[..., Server]) -> None:
    server = tines_server("examples/chat/app.py:app", "-w", "1")
    page = httpx.get(server.url + "/", timeout=20)
    assert page.status_code == 200 and "new WebSocket" in page.text
    with connect(url(server, "/ws")) as alice:
        assert alice.recv() == "(someone joined: 1 here)"
        with connect(url(server, "/ws")) as bob:
            assert alice.recv() == bob.recv() == "(someone joined: 2 here)"
            alice.send("alice: hello <b>bob</b>")
            assert alice.recv() == bob.recv() == "alice: hello &lt;b&gt;bob&lt;/b&gt;"
        assert alice.recv() == "(someone left: 1 here)"
        server.signal(signal.SIGTERM)
        # The lifespan's shutdown speaks last, after the graceful stop closed the room (1001):
        # nobody is left to hear it.
        with pytest.raises(ConnectionClosed) as closed:
            alice.recv()
    assert closed.value.rcvd.code == 1001  # type: ignore[union-attr]
    assert server.wait() == 0
