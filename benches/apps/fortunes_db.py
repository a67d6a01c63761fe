"""The fortunes database of the TechEmpower-style ``/fortunes`` test: a SQLite file with the
twelve fortunes of the TechEmpower rules (markup and non-ASCII included, so escaping and
encoding are exercised). ``create(path)`` (re)writes it; the suite calls it once per run.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

FORTUNES = [
    (1, "fortune: No such file or directory"),
    (2, "A computer scientist is someone who fixes things that aren't broken."),
    (3, "After enough decimal places, nobody gives a damn."),
    (4, "A bad random number generator: 1, 1, 1, 1, 1, 4.33e+67, 1, 1, 1"),
    (5, "A computer program does what you tell it to do, not what you want it to do."),
    (6, "Emacs is a nice operating system, but I prefer UNIX. \u2014 Tom Christaensen"),
    (7, "Any program that runs right is obsolete."),
    (8, "A list is only as strong as its weakest link. \u2014 Donald Knuth"),
    (9, "Feature: A bug with seniority."),
    (10, "Computers make very fast, very accurate mistakes."),
    (11, '<script>alert("This should not be displayed in a browser alert box.");</script>'),
    (12, "\u30d5\u30ec\u30fc\u30e0\u30ef\u30fc\u30af\u306e\u30d9\u30f3\u30c1\u30de\u30fc\u30af"),
]


def create(path: Path) -> Path:
    """Write a fresh fortunes database at ``path`` and return it."""
    path.unlink(missing_ok=True)
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE fortune (id INTEGER PRIMARY KEY, message TEXT NOT NULL)")
        connection.executemany("INSERT INTO fortune (id, message) VALUES (?, ?)", FORTUNES)
    connection.close()
    return path
