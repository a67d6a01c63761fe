"""The rate limits' settings (issue 39), declared once in the registry with the names and
defaults the brief fixed, their checks (one line, exit 2 through ``ConfigError``), the worker's
conversion, and the master's table: made only when a limit is set, adopted from an old master's
memfd on USR2 when its size fits, kept by a reload (``tines.rate_limits``)."""

from __future__ import annotations

import os
from typing import Any

import pytest

import tines._core as _core
from tines import rate_limits
from tines.config import ignored_settings, load
from tines.errors import ConfigError
from tines.worker import worker_settings

DEFAULTS = {"rate_limit": None, "rate_limit_burst": None, "rate_limit_paths": (), "rate_limit_allow": (),
            "rate_limit_ipv6_prefix": 64, "rate_limit_table_size": 65536, "max_connections_per_client": 0}


def test_the_settings_and_their_defaults_are_the_brief_s() -> None:
    cfg = load({}, {})
    assert {name: getattr(cfg, name) for name in DEFAULTS} == DEFAULTS


@pytest.mark.parametrize("raw, value", [("10/s", "10/s"), (" 5 / m ", "5/m"), ("1000000/s", "1000000/s")])
def test_rates_are_normalized(raw: str, value: str) -> None:
    assert load({"rate_limit": raw}, {}).rate_limit == value


@pytest.mark.parametrize("name, raw", [
    ("rate_limit", "10/h"), ("rate_limit", "0/s"), ("rate_limit", "1000001/s"), ("rate_limit", "ten/s"),
    ("rate_limit_burst", "0"), ("rate_limit_paths", "login=1/s"), ("rate_limit_paths", "/login=1/s:0"),
    ("rate_limit_paths", "/a b=1/s"), ("rate_limit_paths", "/login?x=1/s"), ("rate_limit_paths", "/a%2Fb=1/s"),
    ("rate_limit_paths", "/a%00=1/s"), ("rate_limit_paths", "/a%zz=1/s"), ("rate_limit_paths", "/a/../b=1/s"),
    ("rate_limit_paths", "/%2e/b=1/s"), ("rate_limit_allow", "10.0.0.0/33"), ("rate_limit_ipv6_prefix", "0"),
    ("rate_limit_ipv6_prefix", "129"), ("rate_limit_table_size", "63"), ("rate_limit_table_size", "16777217"),
    ("max_connections_per_client", "-1"),
])
def test_bad_values_are_refused_naming_the_setting(name: str, raw: str) -> None:
    with pytest.raises(ConfigError, match=name):
        load({name: raw}, {})


def test_a_rule_s_prefix_may_be_spelled_with_escapes_and_is_compared_decoded() -> None:
    cfg = load({"rate_limit_paths": "/%61ccount/=1/m,//login=1/m:2"}, {})
    text = dict(_core.worker_config_fields(worker_settings(cfg)))["rate_limit"]
    assert "prefix: [47, 97, 99, 99, 111, 117, 110, 116, 47]" in text  # /account/
    assert "prefix: [47, 108, 111, 103, 105, 110]" in text  # /login


def test_the_worker_converts_every_rate_limit_setting() -> None:
    cfg = load({"rate_limit": "10/s", "rate_limit_paths": "/login=5/m:3,/api=50/s",
                "rate_limit_allow": "10.0.0.0/8", "max_connections_per_client": "4"}, {})
    fields = dict(_core.worker_config_fields(worker_settings(cfg)))
    text = fields["rate_limit"]
    assert "count: 10" in text and "burst: 10" in text
    assert "burst: 3" in text and "burst: 50" in text
    assert "max_connections_per_client: 4" in text


class Board:
    """What ``ensure`` tells the scoreboard."""

    def __init__(self) -> None:
        self.told: tuple[int, int] | None = None
        self.slots = 4

    def set_rate_table(self, capacity: int, entries: int) -> None:
        self.told = (capacity, entries)


