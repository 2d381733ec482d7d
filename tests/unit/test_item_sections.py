"""A failing item says each line once: its failure carries the regressions and notes, the report
section beside it the rest (the same regression line used to be printed in both)."""

from __future__ import annotations

from sglperf.model.measurement import MetricComparison
from sglperf.model.metrics import MetricOutcome
from sglperf.plugin.items import measurement_section

from .test_markdown_report import REGRESSION, measurement

UNCHANGED = MetricComparison(
    metric="accept_length",
    baseline_median=2.5,
    current_median=2.5,
    change=0.0,
    threshold=0.05,
    p_value=0.5,
    outcome=MetricOutcome.UNCHANGED,
    message="accept_length unchanged",
    n_baseline=3,
    n_current=3,
)


def test_a_failing_measurement_shows_its_regression_and_notes_only_in_the_failure() -> None:
    failing = measurement(comparisons=(REGRESSION, UNCHANGED), notes=("--load-format dummy",))
    failing = failing.model_copy(update={"problems": [REGRESSION.message]})
    section = measurement_section(failing)
    assert REGRESSION.message not in section and "accept_length unchanged" in section
    assert not any(line.startswith("note:") for line in section)
    assert any(line.startswith("decode_tok_s: median 65") for line in section)


def test_a_passing_measurement_shows_its_comparisons_and_notes() -> None:
    passing = measurement(comparisons=(UNCHANGED,), notes=("--load-format dummy",))
    assert {"accept_length unchanged", "note: --load-format dummy"} <= set(measurement_section(passing))
