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