def test_no_limit_makes_no_table_and_a_limit_makes_one_that_a_reload_keeps() -> None:
    board = Board()
    assert rate_limits.ensure(load({}, {}), None, None, board) is None
    assert rate_limits.ensure_connections(load({}, {}), None, board) is None
    assert board.told is None
    cfg = load({"rate_limit": "1/s", "rate_limit_table_size": "100"}, {})
    table = rate_limits.ensure(cfg, None, None, board)
    assert (table.capacity, table.mapped_bytes, board.told) == (128, 64 + 128 * 16, (128, 0))
    assert rate_limits.ensure(cfg, table, None, board) is table
    counts = rate_limits.ensure_connections(load({"max_connections_per_client": "3"}, {}), None, board)
    assert counts is not None
    assert rate_limits.ensure_connections(load({"max_connections_per_client": "3"}, {}), counts, board) is counts


def test_an_upgrade_adopts_the_old_master_s_table_when_its_size_fits(caplog: Any) -> None:
    board = Board()
    cfg = load({"rate_limit": "1/s", "rate_limit_table_size": "100"}, {})
    old = rate_limits.ensure(cfg, None, None, board)
    adopted = rate_limits.ensure(cfg, None, os.dup(old.fd), board)
    assert adopted is not old and adopted.capacity == 128
    # Another size: a fresh table, and a line that says why.
    bigger = load({"rate_limit": "1/s", "rate_limit_table_size": "1000"}, {})
    fresh = rate_limits.ensure(bigger, None, os.dup(old.fd), board)
    assert fresh.capacity == 1024
    assert "the old master's table is not used" in caplog.text
    # Settings without a limit: the passed fd is closed, not kept.
    fd = os.dup(old.fd)
    assert rate_limits.ensure(load({}, {}), None, fd, board) is None
    with pytest.raises(OSError):
        os.fstat(fd)


def test_settings_that_do_nothing_beside_the_others_are_named() -> None:
    assert ignored_settings(load({"rate_limit": "1/s", "rate_limit_burst": "5"}, {})) == []
    assert ignored_settings(load({"rate_limit_paths": "/a=1/s", "rate_limit_allow": "10.0.0.0/8"}, {})) == []
    (line,) = ignored_settings(load({"rate_limit_burst": "5"}, {}))
    assert line.startswith("rate_limit_burst (cli) is ignored without rate_limit")
    lines = ignored_settings(load({"rate_limit_allow": "10.0.0.0/8", "rate_limit_ipv6_prefix": "56"}, {}))
    assert [line.split()[0] for line in lines] == ["rate_limit_allow", "rate_limit_ipv6_prefix"]


def test_an_upgrade_adopts_the_old_master_s_connection_counts_on_the_other_side(caplog: Any) -> None:
    board = Board()
    cfg = load({"max_connections_per_client": "3"}, {})
    old = rate_limits.ensure_connections(cfg, None, board)
    assert rate_limits.passed_connections(old) == (old.fd, 0)
    assert rate_limits.passed_connections(None) is None
    adopted = rate_limits.ensure_connections(cfg, None, board, (os.dup(old.fd), old.side))
    assert adopted is not old and adopted.side == 1
    # Other regions (another max_connections): fresh counts, and a line that says why.
    wider = load({"max_connections_per_client": "3", "max_connections": "5000"}, {})
    fresh = rate_limits.ensure_connections(wider, None, board, (os.dup(old.fd), old.side))
    assert fresh.side == 0
    assert "the old master's counts are not used" in caplog.text
    # Settings without a cap: the passed fd is closed, not kept.
    fd = os.dup(old.fd)
    assert rate_limits.ensure_connections(load({}, {}), None, board, (fd, 0)) is None
    with pytest.raises(OSError):
        os.fstat(fd)


def test_a_failed_new_master_s_side_is_forgotten() -> None:
    class Counts:
        side = 1
        cleared: list[int] = []

        def clear_side(self, side: int) -> None:
            self.cleared.append(side)

    counts = Counts()
    rate_limits.forget_other_side(counts)
    assert counts.cleared == [0]
    rate_limits.forget_other_side(None)
