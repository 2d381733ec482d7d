"""The history store over SQL: everything but connecting, shared by the SQLite and PostgreSQL backends.

Writes are one transaction per run: a run is either wholly visible or absent (a killed writer's
transaction is rolled back by the database), and a run id already stored is left as it is, so
recording a run twice, or importing a folder again, adds nothing. Reads order runs by their
recorded time (then id), never by where they came from.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict
from typing import Any, Protocol

from pydantic import ValidationError

from sglperf.errors import SglperfError
from sglperf.history.records import ItemOutcome, RunIdentity, SeriesPoint, StoredRun, measurement_failed
from sglperf.history.schema import META_TABLE, MIGRATIONS, SCHEMA_VERSION, VERSION_KEY
from sglperf.model.files import strict_json
from sglperf.model.measurement import MeasurementRecord
from sglperf.model.verdict import Verdict


class HistoryError(SglperfError, RuntimeError):
    """The history store cannot be used; the message names the store and what to do."""


class Cursor(Protocol):
    rowcount: int

    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def fetchone(self) -> Any: ...


class Connection(Protocol):
    def cursor(self) -> Any: ...
    def close(self) -> None: ...


class Backend(Protocol):
    """How to reach one kind of database, and how to read its errors."""

    where: str  # names the store in messages (a path, or a URL without its password)

    def connect(self) -> Connection: ...
    def sql(self, statement: str) -> str:
        """``statement`` (written with ``?`` placeholders) in the driver's parameter style."""
        ...

    def begin(self, cursor: Cursor, *, schema: bool) -> None:
        """Start a write transaction (``schema``: one that may create tables, serialised)."""
        ...

    def problem(self, exc: BaseException) -> str | None:
        """One line for a database error; None when ``exc`` is not one."""
        ...


RUN_COLUMNS = (
    "run_id, recorded_at, runner, gpus, sglang_version, args_digest, deployment_commit, emulated, source, stored_at"
)
# The same, for queries that join runs with a table that also has runner / emulated columns.
RUN_SELECT = ", ".join(f"runs.{c.strip()}" for c in RUN_COLUMNS.split(","))


