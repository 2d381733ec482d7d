"""The run-history store, against SQLite and a real PostgreSQL server the tests start themselves."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sglperf import cli
from sglperf.history import HistoryError, SqlHistoryStore, ingest, open_store
from sglperf.history.compare import compare_runs, render
from sglperf.history.records import RunIdentity, StoredRun
from sglperf.history.results_folder import RunStamp, collect
from sglperf.history.schema import SCHEMA_VERSION
from sglperf.history.streaks import failing_streak
from sglperf.model.measurement import MeasurementRecord, MetricComparison, Provenance, SampleSummary
from sglperf.model.metrics import MetricOutcome
from sglperf.model.verdict import Status, Verdict

REPO = Path(__file__).resolve().parents[1]


def _record(
    run_id: str | None, decode: float, *, regressed: bool = False, key: str = "qwen36-mtp1-chat-c1"
) -> MeasurementRecord:
    comparisons = (
        [
            MetricComparison(
                metric="decode_tok_s",
                baseline_median=70.0,
                current_median=decode,
                change=decode / 70.0 - 1,
                threshold=0.03,
                p_value=0.001,
                outcome=MetricOutcome.REGRESSION,
                message="",
                n_baseline=3,
                n_current=3,
            )
        ]
        if regressed
        else []
    )
    return MeasurementRecord(
        key=key,
        run_id=run_id,
        deployment="qwen36",
        variant="mtp1",
        workload="chat",
        concurrency=1,
        emulated=False,
        sglang_version="0.5.23",
        provenance=Provenance(
            sglang_version="0.5.23",
            runner="2xA6000",
            date="2026-01-01T00:00:00+00:00",
            effective_args_digest="digest-a" if not regressed else "digest-b",
            launch_command="python -m sglang.launch_server",
        ),
        samples={"decode_tok_s": [decode] * 3},
        summary={"decode_tok_s": SampleSummary(n=3, median=decode, p10=decode, p90=decode)},
        baseline="baselines/qwen36/mtp1.json",
        comparisons=comparisons,
    )


def _verdict(status: Status = Status.PASS) -> Verdict:
    return Verdict("qwen36", "mtp1", "prefill_cuda_graph", "on", "on", status, "detail", "0.5.23")


def _run(
    run_id: str, day: int, decode: float = 70.0, *, regressed: bool = False, status: Status = Status.PASS
) -> StoredRun:
    ident = RunIdentity(
        run_id=run_id,
        recorded_at=f"2026-01-{day:02d}T00:00:00+00:00",
        runner="2xA6000",
        gpus="2x NVIDIA RTX A6000",
        sglang_version="0.5.23",
        args_digest="digest-a",
        deployment_commit="abc123",
        emulated=False,
        source="/results/x",
    )
    return StoredRun(ident, (_record(run_id, decode, regressed=regressed),), (_verdict(status),))


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store of each backend (a new database on the session's PostgreSQL server)."""
    if request.param == "sqlite":
        yield str(tmp_path / "history.sqlite")
        return
    import psycopg

    server = request.getfixturevalue("postgres")
    name = f"h_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.url(), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield server.url(database=name)


@pytest.fixture
def store(location: str) -> Iterator[SqlHistoryStore]:
    opened = open_store(location)
    assert opened is not None
    yield opened
    opened.close()


def test_a_run_reads_back_whole_and_runs_are_ordered_by_recorded_time(store: SqlHistoryStore) -> None:
    late, early = _run("z-first-stored", 9, 65.0), _run("a-second-stored", 2, 71.0)
    assert store.add_run(late) and store.add_run(early)
    assert [r.run_id for r in store.runs()] == ["a-second-stored", "z-first-stored"]
    back = store.run("z-first-stored")
    assert back == late
    points = store.series("qwen36-mtp1-chat-c1", "decode_tok_s", "2xA6000", False)
    assert [(p.run_id, p.value) for p in points] == [("a-second-stored", 71.0), ("z-first-stored", 65.0)]
    assert store.series("qwen36-mtp1-chat-c1", "decode_tok_s", "other-runner", False) == []  # never mixed
    assert store.run("no-such-run") is None


