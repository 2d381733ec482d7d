"""`sglperf.results.folder`: the names of a results folder, the measurement key, a JSON line appended,
a measurement written, and both read back; a damaged line is one error naming its file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglperf.history import ingest
from sglperf.model.item_outcome import ItemOutcome
from sglperf.model.verdict import Status
from sglperf.model.workload import measurement_key
from sglperf.results import folder as results_folder
from sglperf.results.folder import LineKind, NoResults, ResultsError, RunStamp, collect

from ..support.history import measurement, verdict

NIGHT = RunStamp("night-2", "2026-02-02T00:00:00+00:00")


def test_every_name_a_run_writes(tmp_path: Path) -> None:
    assert LineKind.VERDICTS.file(tmp_path, "gw1") == tmp_path / "verdicts-gw1.jsonl"
    assert [k.glob for k in LineKind] == [
        "verdicts*.jsonl",
        "configs*.jsonl",
        "outcomes*.jsonl",
        "effect-sessions*.jsonl",
    ]
    assert results_folder.measurement_path(tmp_path, "k") == tmp_path / "measurements" / "k.json"
    assert results_folder.server_log_path(tmp_path, "qwen36-mtp1") == tmp_path / "servers" / "qwen36-mtp1.log"
    effective = results_folder.server_effective_path(tmp_path, "qwen36-mtp1")
    assert effective == tmp_path / "servers" / "qwen36-mtp1.effective.json"
    named = (results_folder.RUN_FILE, results_folder.REPORT_NAME, results_folder.PROGRESS_LOG, results_folder.PLOTS_DIR)
    assert named == ("run.json", "report.md", "progress.log", "plots")
    assert results_folder.GPU_LOCKS_DIR == ".gpu-locks"


def test_the_measurement_key_is_the_items_name_and_the_records_file() -> None:
    assert measurement_key("qwen36", "mtp1", "chat", "c8") == "qwen36-mtp1-chat-c8"
    assert measurement_key("qwen36", "mtp1", "chat", "r4") == "qwen36-mtp1-chat-r4"


def test_appended_lines_are_stamped_and_read_back_as_this_runs(tmp_path: Path) -> None:
    folder = tmp_path / "night"  # created by the first line
    assert results_folder.append_line(folder, LineKind.VERDICTS, "main", verdict().to_record(), NIGHT) is None
    results_folder.append_line(folder, LineKind.VERDICTS, "gw0", verdict(Status.FAIL).to_record(), NIGHT)
    outcome = ItemOutcome("deployments/qwen36.toml::x", "call", "E  boom", 1.5)
    results_folder.append_line(folder, LineKind.OUTCOMES, "main", outcome.to_record(), NIGHT)
    line = json.loads((folder / "verdicts-main.jsonl").read_text())
    assert line["run_id"] == "night-2" and results_folder.read_stamp(folder) == NIGHT
    run = collect(folder)
    assert [v.status for v in run.verdicts] == [Status.FAIL, Status.PASS]  # gw0's file sorts first
    assert run.failed_items == (outcome,) and run.stamp == NIGHT
    # Another run's lines in the same folder are not this run's.
    results_folder.append_line(
        folder, LineKind.VERDICTS, "main", verdict().to_record(), RunStamp("night-3", NIGHT.started_at)
    )
    assert [v.status for v in collect(folder).verdicts] == [Status.PASS]


def test_a_line_without_a_run_is_read_back_in_a_folder_without_a_stamp(tmp_path: Path) -> None:
    results_folder.append_line(tmp_path, LineKind.VERDICTS, "main", verdict().to_record(), None)
    assert "run_id" not in json.loads((tmp_path / "verdicts-main.jsonl").read_text())
    assert len(collect(tmp_path).verdicts) == 1 and collect(tmp_path).stamp is None


def test_a_measurement_written_is_read_back_and_found_for_its_run_only(tmp_path: Path) -> None:
    record = measurement("night-2", 70.0)
    path = results_folder.write_measurement(record, {"requests": []}, tmp_path)
    assert path == tmp_path / "measurements" / f"{record.key}.json"
    assert json.loads(path.read_text())["result"] == {"requests": []}  # beside the record, never read back
    assert results_folder.read_measurement(path) == record
    assert results_folder.this_runs_measurement(tmp_path, record.key, "night-2") == record
    assert results_folder.this_runs_measurement(tmp_path, record.key, "night-3") is None
    assert results_folder.this_runs_measurement(tmp_path, "not-measured", "night-2") is None
    assert results_folder.identity_files(tmp_path) == [path]
    assert collect(tmp_path).measurements == (record,)
    assert ingest.from_folder(tmp_path).measurements == (record,)


def test_a_damaged_line_is_one_error_naming_its_file_and_line(tmp_path: Path) -> None:
    results_folder.append_line(tmp_path, LineKind.CONFIGS, "gw0", {"tier": "live"}, NIGHT)
    with open(tmp_path / "verdicts-main.jsonl", "w") as fh:
        fh.write(json.dumps(verdict().to_record()) + "\n\n{not json\n")
    with pytest.raises(ResultsError, match=r"verdicts-main\.jsonl:3: not a verdict record"):
        collect(tmp_path)
    (tmp_path / "verdicts-main.jsonl").unlink()
    with pytest.raises(ResultsError, match=r"configs-gw0\.jsonl:1: not an effective-config record"):
        collect(tmp_path)
    (tmp_path / "measurements").mkdir()
    (tmp_path / "measurements" / "x.json").write_text("{}")
    (tmp_path / "configs-gw0.jsonl").unlink()
    with pytest.raises(ResultsError, match=r"x\.json: not a measurement record"):
        collect(tmp_path)


def test_a_folder_nothing_was_written_in_has_no_results(tmp_path: Path) -> None:
    NIGHT.write(tmp_path)
    with pytest.raises(NoResults, match=r"no sglperf results here \(expected verdicts\*\.jsonl or measurements/"):
        collect(tmp_path)
