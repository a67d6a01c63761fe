"""tines tune against a server that speaks TLS (issue 37): how it tells (one handshake on the
port), what its loads then carry (the trust flag the user gave), and what its calibration
server gets (the TLS flags among the serve flags). The whole run over TLS: e2e/test_tune_tls.py."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from tines.tune import plan
from tines.tune.measure import TuneError, speaks_tls

CERTS = Path(__file__).resolve().parents[3] / "crates" / "loadgen" / "tests" / "tls"


@pytest.fixture
def tls_port() -> Iterator[int]:
    """A listener that completes TLS handshakes (the loadgen tests' certificate), then closes."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(CERTS / "server.pem", CERTS / "server.key")
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            try:
                with context.wrap_socket(conn, server_side=True):
                    pass
            except (ssl.SSLError, OSError):
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    done.set()
    listener.close()


@pytest.fixture
def plain_port() -> Iterator[int]:
    """A listener that answers every connection with a plain HTTP 400 and closes it."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()[1]
    listener.close()


def test_a_tls_port_is_told_from_a_plain_one(tls_port: int, plain_port: int) -> None:
    assert speaks_tls(tls_port) is True
    assert speaks_tls(plain_port) is False


def test_the_calibration_server_gets_the_tls_flags_with_their_values() -> None:
    words = ["--hooks", "h.py", "--certfile", "c.pem", "--ssl-keyfile=k.pem", "--chdir", "x",
             "--keyfile-password-file", "p.txt"]
    assert plan.tls_flags_of(words) == ["--certfile", "c.pem", "--ssl-keyfile=k.pem",
                                        "--keyfile-password-file", "p.txt"]
    assert plan.tls_flags_of(["--hooks", "h.py"]) == []


def tuner(tmp_path: Path, trust: list[str]) -> plan.Tuner:
    options = plan.Options(app="examples/hello.py:app", urls=["/"], out=tmp_path / "out",
                           tls_trust=trust)
    return plan.Tuner(options)


def test_a_tls_server_is_loaded_with_the_trust_flag_given(tmp_path: Path) -> None:
    server = SimpleNamespace(tls=True, base="https://localhost:8443")
    words = tuner(tmp_path, ["--insecure"]).bench_args(server, 4, 1.0)  # type: ignore[arg-type]
    assert "--insecure" in words
    requests = Path(words[words.index("--requests-file") + 1]).read_text()
    assert requests == "https://localhost:8443/\n"
    plain = SimpleNamespace(tls=False, base="http://127.0.0.1:8000")
    words = tuner(tmp_path, ["--insecure"]).bench_args(plain, 4, 1.0)  # type: ignore[arg-type]
    assert "--insecure" not in words


def test_a_tls_server_without_a_trust_flag_is_a_usage_error(tmp_path: Path) -> None:
    server = SimpleNamespace(tls=True, base="https://localhost:8443")
    with pytest.raises(TuneError, match="--insecure .* --cacert") as caught:
        tuner(tmp_path, []).bench_args(server, 4, 1.0)  # type: ignore[arg-type]
    assert caught.value.status == 2