class SqlHistoryStore:
    """A run-history store on one database connection."""

    def __init__(self, backend: Backend):
        self.backend = backend
        with self._errors("cannot open it"):
            self._conn = backend.connect()
        try:
            self._migrate()
        except BaseException:
            self._conn.close()
            raise

    # -- plumbing -------------------------------------------------------------------------------

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except HistoryError:
            raise
        except Exception as exc:
            problem = self.backend.problem(exc)
            if problem is None:
                raise
            raise HistoryError(f"history store {self.backend.where}: {doing}: {problem}") from None

    @contextmanager
    def _transaction(self, doing: str, *, schema: bool = False) -> Iterator[Cursor]:
        with self._errors(doing):
            cursor = self._conn.cursor()
            self.backend.begin(cursor, schema=schema)
            try:
                yield cursor
            except BaseException:
                # SQLite has rolled back already after some errors (a full disk): the original error is
                # the one to report, not the failed ROLLBACK.
                with suppress(Exception):
                    cursor.execute("ROLLBACK")
                raise
            cursor.execute("COMMIT")

    def _run(self, cursor: Cursor, statement: str, params: Sequence[Any] = ()) -> Any:
        return cursor.execute(self.backend.sql(statement), tuple(params))

    def _read(self, statement: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._errors("cannot read it"):
            cursor = self._conn.cursor()
            self._run(cursor, statement, params)
            return list(cursor.fetchall())

    def close(self) -> None:
        self._conn.close()

    def _migrate(self) -> None:
        with self._transaction("cannot set up its tables", schema=True) as cursor:
            self._run(cursor, f"CREATE TABLE IF NOT EXISTS {META_TABLE} (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self._run(cursor, f"SELECT value FROM {META_TABLE} WHERE name = ?", (VERSION_KEY,))
            row = cursor.fetchone()
            try:
                version = int(row[0]) if row else 0
            except ValueError:
                raise HistoryError(
                    f"history store {self.backend.where}: its schema version {str(row[0])[:40]!r} is not a number; "
                    "left as it is, use another store (--history-store / SGLPERF_HISTORY)"
                ) from None
            if version > SCHEMA_VERSION:
                raise HistoryError(
                    f"history store {self.backend.where}: schema version {version} is newer than this sglperf's "
                    f"({SCHEMA_VERSION}): a newer sglperf wrote it; upgrade sglperf, or use another store "
                    "(--history-store / SGLPERF_HISTORY)"
                )
            for statements in MIGRATIONS[version:]:
                for statement in statements:
                    self._run(cursor, statement)
            if version < SCHEMA_VERSION:
                self._run(cursor, f"DELETE FROM {META_TABLE} WHERE name = ?", (VERSION_KEY,))
                self._run(
                    cursor, f"INSERT INTO {META_TABLE} (name, value) VALUES (?, ?)", (VERSION_KEY, str(SCHEMA_VERSION))
                )

    # -- writing --------------------------------------------------------------------------------

    def add_run(self, run: StoredRun) -> bool:
        """Store a run whole; False (and nothing written) when its run id is already stored."""
        ident = run.identity
        stored_at = _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()
        with self._transaction(f"cannot record run {ident.run_id}") as cursor:
            self._run(
                cursor,
                f"INSERT INTO runs ({RUN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (run_id) DO NOTHING",
                (
                    ident.run_id,
                    ident.recorded_at,
                    ident.runner,
                    ident.gpus,
                    ident.sglang_version,
                    ident.args_digest,
                    ident.deployment_commit,
                    int(ident.emulated),
                    ident.source,
                    stored_at,
                ),
            )
            if cursor.rowcount != 1:
                return False  # the transaction commits nothing
            for record in run.measurements:
                self._run(
                    cursor,
                    "INSERT INTO measurements (run_id, item, runner, emulated, sglang_version, args_digest, failed, "
                    "detail, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        ident.run_id,
                        record.key,
                        record.provenance.runner,
                        int(record.emulated),
                        record.sglang_version,
                        record.provenance.effective_args_digest,
                        int(measurement_failed(record)),
                        _measurement_detail(record),
                        record.model_dump_json(),
                    ),
                )
                for metric, median in sorted(record.medians.items()):
                    self._run(
                        cursor,
                        "INSERT INTO metric_values (run_id, item, metric, median) VALUES (?, ?, ?, ?)",
                        (ident.run_id, record.key, metric, median),
                    )
            for n, verdict in enumerate(run.verdicts):
                self._run(
                    cursor,
                    "INSERT INTO verdicts (run_id, n, item, tier, sglang_version, status, failed, record) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        ident.run_id,
                        n,
                        verdict.test_id,
                        verdict.tier,
                        verdict.sglang_version,
                        verdict.status.value,
                        int(verdict.status.failed),
                        strict_json(verdict.to_record(), sort_keys=True),
                    ),
                )
        return True

    # -- reading --------------------------------------------------------------------------------

    def runs(self) -> list[RunIdentity]:
        """Every stored run, oldest first."""
        rows = self._read(f"SELECT {RUN_COLUMNS} FROM runs ORDER BY recorded_at, run_id")
        return [_identity(row) for row in rows]

    def run(self, run_id: str) -> StoredRun | None:
        rows = self._read(f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,))
        if not rows:
            return None
        measurements = self._read("SELECT record FROM measurements WHERE run_id = ? ORDER BY item", (run_id,))
        verdicts = self._read("SELECT record FROM verdicts WHERE run_id = ? ORDER BY n", (run_id,))
        where = f"history store {self.backend.where}: run {run_id}"
        try:
            return StoredRun(
                _identity(rows[0]),
                tuple(MeasurementRecord.model_validate_json(r[0]) for r in measurements),
                tuple(Verdict.from_record(json.loads(r[0])) for r in verdicts),
            )
        except (ValidationError, ValueError, KeyError, TypeError) as exc:
            raise HistoryError(f"{where}: a stored record cannot be read back ({exc}); left as it is") from None

    def series(self, item: str, metric: str, runner: str, emulated: bool) -> list[SeriesPoint]:
        """One metric's median per run for one measurement item on one runner, oldest first."""
        rows = self._read(
            f"SELECT {RUN_SELECT}, v.median FROM metric_values v "
            "JOIN measurements m ON m.run_id = v.run_id AND m.item = v.item "
            "JOIN runs ON runs.run_id = v.run_id "
            "WHERE v.item = ? AND v.metric = ? AND m.runner = ? AND m.emulated = ? "
            "ORDER BY runs.recorded_at, runs.run_id",
            (item, metric, runner, int(emulated)),
        )
        return [
            SeriesPoint((ident := _identity(row)).run_id, ident.recorded_at, ident.label, float(row[-1]))
            for row in rows
        ]

    def metrics_of(self, item: str, runner: str, emulated: bool) -> list[str]:
        rows = self._read(
            "SELECT DISTINCT v.metric FROM metric_values v "
            "JOIN measurements m ON m.run_id = v.run_id AND m.item = v.item "
            "WHERE v.item = ? AND m.runner = ? AND m.emulated = ? ORDER BY v.metric",
            (item, runner, int(emulated)),
        )
        return [str(r[0]) for r in rows]

    def measurement_outcomes(self, item: str, runner: str, emulated: bool) -> list[ItemOutcome]:
        """Whether a measurement item failed, per run, newest first."""
        rows = self._read(
            f"SELECT {RUN_SELECT}, m.failed, m.detail, m.sglang_version, m.args_digest FROM measurements m "
            "JOIN runs ON runs.run_id = m.run_id WHERE m.item = ? AND m.runner = ? AND m.emulated = ? "
            "ORDER BY runs.recorded_at DESC, runs.run_id DESC",
            (item, runner, int(emulated)),
        )
        return [ItemOutcome(_identity(row), bool(row[-4]), str(row[-3]), str(row[-2]), str(row[-1])) for row in rows]

    def verdict_outcomes(self, item: str, tier: str) -> list[ItemOutcome]:
        """Whether an intent's verdict failed in a tier, per run, newest first."""
        rows = self._read(
            f"SELECT {RUN_SELECT}, MAX(v.failed), MIN(v.status), MIN(v.sglang_version) FROM verdicts v "
            f"JOIN runs ON runs.run_id = v.run_id WHERE v.item = ? AND v.tier = ? GROUP BY {RUN_SELECT} "
            "ORDER BY runs.recorded_at DESC, runs.run_id DESC",
            (item, tier),
        )
        return [
            ItemOutcome((ident := _identity(row)), bool(row[-3]), str(row[-2]), str(row[-1]), ident.args_digest)
            for row in rows
        ]

    def export_lines(self) -> Iterator[str]:
        """Every run as one JSON line (identity, measurement records, verdict records), oldest first."""
        for ident in self.runs():
            run = self.run(ident.run_id)
            if run is not None:
                yield export_line(run)


def export_line(run: StoredRun) -> str:
    return strict_json(
        {
            "run": asdict(run.identity),
            "measurements": [json.loads(m.model_dump_json()) for m in run.measurements],
            "verdicts": [v.to_record() for v in run.verdicts],
        },
        sort_keys=True,
    )


def _identity(row: Sequence[Any]) -> RunIdentity:
    return RunIdentity(
        run_id=str(row[0]),
        recorded_at=str(row[1]),
        runner=str(row[2]),
        gpus=str(row[3]),
        sglang_version=str(row[4]),
        args_digest=str(row[5]),
        deployment_commit=str(row[6]),
        emulated=bool(row[7]),
        source=str(row[8]),
    )


def _measurement_detail(record: MeasurementRecord) -> str:
    if record.problems:
        return record.problems[0]
    regressed = [c.metric for c in record.comparisons if c.outcome.fails]
    return f"regressed: {', '.join(regressed)}" if regressed else record.baseline_status.value
