"""docs/migrating.md's tables name real Tines settings and flags.

The Tines column (the last of each table) names settings by their registry name (`` `workers` ``,
`` `max_worker_memory_kind = "rss"` ``) and flags (`` `--mpm thread` ``): each must exist, so a
renamed setting fails here instead of leaving the doc stale. ``root_path`` and ``log_config``
land with issue 40 beside this doc (other parts of it): until the registry has them they are
allowed, by name and flag only; once it has them, their flags must be the ones the doc shows.
The doc's examples are run by tests/python/e2e/test_migrating_docs.py.
"""

from __future__ import annotations

import re
from pathlib import Path

from tines.config.registry import SETTINGS

DOC = Path(__file__).resolve().parents[3] / "docs" / "migrating.md"
ARRIVING = {"root_path": "--root-path", "log_config": "--log-config"}
"""Issue 40's new settings (registry name: flag), landing beside this doc."""
CODE = re.compile(r"`([^`]+)`")
NAME = re.compile(r"^([a-z][a-z0-9]*(?:_[a-z0-9]+)+)(?: = .*)?$")
FLAG = re.compile(r"^(--[a-z0-9][a-z0-9-]*)")


def tines_cells() -> list[tuple[int, str]]:
    """(line, text) of the last cell of every table row of the doc but the header rows."""
    cells = []
    lines = DOC.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        if not line.startswith("|") or set(line) <= set("|- "):
            continue
        if number < len(lines) and set(lines[number]) <= set("|- "):
            continue  # a header: the separator row follows it
        cells.append((number, line.strip("|").split(" | ")[-1]))
    return cells


def known_flags() -> set[str]:
    """Every Tines flag, the ``--no-`` forms of on/off settings included."""
    flags = {flag for setting in SETTINGS.values() for flag in setting.flags}
    flags |= {f"--no-{flag[2:]}" for setting in SETTINGS.values() if setting.is_flag
              for flag in setting.flags if flag.startswith("--")}
    return flags


def test_the_tables_are_found() -> None:
    """The parse sees the four servers' tables (a doc reshaped out of the parser's reach would
    make the next test pass on nothing)."""
    assert len(tines_cells()) > 80


def test_the_tines_column_names_real_settings_and_flags() -> None:
    """Every setting name and flag in a Tines cell exists (or is one of issue 40's arriving)."""
    flags = known_flags()
    wrong = []
    for number, cell in tines_cells():
        for code in CODE.findall(cell):
            name, flag = NAME.match(code), FLAG.match(code)
            if name and name[1] not in SETTINGS and name[1] not in ARRIVING:
                wrong.append((number, code))
            if flag and flag[1] not in flags and flag[1] not in ARRIVING.values():
                wrong.append((number, code))
    assert wrong == []


def test_arriving_settings_have_the_doc_s_flags() -> None:
    """Once ``root_path`` and ``log_config`` are in the registry, their flags are the doc's."""
    for name, flag in ARRIVING.items():
        if name in SETTINGS:
            assert flag in SETTINGS[name].flags, name


def peer_rows(server: str) -> list[tuple[int, list[str], list[str]]]:
    """(line, their setting names, their flags) of each row of ``server``'s table (gunicorn's,
    uvicorn's): the first cell's names and the second cell's flags."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    header = f"| {server} | flag | Tines |"
    start = lines.index(header) + 2
    rows = []
    for number in range(start, len(lines)):
        if not lines[number].startswith("|"):
            break
        theirs, flags = lines[number].strip("|").split(" | ")[:2]
        rows.append((number + 1, [code for code in CODE.findall(theirs) if re.fullmatch(r"[a-z][a-z0-9_]*", code)],
                     [code for code in CODE.findall(flags) if code.startswith("-")]))
    return rows


DOC_ONLY = {("uvicorn", "app")}
"""Their names the doc's tables show that are not settings of theirs (uvicorn's positional APP)."""


def test_their_names_and_flags_are_the_peer_table_s() -> None:
    """gunicorn's and uvicorn's rows name settings `tines.config.peers` has, with its flags, so
    the doc and what the command line does are one table's."""
    from tines.config import peers

    wrong = []
    for server in ("gunicorn", "uvicorn"):
        rows = peer_rows(server)
        assert len(rows) > 20, server
        for number, names, flags in rows:
            known = [peers.find(server, name) for name in names if (server, name) not in DOC_ONLY]
            if None in known or not names:
                wrong.append((number, names, "not a setting of theirs in peers.py"))
                continue
            theirs = {flag for row in known if row is not None for flag in row.flags}
            wrong += [(number, flag, "not their flag in peers.py") for flag in flags if flag not in theirs]
    assert wrong == []