def test_recording_a_run_twice_adds_nothing_and_changes_nothing(store: SqlHistoryStore) -> None:
    assert store.add_run(_run("night-1", 1, 70.0))
    assert not store.add_run(_run("night-1", 5, 10.0))  # the same id again, other content: left as it is
    assert [p.value for p in store.series("qwen36-mtp1-chat-c1", "decode_tok_s", "2xA6000", False)] == [70.0]
    assert store.run("night-1") == _run("night-1", 1, 70.0)


def test_a_store_of_a_newer_schema_is_refused_with_one_line(location: str, store: SqlHistoryStore) -> None:
    cursor = store._conn.cursor()
    cursor.execute(store.backend.sql("UPDATE sglperf_meta SET value = ? WHERE name = ?"), ("99", "schema_version"))
    store.close()
    with pytest.raises(HistoryError) as info:
        open_store(location)
    message = str(info.value)
    assert f"schema version 99 is newer than this sglperf's ({SCHEMA_VERSION})" in message
    assert "\n" not in message and "s3cret" not in message


def test_reopening_a_store_keeps_its_runs(location: str, store: SqlHistoryStore) -> None:
    store.add_run(_run("night-1", 1))
    store.close()
    again = open_store(location)
    assert again is not None
    assert [r.run_id for r in again.runs()] == ["night-1"]
    again.close()


def test_failing_since_names_the_first_bad_run_and_what_changed(store: SqlHistoryStore) -> None:
    for n, regressed in enumerate([False, False, True, True, True], 1):
        store.add_run(_run(f"night-{n}", n, 60.0 if regressed else 70.0, regressed=regressed))
    streak = failing_streak("qwen36-mtp1-chat-c1", store.measurement_outcomes("qwen36-mtp1-chat-c1", "2xA6000", False))
    assert streak is not None and streak.runs == 3
    assert streak.first.run.run_id == "night-3" and streak.last_pass is not None
    assert streak.message() == (
        "qwen36-mtp1-chat-c1: failing since 2026-01-03 00:00 (night-3), 3 run(s) in a row; first bad with "
        "SGLang 0.5.23, args digest-b; last passed 2026-01-02 00:00 (night-2) (effective args changed)"
    )
    store.add_run(_run("night-6", 6, 70.0))
    assert failing_streak("x", store.measurement_outcomes("qwen36-mtp1-chat-c1", "2xA6000", False)) is None


def test_failing_since_for_an_intent_verdict(store: SqlHistoryStore) -> None:
    for n, status in enumerate([Status.PASS, Status.INERT, Status.INERT], 1):
        store.add_run(_run(f"night-{n}", n, status=status))
    item = _verdict().test_id
    streak = failing_streak(item, store.verdict_outcomes(item, "preflight"))
    assert streak is not None and streak.runs == 2 and streak.first.run.run_id == "night-2"


# -- two writers at once; a writer killed mid-write ---------------------------------------------------

WRITER = """
import sys
sys.path.insert(0, {tests!r})
from test_history_store import _run
from sglperf.history import open_store
store = open_store(sys.argv[1])
for n in range(10):
    assert store.add_run(_run(f"{{sys.argv[2]}}-{{n}}", 1 + n % 28))
store.close()
"""


def test_two_writers_at_once_lose_nothing(location: str) -> None:
    script = WRITER.format(tests=str(REPO / "tests"))
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    writers = [subprocess.Popen([sys.executable, "-c", script, location, w], env=env) for w in ("a", "b")]
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    opened = open_store(location)
    assert opened is not None
    assert sorted(r.run_id for r in opened.runs()) == sorted(f"{w}-{n}" for w in "ab" for n in range(10))
    opened.close()


KILLED_WRITER = """
import sys, time
sys.path.insert(0, {tests!r})
from test_history_store import _run
from sglperf.history import open_store, sql_store
def stuck(record):  # called inside add_run's transaction, after the run row is written
    print("mid-write", flush=True)
    time.sleep(600)
sql_store.measurement_failed = stuck
open_store(sys.argv[1]).add_run(_run("killed", 3))
"""


