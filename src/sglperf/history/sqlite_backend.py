"""The default history store: one SQLite file, outside any checkout (a checkout's clean deletes it).

Several pytest processes of one machine may write at once: writers take SQLite's write lock at the
start of their transaction (``BEGIN IMMEDIATE``) and wait up to ``BUSY_TIMEOUT_S`` for it. The
journal stays SQLite's default (rollback): switching a new file to a write-ahead log is refused at
once, without waiting, when two processes create the store together. A file that is not an SQLite
database is named and left as it is.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sglperf.history.sql_store import Connection, Cursor

BUSY_TIMEOUT_S = 30.0


class SqliteBackend:
    def __init__(self, path: Path):
        self.path = path
        self.where = str(path)

    def connect(self) -> Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: transactions are begun and ended by the store itself.
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            conn.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            conn.close()
            raise
        return conn

    def sql(self, statement: str) -> str:
        return statement

    def begin(self, cursor: Cursor, *, schema: bool) -> None:
        cursor.execute("BEGIN IMMEDIATE")

    def problem(self, exc: BaseException) -> str | None:
        if isinstance(exc, sqlite3.DatabaseError):
            text = str(exc)
            if "locked" in text or "busy" in text:
                return f"{text} (another process held it for {BUSY_TIMEOUT_S:.0f} s)"
            if "not a database" in text:
                return f"{text}: not an SQLite file; left as it is, point SGLPERF_HISTORY elsewhere"
            return text
        if isinstance(exc, OSError):
            return f"{exc.strerror or exc}"
        return None
