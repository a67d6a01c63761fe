"""The wheel (``make wheel``) installs and serves on a machine without a Rust toolchain.

The test makes (or finds up to date) ``dist/tines-*.whl``, installs it with pip into a fresh
virtualenv with no package index and binaries only, with every directory holding ``cargo`` or
``rustc`` taken off PATH, and serves ``examples/hello.py`` with that virtualenv's ``tines``, over
plain HTTP and over TLS (the wheel's rustls and ring, built by zig: ADR 0031), and with responses
compressed by each coding (zstd is the C library, built by zig too: ADR 0037).
"""

from __future__ import annotations

import gzip
import http.client
import os
import platform
import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import brotli
import pytest
import zstandard

from conftest import ROOT, start_server
from tls_certs import TlsCerts
from tls_clients import client_context, tls_args


def path_without_rust() -> str:
    """PATH less every directory that holds cargo or rustc."""
    kept = [entry for entry in os.environ.get("PATH", "").split(os.pathsep)
            if entry and not any((Path(entry) / tool).exists() for tool in ("cargo", "rustc"))]
    return os.pathsep.join(kept)


def built_wheel() -> Path:
    """``make wheel`` (a no-op when the wheel is up to date) and the one wheel it leaves in dist/."""
    subprocess.run(["make", "--no-print-directory", "wheel"], cwd=ROOT, check=True, timeout=1500,
                   stdin=subprocess.DEVNULL)
    wheels = sorted((ROOT / "dist").glob("tines-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.mark.timeout(1800)  # the first build of the wheel (release, fat LTO) takes minutes
def test_the_wheel_installs_without_rust_and_serves_a_request(tmp_path: Path, tls_certs: TlsCerts) -> None:
    wheel = built_wheel()
    # One wheel for every CPython from 3.10 (abi3), for any glibc 2.28+ Linux.
    assert wheel.name.endswith(f"-cp310-abi3-manylinux_2_28_{platform.machine()}.whl"), wheel.name

    path = path_without_rust()
    assert shutil.which("cargo", path=path) is None and shutil.which("rustc", path=path) is None
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    environment.update(PATH=path, PIP_DISABLE_PIP_VERSION_CHECK="1")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300, env=environment)
    python = venv / "bin" / "python"
    # The wheel's dependencies, as binary wheels for that Python: setproctitle (process titles),
    # and tomli before 3.11 (the standard library has tomllib from 3.11).
    dependencies = ["setproctitle>=1.3"] + (["tomli>=1.1"] if sys.version_info < (3, 11) else [])
    deps = tmp_path / "deps"
    subprocess.run([sys.executable, "-m", "pip", "download", "--only-binary", ":all:", "--dest", str(deps),
                    *dependencies], check=True, timeout=300)
    find_links = ["--find-links", str(deps)]
    install = subprocess.run([str(python), "-m", "pip", "install", "--no-index", "--only-binary", ":all:",
                              *find_links, str(wheel)], capture_output=True, text=True, timeout=300,
                             env=environment)
    assert install.returncode == 0, install.stdout + install.stderr
    # The extension imported is the wheel's, in the fresh virtualenv (not the checkout's).
    where = subprocess.run([str(python), "-c", "import tines._core; print(tines._core.__file__)"],
                           capture_output=True, text=True, timeout=60, env=environment, cwd=tmp_path)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout

    server = start_server("examples/hello.py:app", env={**environment, "PYTHONPATH": ""},
                          log_path=tmp_path / "server.log", program=[str(venv / "bin" / "tines")])
    try:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        connection.request("GET", "/")
        response = connection.getresponse()
        assert (response.status, response.read()) == (200, b"OK")
        connection.close()
    finally:
        server.kill()

    # TLS through the wheel's own extension: the handshake (ring's ECDSA and AES-GCM, compiled
    # by zig cc) and a request, the client checking the chain against the test root.
    server = start_server("examples/hello.py:app", *tls_args(tls_certs.localhost),
                          env={**environment, "PYTHONPATH": ""}, log_path=tmp_path / "server-tls.log",
                          program=[str(venv / "bin" / "tines")])
    try:
        context = client_context(tls_certs)
        secure = http.client.HTTPSConnection("127.0.0.1", server.port, timeout=10, context=context)
        secure.request("GET", "/")
        response = secure.getresponse()
        assert (response.status, response.read()) == (200, b"OK")
        assert isinstance(secure.sock, ssl.SSLSocket) and secure.sock.version() in ("TLSv1.2", "TLSv1.3")
        secure.close()
    finally:
        server.kill()

    # Compression through the wheel's own extension: gzip (zlib-rs), br (Rust), zstd (C, zig cc).
    server = start_server("examples/hello.py:app", "--compression", "zstd,br,gzip", "--compression-min-size", "0",
                          env={**environment, "PYTHONPATH": ""}, log_path=tmp_path / "server-compression.log",
                          program=[str(venv / "bin" / "tines")])
    decoders = {"zstd": lambda raw: zstandard.ZstdDecompressor().decompressobj().decompress(raw),
                "br": brotli.decompress, "gzip": gzip.decompress}
    try:
        for coding, decode in decoders.items():
            connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
            connection.request("GET", "/", headers={"Accept-Encoding": coding})
            response = connection.getresponse()
            assert (response.status, response.getheader("Content-Encoding")) == (200, coding)
            assert decode(response.read()) == b"OK"
            connection.close()
    finally:
        server.kill()
