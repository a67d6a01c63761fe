"""The blog's database: one SQLite connection per worker thread, never carried across fork.

``db()`` is this thread's connection (opened on first use in this process); the hooks module
(``tines_hooks.py``) calls it in ``post_fork``, so each worker opens its connection (and, on an
empty file, creates and seeds the schema) at start, and a database that cannot be opened stops
the start with a clear error instead of failing the first request. See README.md.

A module of its own so that the app and the hooks module share it: both import it by name.
"""

from __future__ import annotations

import datetime
import os
import secrets
import sqlite3
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DB = os.path.join(HERE, "blog.sqlite3")

SCHEMA = """
CREATE TABLE IF NOT EXISTS blog (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    title         TEXT    NOT NULL,
    body          TEXT    NOT NULL,
    created_at    TEXT    NOT NULL,
    updated_at    TEXT    NOT NULL,
    lock_revision INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS blog_created_at ON blog (created_at);
CREATE TABLE IF NOT EXISTS app_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""

SEED_POSTS = [
    ("Hello, Tines", "The first post: TreeFrog's blog tutorial, served by a Rust core."),
    ("Prefork or threads?", "Each worker process keeps one SQLite connection per thread."),
    ("Escaping", "Titles and bodies are shown through Jinja with autoescaping on: <b>not bold</b>."),
]

# The only mutable module-level state: per-thread database connections (see db()).
_local = threading.local()


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


BUSY_SECONDS = 10.0
"""How long a connection waits for another one's lock (busy_timeout, and the switch to WAL)."""


def _use_wal(conn: sqlite3.Connection) -> None:
    """Switch the file to WAL. The switch needs an exclusive lock and SQLite answers "database
    is locked" at once rather than calling the busy handler: when several workers open a new
    file together (each opens its connection in post_fork), the others wait for the first."""
    deadline = time.monotonic() + BUSY_SECONDS
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _open() -> sqlite3.Connection:
    path = os.environ.get("BLOG_DB") or DEFAULT_DB
    # isolation_level=None: autocommit; each single-statement write is its own transaction and
    # the few multi-statement ones say BEGIN IMMEDIATE themselves.
    conn = sqlite3.connect(path, timeout=BUSY_SECONDS, isolation_level=None)
    conn.row_factory = sqlite3.Row
    # busy_timeout first: several worker processes may open (and write) the file at once.
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_SECONDS * 1000)}")
    _use_wal(conn)
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.executescript(SCHEMA)
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("SELECT NOT EXISTS (SELECT 1 FROM blog)").fetchone()[0]:
            for title, body in SEED_POSTS:
                created = now()
                conn.execute(
                    "INSERT INTO blog (title, body, created_at, updated_at, lock_revision)"
                    " VALUES (?, ?, ?, ?, 1)",
                    (title, body, created, created),
                )
        # The CSRF secret lives in the database so every worker process shares it (a secret made
        # at import would differ between workers unless the app was preloaded).
        conn.execute(
            "INSERT OR IGNORE INTO app_meta (key, value) VALUES ('csrf_secret', ?)",
            (secrets.token_hex(32),),
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return conn


def db() -> sqlite3.Connection:
    """This thread's connection, opened on first use in this process.

    Never per request, and never across fork: a connection opened before a fork (say, by a
    master that imported and warmed up the app) is left untouched in the child, not even
    closed -- closing it there could checkpoint or delete the WAL under the parent's feet --
    and the child opens its own. (The mod_perl guide's rule: open DB handles in the child.)
    """
    conn = getattr(_local, "conn", None)
    pid = os.getpid()
    if conn is None or _local.pid != pid:
        if conn is not None:
            # Inherited from the parent: keep a reference so it is never finalised here.
            _local.inherited = getattr(_local, "inherited", []) + [conn]
        conn = _open()
        _local.conn = conn
        _local.pid = pid
        _local.secret = None
    return conn


def secret() -> bytes:
    env = os.environ.get("BLOG_SECRET")
    if env:
        return env.encode()
    conn = db()
    if _local.secret is None:
        row = conn.execute("SELECT value FROM app_meta WHERE key = 'csrf_secret'").fetchone()
        _local.secret = row[0].encode()
    return _local.secret
