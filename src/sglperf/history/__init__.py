"""Run history: results folders read back, the store every run is appended to, and what is read out
of it (series for drift, failing streaks, two runs compared).

One store interface (`sql_store.SqlHistoryStore`) over two backends: an SQLite file in the user's
data folder by default (`sqlite_backend`), PostgreSQL by URL for a fleet (`postgres_backend`);
`location` picks one. The schema is versioned (`schema`). Recording is idempotent per run id and
atomic per run; a store that cannot be used is a `HistoryError` with one line, and never changes a
run's pass/fail: its results folder is complete, and `sglperf history import` adds it later.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from sglperf.history.location import HISTORY_ENV, chosen, open_store

if TYPE_CHECKING:
    from sglperf.history.sql_store import HistoryError, SqlHistoryStore

__all__ = ["HISTORY_ENV", "HistoryError", "SqlHistoryStore", "chosen", "open_store"]


def __getattr__(name: str) -> Any:
    # The store's module (records, pydantic, numpy: 0.3 s) loads when a name of it is first used, not
    # with `from sglperf.history import HISTORY_ENV`.
    if name in ("HistoryError", "SqlHistoryStore"):
        value = getattr(importlib.import_module("sglperf.history.sql_store"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sglperf.history' has no attribute {name!r}")
