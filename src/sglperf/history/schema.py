"""The history store's schema, as numbered migrations in SQL both SQLite and PostgreSQL run.

A store records its version in ``sglperf_meta``; opening one applies the migrations it lacks, in
one transaction, and refuses a store whose version is newer than the last migration here (a newer
sglperf wrote it: this one would misread it). Migrations only ever add; a released one never changes.
"""

from __future__ import annotations

META_TABLE = "sglperf_meta"
VERSION_KEY = "schema_version"

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: runs, their measurements (the whole record as JSON, plus the columns series are read by),
    # each metric's median per measurement, and the verdicts.
    (
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            recorded_at TEXT NOT NULL,
            runner TEXT NOT NULL,
            gpus TEXT NOT NULL,
            sglang_version TEXT NOT NULL,
            args_digest TEXT NOT NULL,
            deployment_commit TEXT NOT NULL,
            emulated INTEGER NOT NULL,
            source TEXT NOT NULL,
            stored_at TEXT NOT NULL)""",
        """CREATE TABLE measurements (
            run_id TEXT NOT NULL REFERENCES runs (run_id),
            item TEXT NOT NULL,
            runner TEXT NOT NULL,
            emulated INTEGER NOT NULL,
            sglang_version TEXT NOT NULL,
            args_digest TEXT NOT NULL,
            failed INTEGER NOT NULL,
            detail TEXT NOT NULL,
            record TEXT NOT NULL,
            PRIMARY KEY (run_id, item))""",
        """CREATE TABLE metric_values (
            run_id TEXT NOT NULL REFERENCES runs (run_id),
            item TEXT NOT NULL,
            metric TEXT NOT NULL,
            median DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (run_id, item, metric))""",
        """CREATE TABLE verdicts (
            run_id TEXT NOT NULL REFERENCES runs (run_id),
            n INTEGER NOT NULL,
            item TEXT NOT NULL,
            tier TEXT NOT NULL,
            sglang_version TEXT NOT NULL,
            status TEXT NOT NULL,
            failed INTEGER NOT NULL,
            record TEXT NOT NULL,
            PRIMARY KEY (run_id, n))""",
        "CREATE INDEX runs_by_time ON runs (recorded_at)",
        "CREATE INDEX metric_values_by_series ON metric_values (item, metric)",
        "CREATE INDEX verdicts_by_item ON verdicts (item, tier)",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)
