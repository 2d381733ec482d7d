"""The terminal table's row for one measurement: the host column and rounds run again."""

from __future__ import annotations

import math

from sglperf.model.measurement import BaselineStatus, MeasurementRow
from sglperf.model.metrics import MetricOutcome
from sglperf.plugin.summary import summary_line


def row(**kw: object) -> MeasurementRow:
    base: dict[str, object] = {
        "key": "qwen36-mtp1-decode-chat-c1",
        "emulated": False,
        "status": BaselineStatus.COMPARED,
        "medians": {"decode_tok_s": 70.0, "ttft_s": 0.2, "itl_s": 0.0143, "accept_length": 2.5},
        "outcomes": {"decode_tok_s": MetricOutcome.UNCHANGED},
        "changes": [],
        "rounds": 4,
        "rounds_budget": 12,
    }
    return MeasurementRow.model_validate({**base, **kw})


def test_the_host_column_shows_what_others_took_and_the_verdict_says_rounds_were_run_again() -> None:
    line = summary_line(row(host_share=0.012, dropped_rounds=2))
    assert line.endswith("4/12    1%  compared; 2 round(s) run again: host busy")


def test_no_host_count_is_a_dash_not_zero() -> None:
    assert summary_line(row()).endswith("4/12     -  compared")
    assert summary_line(row(host_share=math.nan)).endswith("4/12     -  compared")
