"""The rate limits' shared table, the master's side (ADR 0038, docs/rate-limits.md).

Owns: whether a table is needed (``needs_table``: a rate, a path rule or a connection cap is
set) and getting one (``ensure``): the one an old master passed on USR2 (its memfd named in
``tines.upgrade.ENV_RATE_TABLE_FD``), else a new one, made before the first worker that needs it
is forked, so every worker maps the same pages. The master keeps it for its whole life: a reload
(HUP) keeps every client's bucket, and an upgrade passes it on.

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
    """Whether ``cfg`` sets any rate limit or the per-client connection cap."""
    return bool(cfg.rate_limit or cfg.rate_limit_paths or cfg.max_connections_per_client)


def ensure(cfg: Config, table: Any, inherited_fd: int | None, scoreboard: Any) -> Any:
    """The table the workers of ``cfg`` use: ``table`` when there is one already; else the one
    in ``inherited_fd`` (an upgrade's, adopted when its size is ``rate_limit_table_size``'s),
    else a new one when ``cfg`` needs one; None when it needs none. The scoreboard is told its
    size and fill (the status page's gauges)."""
    if table is not None or not needs_table(cfg):
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
