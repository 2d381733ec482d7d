"""Run history: results folders read back, the store every run is appended to, and what is read out
of it (series for drift, failing streaks, two runs compared).

One store interface (`sql_store.SqlHistoryStore`) over two backends: an SQLite file in the user's
data folder by default (`sqlite_backend`), PostgreSQL by URL for a fleet (`postgres_backend`);
`location` picks one. The schema is versioned (`schema`). Recording is idempotent per run id and
atomic per run; a store that cannot be used is a `HistoryError` with one line, and never changes a
run's pass/fail: its results folder is complete, and `sglperf history import` adds it later.
"""

from sglperf.history.location import HISTORY_ENV, chosen, open_store
from sglperf.history.sql_store import HistoryError, SqlHistoryStore

__all__ = ["HISTORY_ENV", "HistoryError", "SqlHistoryStore", "chosen", "open_store"]
