"""A results folder someone sent you, damaged in any of its files, through every command that reads one
(`report`, `compare A B`, `compare --variants`, `history import`): a result, or one line naming the file,
never a traceback or a hang, and nothing written outside the folder or through a link in it. In this
process, on copies of the golden runs (tests/data/golden/runs)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglperf import cli
from sglperf.reporting import plots
from sglperf.results import folder as results_folder

from ..support.golden import RUNS

# Each example runs every command that reads a folder: a few examples keep the fast tier fast (400 of each
# were run once by hand).
FUZZ = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
LINE_FILES = ("verdicts-main.jsonl", "configs-main.jsonl", "outcomes-main.jsonl")
JSON_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**20), 10**20),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=10),
        st.sampled_from(["2026-12-07T06:00:30", "2026-12-07T06:00:30+00:00", "yesterday", "", "pass", "nan"]),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8,
)


def _mutate(value: Any, data: st.DataObject, depth: int = 0) -> Any:
    """One node on a random path through the document replaced, dropped or kept."""
    if isinstance(value, dict) and value and depth < 5:
        key = data.draw(st.sampled_from(sorted(value)))
        out = dict(value)
        op = data.draw(st.sampled_from(["descend", "drop", "replace"]))
        if op == "drop":
            del out[key]
        elif op == "replace":
            out[key] = data.draw(JSON_VALUES)
        else:
            out[key] = _mutate(value[key], data, depth + 1)
        return out
    if isinstance(value, list) and value and depth < 5:
        i = data.draw(st.integers(0, len(value) - 1))
        return [*value[:i], _mutate(value[i], data, depth + 1), *value[i + 1 :]]
    return data.draw(JSON_VALUES)


def _run(args: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(args)
    return code, err.getvalue()


REFERENCE = "qwen36-mtp3-defaults-decode-chat-c1.json"
VARIANT = "qwen36-mtp3-prefill-graph-decode-chat-c1.json"


def _fresh(tmp_path: Path, *keep: str) -> tuple[Path, Path]:
    """Copies of the golden runs A and B, in a folder of their own; B with only the records ``keep`` names
    (each record drawn costs a plot: under a second of CPU)."""
    root = tmp_path / "sent"
    if root.exists():
        shutil.rmtree(root)
    a, b = root / "run-a", root / "run-b"
    shutil.copytree(RUNS / "run-a", a)
    shutil.copytree(RUNS / "run-b", b)
    for record in (b / "measurements").iterdir():
        if record.name not in keep:
            record.unlink()
    return a, b


@pytest.fixture
def no_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """No figure drawn: for damage to files no plot reads (verdicts, configs, outcomes); the plots of damaged
    records are drawn by the record tests here and in test_hardening.py."""
    monkeypatch.setattr(plots, "draw", lambda report, out_dir: {})


@pytest.fixture
def effects_plots_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The effects' figure drawn, each record's samples not (test_hardening.py's fuzzing draws those)."""
    monkeypatch.setattr(plots, "samples_figure", lambda record, path: path)


def _files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


def _every_command_survives(tmp_path: Path, a: Path, b: Path) -> None:
    """Each command: exit 0 or one `sglperf: ...` line (exit 2); nothing outside the two folders changed."""
    outside = tmp_path / "outside.txt"
    outside.write_text("the user's own file\n")
    store = tmp_path / "history.sqlite"
    commands = [
        ["report", str(b), "--history-store", "off"],
        ["compare", str(a), str(b), "--history-store", "off"],
        ["compare", "--variants", str(b), "--history-store", "off"],
        ["compare", "--variants", str(b), "--json", "--history-store", "off"],
        ["history", "import", str(b), "--history-store", str(store)],
    ]
    for args in commands:
        code, err = _run(args)
        lines = err.strip().splitlines()
        if code == 2:
            assert len(lines) == 1 and lines[0].startswith("sglperf: "), (args, err)
        else:
            assert code in (0, 1) and "Traceback" not in err and "a bug in sglperf" not in err, (args, err)
    assert outside.read_text() == "the user's own file\n"


