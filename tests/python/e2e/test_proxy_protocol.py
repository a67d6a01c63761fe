"""`proxy_protocol`: a PROXY header (v1 or v2) before the first request, from trusted peers only.

Raw sockets play the proxy (127.0.0.1, trusted by the default `forwarded_allow_ips`): the app
(`remote_addr`) echoes `REMOTE_ADDR REMOTE_PORT pid`, so each test sees which address the server
took from the header and which worker answered. Refused connections get no byte back (the peer
speaks the PROXY protocol, not HTTP) and one info line in the error log.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import read_until_closed, wait_until

MPMS = [("prefork",), ("thread", "--threads", "2"), ("event", "--threads", "1")]
MPM_IDS = ["prefork", "thread", "event"]
APP = "remote_addr:app"
SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
REQUEST = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"


def v1(source: str, source_port: int, destination_port: int = 443) -> bytes:
    family, destination = ("TCP6", "2001:db8::1") if ":" in source else ("TCP4", "198.51.100.1")
    return f"PROXY {family} {source} {destination} {source_port} {destination_port}\r\n".encode()


def v2_proxy(source: str, source_port: int, destination_port: int = 443, tlvs: bytes = b"") -> bytes:
    src = ipaddress.ip_address(source)
    dst = ipaddress.ip_address("198.51.100.1" if src.version == 4 else "2001:db8::1")
    family = 0x11 if src.version == 4 else 0x21
    payload = src.packed + dst.packed + struct.pack(">HH", source_port, destination_port) + tlvs
    return SIGNATURE + bytes([0x21, family]) + struct.pack(">H", len(payload)) + payload


def v2_local() -> bytes:
    return SIGNATURE + bytes([0x20, 0x00]) + struct.pack(">H", 0)


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_response(sock: socket.socket, buffered: bytearray) -> tuple[int, bytes]:
    """One response with a Content-Length body; bytes past it stay in ``buffered``."""
    while b"\r\n\r\n" not in buffered:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a whole response: {bytes(buffered)!r}"
        buffered += chunk
    head, _, _ = bytes(buffered).partition(b"\r\n\r\n")
    head_len = len(head) + 4
    lines = head.decode("latin-1").split("\r\n")
    length = next(int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:"))
    while len(buffered) < head_len + length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside the body"
        buffered += chunk
    body = bytes(buffered[head_len:head_len + length])
    del buffered[:head_len + length]
    return int(lines[0].split()[1]), body


def ask(port: int, header: bytes, request: bytes = REQUEST) -> tuple[str, str, int]:
    """One request after ``header`` on a new connection: (REMOTE_ADDR, REMOTE_PORT, worker pid)."""
    with connect(port) as sock:
        sock.sendall(header + request)
        status, body = read_response(sock, bytearray())
    assert status == 200, body
    addr, port_text, pid = body.decode().split(" ")
    return addr, port_text, int(pid)


def refused(port: int, data: bytes) -> bytes:
    """Sends ``data`` and reads until the server closes: what it answered (nothing, when refused)."""
    with connect(port) as sock:
        sock.sendall(data)
        return read_until_closed(sock)


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_the_app_and_the_access_log_see_the_address_from_the_header(
        tines_server: Any, tmp_path: Path, mpm: tuple[str, ...]) -> None:
    log = tmp_path / "access.log"
    server = tines_server(APP, "-w", "1", "--mpm", *mpm, "--proxy-protocol", "--access-log", str(log))
    assert ask(server.port, v1("203.0.113.7", 40001))[:2] == ("203.0.113.7", "40001")
    assert ask(server.port, v1("2001:db8::7", 40002))[:2] == ("2001:db8::7", "40002")
    assert ask(server.port, v2_proxy("192.0.2.9", 40003))[:2] == ("192.0.2.9", "40003")
    assert ask(server.port, v2_proxy("2001:db8::9", 40004))[:2] == ("2001:db8::9", "40004")
    # TLVs (here ALPN "h2") are skipped within the header's length.
    assert ask(server.port, v2_proxy("192.0.2.10", 40005, tlvs=b"\x01\x00\x02h2"))[:2] == ("192.0.2.10", "40005")
    # LOCAL (a health check) and UNKNOWN keep the real peer: the proxy itself.
    assert ask(server.port, v2_local())[0] == "127.0.0.1"
    assert ask(server.port, b"PROXY UNKNOWN\r\n")[0] == "127.0.0.1"
    wait_until(lambda: log.exists() and len(log.read_text().splitlines()) == 7, what="seven access log lines")
    # Sorted: with two app threads, a line may be written after the next request's (each is
    # written once its response is out).
    clients = sorted(line.split(" ")[0] for line in log.read_text().splitlines())
    assert clients == sorted(["203.0.113.7", "2001:db8::7", "192.0.2.9", "2001:db8::9", "192.0.2.10",
                              "127.0.0.1", "127.0.0.1"])


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_one_header_serves_every_request_of_a_kept_alive_connection(tines_server: Any, mpm: tuple[str, ...]) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", *mpm, "--proxy-protocol")
    with connect(server.port) as sock:
        buffered = bytearray()
        sock.sendall(v1("203.0.113.8", 5555) + REQUEST)
        first = read_response(sock, buffered)
        # The second request comes without a header: were it read as one, it would be refused.
        sock.sendall(REQUEST)
        second = read_response(sock, buffered)
        # Pipelined, the third and fourth arrive together.
        sock.sendall(REQUEST + REQUEST)
        third, fourth = read_response(sock, buffered), read_response(sock, buffered)
    answers = {response[1].decode().rsplit(" ", 1)[0] for response in (first, second, third, fourth)}
    assert answers == {"203.0.113.8 5555"}


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_a_connection_without_a_valid_header_is_closed_unanswered_and_the_worker_serves_on(
        tines_server: Any, mpm: tuple[str, ...]) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", *mpm, "--proxy-protocol")
    _, _, pid = ask(server.port, v1("203.0.113.1", 1000))
    assert refused(server.port, REQUEST) == b""
    server.wait_for_log(r"\[INFO\] proxy_protocol: closed a connection from 127\.0\.0\.1:\d+: no PROXY header")
    assert refused(server.port, b"PROXY TCP4 1.2.3 198.51.100.1 1 2\r\n" + REQUEST) == b""
    server.wait_for_log(r"closed a connection from 127\.0\.0\.1:\d+: PROXY v1 address is not an address")
    assert refused(server.port, b"PROXY TCP4 203.0.113.1 198.51.100.1 1 2\n" + REQUEST) == b""
    server.wait_for_log(r"closed a connection from 127\.0\.0\.1:\d+: PROXY v1 line without CRLF")
    assert refused(server.port, SIGNATURE + bytes([0x21, 0x11, 0xFF, 0xFF])) == b""
    server.wait_for_log(r"closed a connection from 127\.0\.0\.1:\d+: PROXY v2 header is longer than")
    # The same worker serves the next good connection.
    assert ask(server.port, v2_proxy("192.0.2.1", 2000)) == ("192.0.2.1", "2000", pid)


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_a_header_sent_byte_by_byte_is_read_whole(tines_server: Any, mpm: tuple[str, ...]) -> None:
    server = tines_server(APP, "-w", "1", "--mpm", *mpm, "--proxy-protocol")
    for header in (v1("203.0.113.44", 4444), v2_proxy("2001:db8::44", 4445)):
        with connect(server.port) as sock:
            for byte in header:
                sock.sendall(bytes([byte]))
                # Pacing only, so the bytes reach the server in separate reads; the outcome
                # does not depend on it.
                time.sleep(0.002)
            sock.sendall(REQUEST)
            status, body = read_response(sock, bytearray())
        assert status == 200
        source = ipaddress.ip_address(header_source(header))
        assert body.decode().split(" ")[0] == str(source)


def header_source(header: bytes) -> str:
    if header.startswith(b"PROXY"):
        return header.split(b" ")[2].decode()
    return str(ipaddress.ip_address(header[16:32]))


def test_a_peer_outside_forwarded_allow_ips_is_closed_before_the_app_runs(
        tines_server: Any, tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    server = tines_server(APP, "-w", "1", "--proxy-protocol", "--forwarded-allow-ips", "10.0.0.1",
                          "--access-log", str(log))
    assert refused(server.port, v1("203.0.113.2", 1234) + REQUEST) == b""
    server.wait_for_log(r"\[INFO\] proxy_protocol: closed a connection from 127\.0\.0\.1:\d+: "
                        r"not in forwarded_allow_ips")
    # The line is written before the connection closes: had the app run, its access line
    # would have been written before the close as well.
    assert not log.exists() or log.read_text() == ""


def test_a_slow_header_is_closed_at_the_header_timeout_without_a_408(tines_server: Any) -> None:
    server = tines_server(APP, "-w", "1", "--proxy-protocol", "--header-timeout", "1",
                          "--header-timeout-max", "1", "--header-min-rate", "0")
    partial = v1("203.0.113.3", 3333)[:20]
    assert refused(server.port, partial) == b""
    # After a whole header, the first head shares its deadline: a silent client is closed too.
    assert refused(server.port, v1("203.0.113.3", 3333)) == b""


def test_forwarded_headers_are_judged_by_the_address_from_the_header(tines_server: Any) -> None:
    server = tines_server(APP, "-w", "1", "--proxy-protocol", "--forwarded-allow-ips", "127.0.0.1,192.0.2.0/24")
    forwarded = b"GET / HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: 203.0.113.50\r\n\r\n"
    # The header says the client is 198.51.100.9, not a trusted proxy: its X-Forwarded-For is
    # its own claim, ignored.
    assert ask(server.port, v1("198.51.100.9", 1), forwarded)[0] == "198.51.100.9"
    # The header names a trusted proxy (a CDN in front of the load balancer): believed.
    assert ask(server.port, v1("192.0.2.20", 1), forwarded)[0] == "203.0.113.50"


def test_a_unix_socket_peer_may_send_the_header(tines_server: Any, tmp_path: Path) -> None:
    path = tmp_path / "tines.sock"
    server = tines_server(APP, "-w", "1", "--proxy-protocol", "--forwarded-allow-ips", "10.0.0.1",
                          "-b", f"unix:{path}")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(20)
        sock.connect(str(path))
        sock.sendall(v1("203.0.113.60", 6060) + REQUEST)
        status, body = read_response(sock, bytearray())
    assert status == 200
    assert body.decode().split(" ")[:2] == ["203.0.113.60", "6060"]
    # The TCP bind of the same server still refuses 127.0.0.1, which is not trusted.
    assert refused(server.port, v1("203.0.113.61", 1) + REQUEST) == b""


@pytest.mark.parametrize("mpm", MPMS, ids=MPM_IDS)
def test_a_head_near_the_size_limit_still_fits_after_the_header(tines_server: Any, mpm: tuple[str, ...]) -> None:
    # The header and the head are all in the socket before the worker reads (it is stopped
    # meanwhile) and fill the read buffer to its limit: taking the header off the front makes
    # room, and the rest of the head is read at once, not left in the socket until the header
    # timeout (no new edge would announce it).
    server = tines_server(APP, "-w", "1", "--mpm", *mpm, "--proxy-protocol", "--max-head-size", "16384",
                          "--header-timeout", "5", "--header-timeout-max", "5")
    worker = wait_until(lambda: server.worker_pids(), what="the worker")[0]  # type: ignore[index]
    filler = b"X-Filler: " + b"a" * (16384 - len(REQUEST) - 40) + b"\r\n"
    request = REQUEST[:-2] + filler + b"\r\n"
    assert 16384 - 40 < len(request) <= 16384
    with connect(server.port) as sock:
        os.kill(worker, signal.SIGSTOP)
        try:
            sock.sendall(v1("203.0.113.70", 7070) + request)
        finally:
            os.kill(worker, signal.SIGCONT)
        status, body = read_response(sock, bytearray())
    assert status == 200
    assert body.decode().split(" ")[:2] == ["203.0.113.70", "7070"]
