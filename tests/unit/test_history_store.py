"""The run-history store on SQLite files in this process: faults in one line with nothing stored lost,
results folders, import, export and compare (both backends, and writers in other processes:
tests/integration/test_history_backends.py)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from sglperf import cli
from sglperf.history import HistoryError, ingest, open_store
from sglperf.history.compare import compare_runs
from sglperf.history.records import StoredRun
from sglperf.model.measurement import MeasurementRecord
from sglperf.model.verdict import Status, Verdict
from sglperf.reporting.changes import changes_table
from sglperf.results.folder import ResultsError, RunStamp, collect, read_stamp

from ..support.history import measurement, stored_run, verdict

# -- faults: one line each, nothing stored is lost ----------------------------------------------------


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
    opened.add_run(stored_run("before", 1))
    opened.close()
    connect = sqlite_backend.SqliteBackend.connect

    def full(
        self: sqlite_backend.SqliteBackend,
    ) -> sqlite3.Connection:  # SQLite's own SQLITE_FULL: no page may be added
        conn = connect(self)
        assert isinstance(conn, sqlite3.Connection)
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")
        return conn

    monkeypatch.setattr(sqlite_backend.SqliteBackend, "connect", full)
    big = stored_run("big", 2)
    big = StoredRun(big.identity, tuple(measurement("big", 70.0, key=f"k{i}-c1") for i in range(200)), big.verdicts)
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


@pytest.mark.parametrize("damage", ["not json", '{"run_id": "a/../b", "started_at": "2026-01-01"}'])
def test_a_stamp_that_cannot_be_read_is_kept_beside_the_new_one(tmp_path: Path, damage: str) -> None:
    (tmp_path / "run.json").write_text(damage)
    run = RunStamp("run-2", "2026-01-02T00:00:00+00:00")
    said = run.stamp(tmp_path)
    kept = tmp_path / "run.json.unreadable-run-2"
    assert kept.read_text() == damage  # never overwritten
    assert said is not None and said.startswith(f"{tmp_path / 'run.json'}: ") and f"kept as {kept}" in said
    assert read_stamp(tmp_path) == run
    assert run.stamp(tmp_path) is None and sorted(p.name for p in tmp_path.iterdir()) == ["run.json", kept.name]
    other = RunStamp("run-3", "2026-01-03T00:00:00+00:00")
    assert other.stamp(tmp_path) is None and read_stamp(tmp_path) == other  # a readable one is replaced
    (tmp_path / "run.json").write_text("damaged again")
    again = run.stamp(tmp_path)  # the same run id again (SGLPERF_RUN_ID): the first one kept is not replaced
    assert again is not None and kept.read_text() == damage
    assert (tmp_path / "run.json.unreadable-run-2-2").read_text() == "damaged again"


def test_a_reused_results_folder_reads_back_as_its_latest_run(tmp_path: Path) -> None:
    first, second = RunStamp("run-1", "2026-01-01T00:00:00+00:00"), RunStamp("run-2", "2026-01-02T00:00:00+00:00")
    folder = _folder(tmp_path / "r", first, measurement("run-1", 70.0, key="only-in-run-1"), verdicts=(verdict(),))
    _folder(folder, second, measurement("run-2", 65.0), verdicts=(verdict(Status.FAIL),))
    results = collect(folder)
    assert [m.key for m in results.measurements] == ["qwen36-mtp1-chat-c1"]
    assert [v.status for v in results.verdicts] == [Status.FAIL]
    assert ingest.from_folder(folder).identity.run_id == "run-2"


def test_a_measurement_date_that_is_not_a_time_is_one_line_naming_the_folder(tmp_path: Path) -> None:
    record = measurement(None, 70.0)  # from before run ids: the run's time is its earliest measurement's
    record = record.model_copy(update={"provenance": record.provenance.model_copy(update={"date": "yesterday"})})
    folder = _folder(tmp_path / "r", None, record)
    with pytest.raises(ResultsError, match=r"/r: its measurement date 'yesterday' is not an ISO 8601"):
        ingest.from_folder(folder)


def test_import_export_and_compare_through_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store_path = str(tmp_path / "h.sqlite")
    old = _folder(tmp_path / "old", None, measurement(None, 70.0), verdicts=(verdict(),))  # from before run ids
    new = _folder(tmp_path / "new", RunStamp("night-2", "2026-02-02T00:00:00+00:00"), measurement("night-2", 60.0))
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
    assert "| qwen36-mtp1-chat-c1 | decode_tok_s | 70 | 60 | -14.3% (worse); not judged in B |" in table
    assert "| qwen36-mtp1-prefill_cuda_graph | intent (preflight) | pass | - | -> |" in table


def test_compare_shows_only_what_moved_beyond_its_floor() -> None:
    a, b = stored_run("a", 1, 70.0), stored_run("b", 2, 70.7)  # +1%: inside decode's 3% floor
    assert compare_runs(a, b) == []
    assert changes_table("A", "B", []).startswith("no metric moved by its floor")


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