@FUZZ
@given(data=st.data())
@pytest.mark.usefixtures("no_plots")
def test_fuzz_a_damaged_json_line(tmp_path: Path, data: st.DataObject) -> None:
    a, b = _fresh(tmp_path, REFERENCE, VARIANT)
    path = b / data.draw(st.sampled_from(LINE_FILES))
    lines = path.read_text().splitlines()
    n = data.draw(st.integers(0, len(lines) - 1))
    record = json.loads(lines[n])
    lines[n] = json.dumps(_mutate(record, data)) if data.draw(st.booleans()) else json.dumps(data.draw(JSON_VALUES))
    path.write_text("\n".join(lines) + "\n")
    _every_command_survives(tmp_path, a, b)


@settings(FUZZ, max_examples=10)  # each example that reads draws a figure: about 0.7 s of CPU
@given(data=st.data())
@pytest.mark.usefixtures("effects_plots_only")
def test_fuzz_a_damaged_measurement_record(tmp_path: Path, data: st.DataObject) -> None:
    """Both records of an effect (reference and variant) are read for `compare --variants` and the effects'
    plot: a damaged one of either is one line, or a report."""
    a, b = _fresh(tmp_path, REFERENCE, VARIANT)
    name = data.draw(st.sampled_from([REFERENCE, VARIANT]))
    path = b / "measurements" / name
    record = json.loads(path.read_text())
    path.write_text(json.dumps(_mutate(record, data)))
    _every_command_survives(tmp_path, a, b)


@pytest.mark.parametrize(
    "started_at",
    ["not a time", "2026-12-07T06:00:30", "2026-12-07T06:00:30+05:00", 17, "2026-02-30T00:00:00+00:00"],
)
@pytest.mark.usefixtures("effects_plots_only")
def test_odd_start_times_are_read_or_refused_in_one_line(tmp_path: Path, started_at: Any) -> None:
    """Found by the audit: `started_at` that is not a time, or a naive time beside an aware one, crashed
    `compare --variants`, the effects and the plots (TypeError: can't subtract offset-naive and
    offset-aware datetimes)."""
    a, b = _fresh(tmp_path, REFERENCE, VARIANT)
    path = b / "measurements" / VARIANT
    record = json.loads(path.read_text())
    record["started_at"] = started_at
    path.write_text(json.dumps(record))
    _every_command_survives(tmp_path, a, b)


def test_a_naive_start_time_reads_as_utc(tmp_path: Path) -> None:
    """The history import's convention (a time without offset is UTC) holds for a record's start too."""
    _, b = _fresh(tmp_path, VARIANT)
    path = b / "measurements" / VARIANT
    record = json.loads(path.read_text())
    aware = record["started_at"]
    record["started_at"] = aware.removesuffix("+00:00")
    path.write_text(json.dumps(record))
    read = results_folder.read_measurement(path)
    assert read.started_at == aware


def _replace_with_folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


