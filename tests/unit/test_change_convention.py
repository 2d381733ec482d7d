"""One sign convention wherever a change is shown: the change of the value itself, then "(worse)" or
"(better)". A TTFT that rose 15.2% reads "+15.2%" in the console line, the report's delta column, the
samples plot's title and `sglperf compare`, never "-15.2%" in one of them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from sglperf.baselines import stats
from sglperf.baselines.regression import comparison_record
from sglperf.history.compare import compare_runs
from sglperf.model.measurement import MeasurementRecord, MetricComparison, SampleSummary
from sglperf.model.metrics import MetricOutcome, describe_change, format_level
from sglperf.reporting import markdown, plots
from sglperf.reporting.changes import changes_table, move_words
from sglperf.reporting.run_report import RunReport
from sglperf.results.folder import collect

from ..support.history import measurement, stored_run
from .test_markdown_report import write_folder

BEFORE = [0.100, 0.101, 0.099, 0.100, 0.1005, 0.0995]
AFTER = [round(v * 1.152, 6) for v in BEFORE]


def _record() -> MeasurementRecord:
    comparison = stats.compare_samples("ttft_s", BEFORE, AFTER, threshold=0.05)
    base = measurement("r2", 70.0)
    return base.model_copy(
        update={
            "samples": {"ttft_s": AFTER},
            "summary": {"ttft_s": SampleSummary(n=6, median=sorted(AFTER)[3], p10=min(AFTER), p90=max(AFTER))},
            "baseline_samples": {"ttft_s": BEFORE},
            "comparisons": [comparison_record(comparison)],
        }
    )


def test_a_latency_that_rose_reads_plus_and_worse_everywhere(tmp_path: Path, figures: list[Figure]) -> None:
    record = _record()
    comparison = record.comparisons[0]
    shown = describe_change("ttft_s", comparison.baseline_median, comparison.current_median)
    assert shown.startswith("+15.") and shown.endswith("(worse)"), shown

    assert f"({shown.split()[0]}, threshold 5%" in comparison.message  # console: the verdict line
    report = markdown.markdown(RunReport.of(collect(write_folder(tmp_path / "night", [], [record]))))
    assert f"| {shown} | 5% | **regression** |" in report  # report.md's delta column

    plots.samples_figure(record, tmp_path / "s.png")
    assert f"ttft_s\nregression, {shown}" in {ax.get_title() for ax in figures[0].axes}  # the samples plot

    earlier = stored_run("r1", 1)
    later = dataclasses.replace(stored_run("r2", 2), measurements=(record,))
    old = earlier.measurements[0].model_copy(
        update={"samples": {"ttft_s": BEFORE}, "summary": {"ttft_s": SampleSummary(n=6, median=0.1, p10=0.1, p90=0.1)}}
    )
    earlier = dataclasses.replace(earlier, measurements=(old,))
    rows = [r for r in compare_runs(earlier, later) if r.what == "ttft_s"]
    assert rows and rows[0].move is not None
    change = move_words(rows[0].move)  # sglperf compare: the change, then B's verdict (issue 53)
    assert change.startswith("+15.") and change.split(";")[0].endswith("(worse)"), change
    assert change.endswith("; B regression (p = 0.0011)"), change


@pytest.mark.parametrize(
    ("level", "shown"), [(0.98, "98%"), (0.99548695, "99.5%"), (0.9998, "99.98%"), (0.99999, "99.999%")]
)
def test_confidence_levels_print_short_and_never_as_100(level: float, shown: str) -> None:
    assert format_level(level) == shown


def test_a_comparison_line_prints_its_level_short() -> None:
    comparison = stats.compare_samples("decode_tok_s", [70.0] * 6, [65.0] * 6, threshold=0.03, alpha=0.0022565)
    assert "99.5% CI" in comparison.message() and "99.548" not in comparison.message()


def test_compare_says_the_runs_own_verdict_beside_the_number() -> None:
    """Issue 53: `sglperf compare` showed noise as `-21.1% (better)` where B's report said unchanged
    (p = 0.12). The move is now followed by B's verdict in the report's words; noise has no direction word."""
    earlier = stored_run("r1", 1, decode=70.0)
    noisy = measurement("r2", 84.8).model_copy(
        update={
            "comparisons": [
                MetricComparison(
                    metric="decode_tok_s",
                    baseline_median=70.0,
                    current_median=84.8,
                    change=0.211,
                    threshold=0.03,
                    p_value=0.12,
                    outcome=MetricOutcome.UNCHANGED,
                    message="",
                    n_baseline=3,
                    n_current=3,
                )
            ]
        }
    )
    later = dataclasses.replace(stored_run("r2", 2), measurements=(noisy,))
    table = changes_table("A", "B", compare_runs(earlier, later))
    assert "| decode_tok_s | 70 | 84.8 | +21.1%; B unchanged (p = 0.12) |" in table, table
    assert "better" not in table

    regressed = stored_run("r3", 3, decode=60.0, regressed=True)
    table = changes_table("A", "B", compare_runs(later, regressed))
    assert "| 84.8 | 60 | -29.2% (worse); B regression (p = 0.001), A unchanged |" in table, table
