"""Where the history store is, and opening it.

Chosen by ``--history-store`` (pytest and CLI), else ``SGLPERF_HISTORY``, else an SQLite file in the
user's data folder (``$XDG_DATA_HOME/sglperf/history.sqlite``, by default under ~/.local/share):
never inside a checkout, whose clean (``actions/checkout`` runs ``git clean -ffdx``) would delete it.
A ``postgresql://`` URL selects PostgreSQL; ``off`` records nothing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sglperf.history.sql_store import SqlHistoryStore

HISTORY_ENV = "SGLPERF_HISTORY"
POSTGRES_URL_PATTERN = re.compile(r"^postgres(ql)?://")
OFF = "off"
STORE_FILE = "history.sqlite"


def default_path() -> Path:
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "sglperf" / STORE_FILE


def chosen(option: str | None = None) -> str:
    """The store's location as given: an option, the environment, or the default file."""
    return option or os.environ.get(HISTORY_ENV) or str(default_path())


def open_store(location: str) -> SqlHistoryStore | None:
    """The store at ``location`` (migrated to this sglperf's schema); None when it is ``off``.
    Raises HistoryError with one line when it cannot be used."""
    # The store and its records (pydantic, numpy) load here, not with this module: the CLI's parser and
    # the pytest plugin name HISTORY_ENV on every start.
    from sglperf.history.postgres_backend import PostgresBackend
    from sglperf.history.sql_store import SqlHistoryStore
    from sglperf.history.sqlite_backend import SqliteBackend

    if location == OFF:
        return None
    if POSTGRES_URL_PATTERN.match(location):
        return SqlHistoryStore(PostgresBackend(location))
    return SqlHistoryStore(SqliteBackend(Path(location).expanduser()))