DAMAGE: dict[str, Callable[[Path], object]] = {
    "not UTF-8": lambda p: p.write_bytes(b"\xff\xfe" + p.read_bytes()),
    "a directory": _replace_with_folder,
    "a JSON list": lambda p: p.write_text("[1, 2]\n"),
    "a string": lambda p: p.write_text('"verdict"\n'),
    "nested deeply": lambda p: p.write_text("[" * 100_000 + "]" * 100_000 + "\n"),
    "reasons of objects": lambda p: p.write_text(p.read_text().replace('"reasons": [', '"reasons": [{"x": 1}, ', 1)),
    "a number for a list": lambda p: p.write_text(p.read_text().replace('"caveats": []', '"caveats": 3', 1)),
    "a string for a list": lambda p: p.write_text(p.read_text().replace('"warnings": []', '"warnings": "x"', 1)),
    "a null nodeid": lambda p: p.write_text(p.read_text().replace('"nodeid": "', '"nodeid": null, "x": "', 1)),
    "a duration in words": lambda p: p.write_text(
        p.read_text().replace('"duration_s": ', '"duration_s": "long", "y": ', 1)
    ),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("name", LINE_FILES)
@pytest.mark.usefixtures("no_plots")
def test_damaged_json_line_files_are_one_line(tmp_path: Path, name: str, damage: str) -> None:
    """Found by the audit: damaged JSON-line files (configs, outcomes, verdicts) gave tracebacks."""
    a, b = _fresh(tmp_path, REFERENCE, VARIANT)
    DAMAGE[damage](b / name)
    _every_command_survives(tmp_path, a, b)


@pytest.mark.parametrize("name", [*LINE_FILES, "run.json", f"measurements/{REFERENCE}"])
@pytest.mark.usefixtures("no_plots")
def test_a_fifo_among_the_files_is_one_line_not_a_hang(tmp_path: Path, name: str) -> None:
    """Found by the audit: a FIFO named like a JSON-line file hung `sglperf report` forever."""
    _, b = _fresh(tmp_path, REFERENCE)
    (b / name).unlink()
    os.mkfifo(b / name)
    done: list[tuple[int, str]] = []
    worker = threading.Thread(target=lambda: done.append(_run(["report", str(b), "--history-store", "off"])))
    worker.daemon = True
    worker.start()
    worker.join(timeout=60)
    if not done:  # release the reader, so the test process can end
        with contextlib.suppress(OSError):
            fd = os.open(b / name, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
    assert done, f"sglperf report hung on a FIFO named {name}"
    code, err = done[0]
    assert code == 2 and "not a regular file" in err and Path(name).name in err, err


# -- writing: never through a link in the folder ------------------------------------------------------


def test_a_linked_report_is_replaced_not_written_through(tmp_path: Path) -> None:
    """Found by the audit: `sglperf report` on a folder whose report.md links to a file of the user's wrote the
    folder's lines into that file."""
    _, b = _fresh(tmp_path, REFERENCE)
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file\n")
    (b / "report.md").symlink_to(victim)
    code, err = _run(["report", str(b), "--history-store", "off"])
    assert code == 0, err
    assert victim.read_text() == "the user's own file\n"
    assert not (b / "report.md").is_symlink() and "# sglperf report" in (b / "report.md").read_text()


@pytest.mark.usefixtures("no_plots")
def test_a_hard_linked_report_leaves_the_other_name_as_it_was(tmp_path: Path) -> None:
    _, b = _fresh(tmp_path, REFERENCE)
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file\n")
    os.link(victim, b / "report.md")
    assert _run(["report", str(b), "--history-store", "off"])[0] == 0
    assert victim.read_text() == "the user's own file\n"


def test_linked_plots_folder_and_plot_files_are_replaced(tmp_path: Path) -> None:
    """Found by the audit: a `plots` link took the PNGs into the folder it named; a plot file that links out
    would be written through too."""
    _, b = _fresh(tmp_path, REFERENCE)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine\n")
    (b / "plots").symlink_to(elsewhere, target_is_directory=True)
    assert _run(["report", str(b), "--history-store", "off"])[0] == 0
    assert sorted(p.name for p in elsewhere.iterdir()) == ["keep.txt"]
    assert (b / "plots").is_dir() and not (b / "plots").is_symlink()
    assert list((b / "plots").glob("*.png"))

    victim = tmp_path / "victim.png"
    victim.write_bytes(b"not a plot")
    name = "qwen36-mtp3-defaults-decode-chat-c1-samples.png"
    (b / "plots" / name).unlink()
    (b / "plots" / name).symlink_to(victim)
    assert _run(["report", str(b), "--history-store", "off"])[0] == 0
    assert victim.read_bytes() == b"not a plot"
    assert not (b / "plots" / name).is_symlink() and (b / "plots" / name).stat().st_size > 1000


def test_a_linked_results_subfolder_is_not_written_through_by_a_run(tmp_path: Path) -> None:
    """What a run writes into a folder it was given (a record, a JSON line) never lands through a link."""
    _, b = _fresh(tmp_path, REFERENCE)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(b / "measurements")
    (b / "measurements").symlink_to(elsewhere, target_is_directory=True)
    record = results_folder.read_measurement(RUNS / "run-b" / "measurements" / REFERENCE)
    results_folder.write_measurement(record, {}, b)
    assert list(elsewhere.iterdir()) == []
    victim = tmp_path / "victim.jsonl"
    victim.write_text("mine\n")
    (b / "verdicts-gw7.jsonl").symlink_to(victim)
    results_folder.append_line(b, results_folder.LineKind.VERDICTS, "gw7", {"a": 1}, None)
    assert victim.read_text() == "mine\n"
    assert not (b / "verdicts-gw7.jsonl").is_symlink()
    assert json.loads((b / "verdicts-gw7.jsonl").read_text()) == {"a": 1}
