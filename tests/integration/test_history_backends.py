"""The run-history store on both backends, SQLite and a real PostgreSQL server the tests start themselves:
runs read back whole, writers at once or killed mid-write, faults in one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sglperf.history import HistoryError, SqlHistoryStore, open_store
from sglperf.history.schema import SCHEMA_VERSION
from sglperf.history.streaks import failing_streak
from sglperf.model.verdict import Status

from ..support.history import stored_run, verdict
from ..support.project import ROOT


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
    late, early = stored_run("z-first-stored", 9, 65.0), stored_run("a-second-stored", 2, 71.0)
    assert store.add_run(late) and store.add_run(early)
    assert [r.run_id for r in store.runs()] == ["a-second-stored", "z-first-stored"]
    back = store.run("z-first-stored")
    assert back == late
    points = store.series("qwen36-mtp1-chat-c1", "decode_tok_s", "2xA6000", False)
    assert [(p.run_id, p.value) for p in points] == [("a-second-stored", 71.0), ("z-first-stored", 65.0)]
    assert store.series("qwen36-mtp1-chat-c1", "decode_tok_s", "other-runner", False) == []  # never mixed
    assert store.run("no-such-run") is None


def test_recording_a_run_twice_adds_nothing_and_changes_nothing(store: SqlHistoryStore) -> None:
    assert store.add_run(stored_run("night-1", 1, 70.0))
    assert not store.add_run(stored_run("night-1", 5, 10.0))  # the same id again, other content: left as it is
    assert [p.value for p in store.series("qwen36-mtp1-chat-c1", "decode_tok_s", "2xA6000", False)] == [70.0]
    assert store.run("night-1") == stored_run("night-1", 1, 70.0)


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
    store.add_run(stored_run("night-1", 1))
    store.close()
    again = open_store(location)
    assert again is not None
    assert [r.run_id for r in again.runs()] == ["night-1"]
    again.close()


def test_failing_since_names_the_first_bad_run_and_what_changed(store: SqlHistoryStore) -> None:
    for n, regressed in enumerate([False, False, True, True, True], 1):
        store.add_run(stored_run(f"night-{n}", n, 60.0 if regressed else 70.0, regressed=regressed))
    streak = failing_streak("qwen36-mtp1-chat-c1", store.measurement_outcomes("qwen36-mtp1-chat-c1", "2xA6000", False))
    assert streak is not None and streak.runs == 3
    assert streak.first.run.run_id == "night-3" and streak.last_pass is not None
    assert streak.message() == (
        "qwen36-mtp1-chat-c1: failing since 2026-01-03 00:00 (night-3), 3 run(s) in a row; first bad with "
        "SGLang 0.5.23, args digest-b; last passed 2026-01-02 00:00 (night-2) (effective args changed)"
    )
    store.add_run(stored_run("night-6", 6, 70.0))
    assert failing_streak("x", store.measurement_outcomes("qwen36-mtp1-chat-c1", "2xA6000", False)) is None


def test_failing_since_for_an_intent_verdict(store: SqlHistoryStore) -> None:
    for n, status in enumerate([Status.PASS, Status.INERT, Status.INERT], 1):
        store.add_run(stored_run(f"night-{n}", n, status=status))
    item = verdict().test_id
    streak = failing_streak(item, store.verdict_outcomes(item, "preflight"))
    assert streak is not None and streak.runs == 2 and streak.first.run.run_id == "night-2"


# -- two writers at once; a writer killed mid-write ---------------------------------------------------

WRITER = """
import sys
sys.path.insert(0, {root!r})
from tests.support.history import stored_run
from sglperf.history import open_store
store = open_store(sys.argv[1])
for n in range(10):
    assert store.add_run(stored_run(f"{{sys.argv[2]}}-{{n}}", 1 + n % 28))
store.close()
"""


def test_two_writers_at_once_lose_nothing(location: str) -> None:
    script = WRITER.format(root=str(ROOT))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    writers = [subprocess.Popen([sys.executable, "-c", script, location, w], env=env) for w in ("a", "b")]
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    opened = open_store(location)
    assert opened is not None
    assert sorted(r.run_id for r in opened.runs()) == sorted(f"{w}-{n}" for w in "ab" for n in range(10))
    opened.close()


KILLED_WRITER = """
import sys, time
sys.path.insert(0, {root!r})
from tests.support.history import stored_run
from sglperf.history import open_store, sql_store
def stuck(record):  # called inside add_run's transaction, after the run row is written
    print("mid-write", flush=True)
    time.sleep(600)
sql_store.measurement_failed = stuck
open_store(sys.argv[1]).add_run(stored_run("killed", 3))
"""


def test_a_writer_killed_mid_write_leaves_the_store_readable_and_without_its_run(location: str) -> None:
    opened = open_store(location)
    assert opened is not None
    opened.add_run(stored_run("before", 1))
    opened.close()
    script = KILLED_WRITER.format(root=str(ROOT))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
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
    assert again.add_run(stored_run("after", 4))  # and writable again
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


def test_a_damaged_schema_version_is_one_line_and_left_as_it_is(location: str, store: SqlHistoryStore) -> None:
    cursor = store._conn.cursor()
    cursor.execute(store.backend.sql("UPDATE sglperf_meta SET value = ? WHERE name = ?"), ("two", "schema_version"))
    store.close()
    with pytest.raises(HistoryError, match=r"its schema version 'two' is not a number; left as it is"):
        open_store(location)
