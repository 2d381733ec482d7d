"""The history store in PostgreSQL, for a fleet of runners writing to one place (psycopg 3).

The URL is a libpq connection URI (``postgresql://user:password@host:5432/db``); messages show it
without its password. Creating the tables is serialised with a transaction-level advisory lock, so
runners that open a new database at the same moment do not race; runs need no lock: a run id stored
twice conflicts on its primary key and the second writer stores nothing.
"""

from __future__ import annotations

import re

from sglperf.history.sql_store import Connection, Cursor

CONNECT_TIMEOUT_S = 10
SCHEMA_LOCK = 0x5367_6C70  # the advisory lock's key: "Sglp"


def without_password(url: str) -> str:
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


class PostgresBackend:
    def __init__(self, url: str):
        self.url = url
        self.where = without_password(url)

    def connect(self) -> Connection:
        try:
            import psycopg
        except ImportError as exc:
            raise _MissingDriver(
                "psycopg is not installed: `pip install 'psycopg[binary]'` (or install sglperf[postgres])"
            ) from exc
        conn: Connection = psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        return conn

    def sql(self, statement: str) -> str:
        return statement.replace("?", "%s")

    def begin(self, cursor: Cursor, *, schema: bool) -> None:
        cursor.execute("BEGIN")
        if schema:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))

    def problem(self, exc: BaseException) -> str | None:
        if isinstance(exc, _MissingDriver):
            return str(exc)
        try:
            import psycopg
        except ImportError:
            return None
        if isinstance(exc, psycopg.Error):
            return " ".join(str(exc).replace(self.url, self.where).split())[:400]
        return None


class _MissingDriver(RuntimeError):
    pass
