"""The server's own metrics: a real SGLang 0.5.23 /metrics answer parsed, per-round series (Hypothesis),
and what "moved beyond noise" names (the scraper against a live server: tests/integration/test_server_scrape.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglperf.baselines.server_moves import baseline_series, moved_series
from sglperf.model.measurement import MeasurementRecord
from sglperf.model.server_metrics import ServerMetricsRecord, ServerScrape, round_series
from sglperf.sglang.metrics_catalogue import WATCHED, ExpositionError, parse_exposition

from ..support.history import measurement

REAL = Path(__file__).resolve().parent.parent / "data" / "sglang-0.5.23-cpu-metrics.txt"  # two /generate calls
RETRACTED = "sglang:num_retracted_requests_total"


def test_a_real_answer_parses_into_counters_and_gauges_summed_over_labels() -> None:
    scrape = parse_exposition(REAL.read_text(), 1.0)
    assert scrape.counters["sglang:num_requests_total"] == 2.0
    assert scrape.counters["sglang:generation_tokens_total"] == 40.0
    assert scrape.counters["sglang:time_to_first_token_seconds_count"] == 2.0
    assert scrape.gauges["sglang:num_running_reqs"] == 0.0
    # four label sets of one gauge (startup phases) add up to one value
    assert scrape.gauges["sglang:startup_time_seconds"] > 13.9
    assert not any(name.endswith(("_bucket", "_created")) for name in scrape.counters)
    assert RETRACTED not in scrape.counters  # SGLang prints a labelled counter only once it moved


def test_text_that_is_not_prometheus_is_one_error() -> None:
    with pytest.raises(ExpositionError, match="not Prometheus text"):
        parse_exposition('sglang:x{a="1" 2\n', 0.0)


values = st.floats(min_value=0, max_value=1e6, allow_nan=False)


@given(st.lists(st.tuples(values, values), min_size=2, max_size=8), st.booleans())
def test_round_series_are_the_counters_rise_and_the_gauges_range(
    readings: list[tuple[float, float]], printed: bool
) -> None:
    total = 0.0
    scrapes = []
    for i, (rise, gauge) in enumerate(readings):
        total += rise if i else 0.0
        counters = {"sglang:a_total": total} | ({RETRACTED: 3.0} if printed else {})
        scrapes.append(ServerScrape(float(i), counters, {"sglang:q": gauge}))
    series = round_series(scrapes, {RETRACTED})
    assert series["sglang:a_total"] == pytest.approx(total - 0.0)
    assert series[RETRACTED] == 0.0  # defined but never printed, or printed and unchanged
    assert series["sglang:q:max"] == max(g for _, g in readings)
    assert series["sglang:q:min"] == min(g for _, g in readings)


def test_a_counter_that_fell_gives_no_value_and_one_reading_gives_nothing() -> None:
    before = ServerScrape(0.0, {"sglang:a_total": 10.0}, {})
    after = ServerScrape(1.0, {"sglang:a_total": 2.0}, {})
    assert "sglang:a_total" not in round_series([before, after])
    assert round_series([before]) == {}


def test_the_record_keeps_series_every_round_has() -> None:
    record = ServerMetricsRecord.of([{"a": 1.0, "b": 2.0}, {"a": 3.0}], scrapes=6)
    assert record.series == {"a": [1.0, 3.0]} and record.scrapes == 6


def test_a_series_that_is_not_a_number_is_left_out_and_the_record_reads_back() -> None:
    """SGLang 0.5.23 on the CPU reports sglang:fwd_occupancy:max as NaN: it was written as null, and the
    record, then the run's report, could not be read."""
    record = ServerMetricsRecord.of([{"a": 1.0, "max": math.nan}, {"a": 3.0, "max": math.nan}], scrapes=2)
    assert record.series == {"a": [1.0, 3.0]}
    written = measurement("night", 70.0).model_copy(update={"server_metrics": record}).model_dump_json()
    assert MeasurementRecord.model_validate_json(written).server_metrics == record


def test_a_retraction_rise_is_named_with_its_numbers() -> None:
    moved = moved_series({RETRACTED: [0.0, 0.0, 0.0]}, {RETRACTED: [12.0, 14.0, 17.0]})
    assert moved == [f"retracted requests per round rose from 0 to 14 (median of 3 rounds, baseline 0-0; {RETRACTED})"]


@given(st.lists(st.floats(min_value=0.5, max_value=100), min_size=3, max_size=12))
def test_the_same_rounds_never_moved(rounds: list[float]) -> None:
    series = {w.series: rounds for w in WATCHED}
    assert moved_series(series, series) == []


@given(
    st.lists(st.floats(min_value=1, max_value=100), min_size=3, max_size=12),
    st.floats(min_value=0.0, max_value=0.099),
)
def test_a_shift_below_the_floor_never_moved(rounds: list[float], shift: float) -> None:
    name = "sglang:num_queue_reqs:max"
    assert moved_series({name: rounds}, {name: [x * (1 + shift) for x in rounds]}) == []


def test_overlapping_rounds_did_not_move_even_when_the_median_did() -> None:
    name = "sglang:num_queue_reqs:max"
    assert moved_series({name: [1.0, 2.0, 9.0]}, {name: [5.0, 6.0, 8.0]}) == []
    assert moved_series({name: [1.0, 2.0, 3.0]}, {name: [5.0, 6.0, 8.0]}) != []


def test_a_baseline_keeps_the_watched_series_only() -> None:
    assert baseline_series({RETRACTED: [0.0], "sglang:http_requests_total": [3.0]}) == {RETRACTED: [0.0]}
