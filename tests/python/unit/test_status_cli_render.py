"""`tines status`'s table, rendered from a `/status.json` document (no server: the document is
what the status process writes, checked in Rust)."""

from typing import Any

from tines.status_cli import render


def report(**totals: int) -> dict[str, Any]:
    return {
        "master_pid": 4100, "generation": 1, "mpm": "event", "uptime_s": 12.4,
        "stopping": False, "requests": 3, "time_ms": 0,
        "totals": {"connections": 4, "connections_idle": 1, "accepted": 9, "bytes_in": 10,
                   "bytes_out": 20, "in_flight": 3, **totals},
        "rates": {"1m": 0.2}, "restarts": {}, "scoreboard": "_", "workers": [],
    }


def test_http2_connections_and_streams_get_a_line_only_when_open() -> None:
    plain = render(report()).splitlines()
    assert not any(line.startswith("http/2") for line in plain)
    with_h2 = render(report(h2_connections=1, h2_streams=2)).splitlines()
    assert with_h2[4] == "http/2 1 conns, 2 streams open"
    assert with_h2[3].startswith("conns 4 open, 1 idle")
    assert with_h2[:4] + with_h2[5:] == plain


def test_requests_waiting_for_an_app_thread_and_the_mean_a_client_saw() -> None:
    """Issue 40: requests queued for an app thread are shown apart (count and longest wait),
    and the mean time is what a client saw (the status process adds the queue wait)."""
    quiet = render(report(mean_response_ms=0.42)).splitlines()
    assert quiet[1] == "requests 3  mean 0.4ms"
    assert "waiting" not in quiet[2]
    loaded = render(report(queued=4, queued_wait_ms=1250.0, mean_response_ms=497.0)).splitlines()
    assert loaded[1] == "requests 3  mean 497ms"
    assert loaded[2] == "req/s 1m 0.2   in flight 3  waiting 4 (longest 1.2s)"
    assert loaded[3].startswith("conns 4 open, 1 idle")


def test_compression_gets_a_line_only_once_it_counted_something() -> None:
    plain = render(report()).splitlines()
    assert not any(line.startswith("compressed") for line in plain)
    counted = report()
    counted["totals"]["compression"] = {
        "responses": {"gzip": 3, "br": 1, "zstd": 0}, "bytes_in": 4096, "bytes_out": 1024,
        "skipped": 5, "not_accepted": 2}
    lines = render(counted).splitlines()
    assert lines[4] == "compressed 4 (gzip 3, br 1)  4.0K -> 1.0K (25%)  left alone 5, unaccepted 2"
    assert lines[:4] + lines[5:] == plain
    # Zeros all round (compression off) read as nothing to show.
    counted["totals"]["compression"] = {
        "responses": {"gzip": 0, "br": 0, "zstd": 0}, "bytes_in": 0, "bytes_out": 0,
        "skipped": 0, "not_accepted": 0}
    assert render(counted).splitlines() == plain
