"""tines tune against an HTTP/2 server (issue 38): ``--http2`` and ``--streams`` reach every
load it runs as ``tines bench --http2 --streams N`` (h2 by ALPN over TLS, h2c with prior
knowledge in cleartext), and bad combinations are usage errors before anything starts."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tines.tune import main, plan


def tuner(tmp_path: Path, streams: int | None, trust: list[str] | None = None) -> plan.Tuner:
    options = plan.Options(app="examples/hello.py:app", urls=["/"], out=tmp_path / "out",
                           tls_trust=trust or [], http2_streams=streams)
    return plan.Tuner(options)


def test_an_http2_run_loads_with_the_streams_given(tmp_path: Path) -> None:
    h2c = SimpleNamespace(tls=False, base="http://127.0.0.1:8000")
    words = tuner(tmp_path, 10).bench_args(h2c, 4, 1.0)  # type: ignore[arg-type]
    assert words[words.index("--http2"):words.index("--http2") + 3] == ["--http2", "--streams", "10"]
    assert words[words.index("-c") + 1] == "4"
    h2 = SimpleNamespace(tls=True, base="https://localhost:8443")
    words = tuner(tmp_path, 3, ["--insecure"]).bench_args(h2, 2, 1.0, rate=50.0)  # type: ignore[arg-type]
    assert "--insecure" in words and "--http2" in words and words[words.index("--streams") + 1] == "3"
    assert words[words.index("-R") + 1] == "50.0"


def test_an_http1_run_carries_no_http2_flag(tmp_path: Path) -> None:
    server = SimpleNamespace(tls=False, base="http://127.0.0.1:8000")
    words = tuner(tmp_path, None).bench_args(server, 4, 1.0)  # type: ignore[arg-type]
    assert "--http2" not in words and "--streams" not in words
    assert plan.http2_flags(None) == []


@pytest.mark.parametrize("argv, message", [
    (["examples/hello.py:app", "--streams", "4"], "--streams is for HTTP/2"),
    (["examples/hello.py:app", "--http2", "--streams", "0"], "--streams must be positive"),
])
def test_bad_http2_flags_are_usage_errors(argv: list[str], message: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err
