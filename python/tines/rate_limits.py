"""The rate limits' shared table, the master's side (ADR 0038, docs/rate-limits.md).

Owns: whether a table is needed (``needs_table``: a rate or a path rule is set) and getting one
(``ensure``): the one an old master passed on USR2 (its memfd named in
``tines.upgrade.ENV_RATE_TABLE_FD``), else a new one, made before the first worker that needs it
is forked, so every worker maps the same pages. The master keeps it for its whole life: a reload
(HUP) keeps every client's bucket, and an upgrade passes it on. Likewise the per-client
connection counts of ``max_connections_per_client`` (``ensure_connections``): kept across a
reload, passed on USR2 with the side the old master's workers write
(``tines.upgrade.ENV_CONNECTIONS``), forgotten on the other side when the other master is gone.

Must not: check requests (the workers' Rust code does), or make a table when no limit is set
(off costs nothing: no mapping).
"""

from __future__ import annotations

import os
from typing import Any

from tines import logs
from tines.config import Config

log = logs.get("arbiter")


def needs_table(cfg: Config) -> bool:
    """Whether ``cfg`` sets any request rate limit."""
    return bool(cfg.rate_limit or cfg.rate_limit_paths)


def ensure(cfg: Config, table: Any, inherited_fd: int | None, scoreboard: Any) -> Any:
    """The table the workers of ``cfg`` use: ``table`` when there is one already; else the one
    in ``inherited_fd`` (an upgrade's, adopted when its size is ``rate_limit_table_size``'s),
    else a new one when ``cfg`` needs one; None when it needs none. The scoreboard is told its
    size and fill (the status page's gauges)."""
    if table is not None or not needs_table(cfg):
        if inherited_fd is not None and table is None:
            os.close(inherited_fd)  # the old master's table, which these settings do not use
        return table
    import tines._core as _core

    size = cfg.rate_limit_table_size
    if inherited_fd is not None:
        try:
            table = _core.RateTable.adopt(inherited_fd, size)
            log.info("rate limits: kept the old master's table of %d entries", table.capacity)
        except OSError as error:
            log.warning("rate limits: the old master's table is not used (%s): clients start "
                        "with full buckets", error)
    if table is None:
        table = _core.RateTable(size, int.from_bytes(os.urandom(8), "little"))
    scoreboard.set_rate_table(table.capacity, table.entries_in_use())
    return table


def ensure_connections(cfg: Config, counts: Any, scoreboard: Any,
                       inherited: tuple[int, int] | None = None) -> Any:
    """The per-client connection counts the workers of ``cfg`` use: ``counts`` when there are
    some already; else, when ``cfg`` caps connections per client, the ones an old master passed
    on USR2 (``inherited``: their memfd and the side its workers write; adopted when sized as
    this master's, so connections still open on the old workers keep counting), or new ones
    (sized for ``max_connections`` per worker); None when it does not cap them."""
    if counts is not None or not cfg.max_connections_per_client:
        if inherited is not None and counts is None:
            os.close(inherited[0])  # the old master's counts, which these settings do not use
        return counts
    import tines._core as _core

    if inherited is not None:
        fd, old_side = inherited
        try:
            counts = _core.ClientConnections.adopt(fd, scoreboard.slots, cfg.max_connections, old_side)
            log.info("max_connections_per_client: kept the old master's connection counts")
            return counts
        except OSError as error:
            log.warning("max_connections_per_client: the old master's counts are not used (%s): its "
                        "workers' open connections are not counted here", error)
    return _core.ClientConnections(scoreboard.slots, cfg.max_connections, int.from_bytes(os.urandom(8), "little"))


def passed_connections(counts: Any) -> tuple[int, int] | None:
    """What an upgrade passes of ``counts`` (``tines.upgrade.ENV_CONNECTIONS``): their memfd and
    the side this master's workers write; None without counts."""
    return None if counts is None else (counts.fd, counts.side)


def forget_other_side(counts: Any) -> None:
    """The other master of an upgrade is gone with its workers (a new master that failed, or the
    old master after the hand-over): forget what they counted (on the side this master's do not
    write), so that no count of a connection that is gone holds a client back."""
    if counts is not None:
        counts.clear_side(1 - counts.side)
