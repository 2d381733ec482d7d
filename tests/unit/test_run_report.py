"""`RunReport`: a run's effects judged once, from its folder or its stored form, and rendered from that
one record by the console, `compare --variants`, report.md and the plots alike."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from sglperf.history import ingest
from sglperf.model.numbers_source import NumbersSource
from sglperf.reporting import markdown, plots
from sglperf.reporting.effects import effect_lines, effects_console, effects_text
from sglperf.reporting.run_report import RunReport, read_report
from sglperf.results import folder as results_folder

from .test_variant_effects import _noisy, _variant


def _night(folder: Path) -> Path:
    results_folder.RunStamp("night", "2026-12-05T01:00:00+00:00").write(folder)
    for record in (_variant("ref", _noisy(70.0)), _variant("fast", _noisy(75.6, seed=1))):
        results_folder.write_measurement(record, {}, folder)
    return folder


def test_every_surface_shows_the_reports_effects_and_judges_none_again(tmp_path: Path) -> None:
    report = read_report(_night(tmp_path / "night"))
    assert report.label == "night" and report.numbers is NumbersSource.CPU_SERVER  # no GPU in the records
    assert [e.variant for e in report.effects] == ["fast"]
    text = markdown.markdown(report, plots.draw(report, tmp_path / "plots"))
    assert "## Variant effects" in text and (tmp_path / "plots" / "effects-qwen36-chat-c1.png").exists()
    title, lines = effects_console(report)
    assert title == "sglperf variant effects (CPU server: CPU numbers, not GPU results)"
    assert lines == effect_lines(report.effects)
    assert effects_text(report).splitlines() == [f"Variant effects in night{report.numbers.words.caption}", *lines]
    # The same measurements with no effects in the report: no surface judges them for itself.
    none = dataclasses.replace(report, effects=())
    assert "## Variant effects" not in markdown.markdown(none, plots.draw(none, tmp_path / "none"))
    assert not (tmp_path / "none" / "effects-qwen36-chat-c1.png").exists()
    assert effects_text(none).startswith("night: no variant effects")


def test_a_stored_run_is_named_by_its_label_and_may_have_no_effects(tmp_path: Path) -> None:
    stored = ingest.from_folder(_night(tmp_path / "night"))
    report = RunReport.of_stored(stored)
    assert report.label == stored.identity.label and len(report.effects) == len(read_report(tmp_path / "night").effects)
    alone = RunReport.of_stored(type(stored)(stored.identity, stored.measurements[:1], ()))
    assert effects_text(alone) == (
        f"{stored.identity.label}: no variant effects (it measured no point with the reference variant and another one)"
    )
