"""tines.sdnotify: addresses, the environment, the messages and their order, failures, and the
hand-over to another main pid. A real datagram socket receives what the notifier sends."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tines import sdnotify


@pytest.mark.parametrize(("value", "address"), [
    ("/run/systemd/notify", "/run/systemd/notify"),
    ("@abstract-name", "\0abstract-name"),
    ("@", None),
    ("relative/path", None),
    ("vsock:2:1234", None),
])
def test_a_notify_socket_value_becomes_a_unix_address_or_is_refused(value: str, address: str | None) -> None:
    assert sdnotify.socket_address(value) == address


def receiver(tmp_path: Path) -> tuple[socket.socket, str]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify")
    sock.bind(path)
    sock.settimeout(10)
    return sock, path


def messages(sock: socket.socket) -> list[str]:
    found = []
    sock.setblocking(False)
    try:
        while True:
            found.append(sock.recv(4096).decode())
    except BlockingIOError:
        return found


def test_notify_socket_is_taken_out_of_the_environment_and_each_message_is_one_datagram(tmp_path: Path) -> None:
    sock, path = receiver(tmp_path)
    environ = {"NOTIFY_SOCKET": path, "OTHER": "x"}
    notifier = sdnotify.Notifier.from_environment(environ)
    assert environ == {"OTHER": "x"} and notifier.address == path and notifier.enabled
    fd = notifier.fileno()
    assert fd is not None and not os.get_inheritable(fd)
    notifier.ready("2 workers")
    notifier.reload_finished(True, "ignored: no reload was announced")
    notifier.reload_started()
    notifier.reload_finished(False, "2 workers")
    notifier.stopping()
    notifier.stopping()
    sent = messages(sock)
    assert sent[0] == "READY=1\nSTATUS=2 workers"
    reloading = sent[1].split("\n")
    assert reloading[0] == "RELOADING=1" and reloading[1].startswith("MONOTONIC_USEC=")
    assert int(reloading[1].split("=")[1]) <= sdnotify.monotonic_usec()
    assert sent[2:] == ["READY=1\nSTATUS=reload failed; 2 workers", "STOPPING=1\nSTATUS=stopping"]
    notifier.close()


def test_after_main_pid_names_another_process_this_one_sends_nothing_until_named_again(tmp_path: Path) -> None:
    sock, path = receiver(tmp_path)
    notifier = sdnotify.Notifier(path)
    notifier.main_pid(4242)
    notifier.stopping()
    notifier.main_pid(os.getpid())  # a rollback
    notifier.ready("back")
    assert messages(sock) == ["MAINPID=4242", f"MAINPID={os.getpid()}", "READY=1\nSTATUS=back"]


def test_without_notify_socket_nothing_is_opened_or_sent() -> None:
    notifier = sdnotify.Notifier.from_environment({})
    assert not notifier.enabled and notifier.fileno() is None
    notifier.ready("x")
    notifier.stopping()


def test_a_failed_send_is_logged_once_and_returns_false(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    notifier = sdnotify.Notifier(str(tmp_path / "nobody-listens"))
    assert not notifier.send("READY=1")
    assert not notifier.send("STOPPING=1")
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "cannot notify the service manager" in warnings[0].getMessage()