def test_a_writer_killed_mid_write_leaves_the_store_readable_and_without_its_run(location: str) -> None:
    opened = open_store(location)
    assert opened is not None
    opened.add_run(_run("before", 1))
    opened.close()
    script = KILLED_WRITER.format(tests=str(REPO / "tests"))
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    writer = subprocess.Popen([sys.executable, "-c", script, location], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "mid-write"
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
    finally:
        writer.kill()
    time.sleep(0.5)  # PostgreSQL notices the dropped connection and rolls its transaction back
    again = open_store(location)
    assert again is not None
    assert [r.run_id for r in again.runs()] == ["before"]
    assert again.add_run(_run("after", 4))  # and writable again
    again.close()


# -- faults: one line each, nothing stored is lost ----------------------------------------------------


def test_an_unreachable_database_is_one_line() -> None:
    from sglperf.runtime.server import free_port

    with pytest.raises(HistoryError) as info:
        open_store(f"postgresql://sglperf:pw@127.0.0.1:{free_port()}/postgres")
    message = str(info.value)
    assert message.startswith("history store postgresql://sglperf:***@127.0.0.1:") and "cannot open it" in message
    assert "\n" not in message and ":pw@" not in message


def test_a_wrong_password_is_one_line_without_the_password(postgres: Any) -> None:
    with pytest.raises(HistoryError) as info:
        open_store(postgres.url(password="wrong-password-given"))
    message = str(info.value)
    assert "password authentication failed" in message and "wrong-password-given" not in message
    assert "\n" not in message


def test_a_locked_sqlite_file_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sglperf.history import sqlite_backend

    path = tmp_path / "history.sqlite"
    opened = open_store(str(path))
    assert opened is not None
    opened.close()
    monkeypatch.setattr(sqlite_backend, "BUSY_TIMEOUT_S", 0.5)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(HistoryError, match=r"database is locked \(another process held it for 0 s\)"):
            open_store(str(path))
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_full_disk_is_one_line_and_the_stored_runs_survive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sglperf.history import sqlite_backend

    path = tmp_path / "history.sqlite"
    opened = open_store(str(path))
    assert opened is not None
    opened.add_run(_run("before", 1))
    opened.close()
    connect = sqlite_backend.SqliteBackend.connect

    def full(self: Any) -> Any:  # SQLite's own SQLITE_FULL: no page may be added
        conn = connect(self)
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")
        return conn

    monkeypatch.setattr(sqlite_backend.SqliteBackend, "connect", full)
    big = _run("big", 2)
    big = StoredRun(big.identity, tuple(_record("big", 70.0, key=f"k{i}-c1") for i in range(200)), big.verdicts)
    opened = open_store(str(path))
    assert opened is not None
    with pytest.raises(HistoryError, match="cannot record run big: database or disk is full"):
        opened.add_run(big)
    assert [r.run_id for r in opened.runs()] == ["before"]
    opened.close()


def test_a_file_that_is_not_a_database_is_named_and_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite"
    path.write_bytes(b"my notes, not a database" * 100)
    with pytest.raises(HistoryError, match="not an SQLite file; left as it is"):
        open_store(str(path))
    assert path.read_bytes() == b"my notes, not a database" * 100


# -- results folders: stamps, import, export, compare ---------------------------------------------------


def _folder(
    path: Path, stamp: RunStamp | None, *records: MeasurementRecord, verdicts: tuple[Verdict, ...] = ()
) -> Path:
    (path / "measurements").mkdir(parents=True, exist_ok=True)
    if stamp is not None:
        stamp.write(path)
    for r in records:
        (path / "measurements" / f"{r.key}.json").write_text(r.model_dump_json())
    with (path / "verdicts-main.jsonl").open("a") as fh:
        for v in verdicts:
            fh.write(json.dumps({**v.to_record(), "run_id": stamp.run_id if stamp else None}) + "\n")
    return path


def test_a_reused_results_folder_reads_back_as_its_latest_run(tmp_path: Path) -> None:
    first, second = RunStamp("run-1", "2026-01-01T00:00:00+00:00"), RunStamp("run-2", "2026-01-02T00:00:00+00:00")
    folder = _folder(tmp_path / "r", first, _record("run-1", 70.0, key="only-in-run-1"), verdicts=(_verdict(),))
    _folder(folder, second, _record("run-2", 65.0), verdicts=(_verdict(Status.FAIL),))
    results = collect(folder)
    assert [m.key for m in results.measurements] == ["qwen36-mtp1-chat-c1"]
    assert [v.status for v in results.verdicts] == [Status.FAIL]
    assert ingest.from_folder(folder).identity.run_id == "run-2"


def test_import_export_and_compare_through_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store_path = str(tmp_path / "h.sqlite")
    old = _folder(tmp_path / "old", None, _record(None, 70.0), verdicts=(_verdict(),))  # from before run ids
    new = _folder(tmp_path / "new", RunStamp("night-2", "2026-02-02T00:00:00+00:00"), _record("night-2", 60.0))
    assert cli.main(["history", "import", str(old), str(new), "--history-store", store_path]) == 0
    assert cli.main(["history", "import", str(old), "--history-store", store_path]) == 0
    said = capsys.readouterr().out.splitlines()
    old_id = ingest.from_folder(old).identity.run_id
    assert said == [
        f"{old_id} 2026-01-01T00:00:00+00:00 {old}: added",
        f"night-2 2026-02-02T00:00:00+00:00 {new}: added",
        f"{old_id} 2026-01-01T00:00:00+00:00 {old}: already stored, left as it is",
    ]
    assert cli.main(["history", "export", "--history-store", store_path]) == 0
    exported = tmp_path / "export.jsonl"
    exported.write_text(capsys.readouterr().out)
    copy = str(tmp_path / "copy.sqlite")
    assert cli.main(["history", "import", str(exported), "--history-store", copy]) == 0
    capsys.readouterr()
    a, b = open_store(store_path), open_store(copy)
    assert a is not None and b is not None
    assert [a.run(r.run_id) for r in a.runs()] == [b.run(r.run_id) for r in b.runs()]
    a.close()
    b.close()
    assert cli.main(["compare", old_id, str(new), "--history-store", store_path]) == 0
    table = capsys.readouterr().out
    assert "| qwen36-mtp1-chat-c1 | decode_tok_s | 70 | 60 | -14.3% (worse) |" in table
    assert "| qwen36-mtp1-prefill_cuda_graph | intent (preflight) | pass | - | -> |" in table


def test_compare_shows_only_what_moved_beyond_its_floor() -> None:
    a, b = _run("a", 1, 70.0), _run("b", 2, 70.7)  # +1%: inside decode's 3% floor
    assert compare_runs(a, b) == []
    assert render("A", "B", []).startswith("no metric moved by its floor")


def test_history_commands_on_a_bad_store_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "h.sqlite"
    bad.write_text("not a database")
    assert cli.main(["history", "list", "--history-store", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"sglperf: history store {bad}: cannot set up its tables") and "\n" not in err
    assert cli.main(["compare", "nope", "nope2", "--history-store", str(tmp_path / "new.sqlite")]) == 2
    assert "nope: neither a results folder nor a run id in" in capsys.readouterr().err


def test_the_default_store_is_outside_any_checkout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from sglperf.history import location

    monkeypatch.delenv("SGLPERF_HISTORY", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert location.chosen() == str(tmp_path / "data" / "sglperf" / "history.sqlite")
    monkeypatch.delenv("XDG_DATA_HOME")
    assert location.chosen() == str(Path.home() / ".local" / "share" / "sglperf" / "history.sqlite")
    assert location.chosen("off") == "off" and open_store("off") is None


def test_a_damaged_schema_version_is_one_line_and_left_as_it_is(location: str, store: SqlHistoryStore) -> None:
    cursor = store._conn.cursor()
    cursor.execute(store.backend.sql("UPDATE sglperf_meta SET value = ? WHERE name = ?"), ("two", "schema_version"))
    store.close()
    with pytest.raises(HistoryError, match=r"its schema version 'two' is not a number; left as it is"):
        open_store(location)
