"""Drift across nights: E-divisive change points, the drift's start, and the report that names it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglperf.baselines.changepoint import MIN_HISTORY, change_points, drift, energy_statistic
from sglperf.history import ingest, open_store
from sglperf.model.measurement import MeasurementRecord, Provenance, Rounds, SampleSummary
from sglperf.model.metrics import Direction
from sglperf.reporting import markdown
from sglperf.results.folder import RunStamp

pytestmark = pytest.mark.selftest

LABELS = [f"2026-01-{i + 1:02d}" for i in range(30)]


def _noise(rng: np.random.Generator, cv: float, n: int) -> np.ndarray:
    sigma = math.sqrt(math.log1p(cv**2))
    return np.exp(rng.normal(-(sigma**2) / 2, sigma, n))


def _ramp(start: int, rate: float = 0.01, n: int = 30) -> np.ndarray:
    return (1 - rate) ** np.maximum(np.arange(n) - start + 1, 0)


def test_energy_statistic_peaks_at_a_step() -> None:
    x = np.r_[np.zeros(10), np.ones(10)] + np.random.default_rng(0).normal(0, 0.05, 20)
    q = energy_statistic(x)
    assert int(np.argmax(q)) == 10
    assert np.isneginf(q[:3]).all() and np.isneginf(q[-2:]).all()  # segments shorter than min_size


def test_change_points_find_a_step_and_nothing_in_flat_noise() -> None:
    rng = np.random.default_rng(1)
    step = np.log(100 * _noise(rng, 0.02, 24) * np.r_[np.ones(12), np.full(12, 0.9)])
    points = change_points(step)
    assert [c.index for c in points] == [12] and points[0].p_value <= 0.01
    assert change_points(np.log(100 * _noise(rng, 0.02, 24))) == []


def test_a_slow_drift_is_dated_and_described() -> None:
    rng = np.random.default_rng(2)
    values = 100 * _ramp(15) * _noise(rng, 0.005, 30)
    found = drift("decode_tok_s", values.tolist(), LABELS)
    assert found is not None and abs(found.start - 15) <= 1
    assert found.start_label == LABELS[found.start] and found.change < -0.08
    assert found.message().startswith(f"decode_tok_s drifting since {found.start_label} (-")


def test_no_drift_when_better_flat_short_or_small() -> None:
    rng = np.random.default_rng(3)
    improving = 100 / _ramp(15) * _noise(rng, 0.005, 30)
    assert drift("decode_tok_s", improving.tolist(), LABELS) is None
    assert drift("decode_tok_s", (100 * _noise(rng, 0.02, 30)).tolist(), LABELS) is None
    short = (100 * _ramp(2, 0.05, MIN_HISTORY - 1)).tolist()
    assert drift("decode_tok_s", short, LABELS[: MIN_HISTORY - 1]) is None
    tiny = 100 * np.r_[np.ones(15), np.full(15, 0.985)] * _noise(rng, 0.001, 30)  # 1.5% < the 3% floor
    assert drift("decode_tok_s", tiny.tolist(), LABELS) is None
    with pytest.raises(ValueError, match="labels"):
        drift("decode_tok_s", [1.0] * 10, LABELS[:9])


def test_latency_drifts_upwards() -> None:
    rng = np.random.default_rng(4)
    rising = 0.2 / _ramp(12) * _noise(rng, 0.005, 30)
    found = drift("ttft_s", rising.tolist(), LABELS)
    assert found is not None and abs(found.start - 12) <= 1 and found.change > 0.08
    assert drift("x", rising.tolist(), LABELS, direction=Direction.LOWER_IS_BETTER, threshold=0.05) is not None


@settings(max_examples=15, deadline=None)
@given(st.integers(8, 20), st.sampled_from([0.001, 1.0, 1000.0]), st.integers(0, 2**16))
def test_seeded_and_scale_invariant(start: int, unit: float, seed: int) -> None:
    values = 100 * _ramp(start) * _noise(np.random.default_rng(seed), 0.02, 30)
    a = drift("decode_tok_s", values.tolist(), LABELS)
    b = drift("decode_tok_s", (values * unit).tolist(), LABELS)
    assert (a is None) == (b is None)
    if a is not None and b is not None:
        assert a.start == b.start and a.change == pytest.approx(b.change)
    assert a == drift("decode_tok_s", values.tolist(), LABELS)  # the permutations are seeded


def _record(key: str, decode: float) -> MeasurementRecord:
    prov = Provenance(
        sglang_version="0.5.23", runner="r", date="2026-01-01", effective_args_digest="d", launch_command="x"
    )
    return MeasurementRecord(
        key=key,
        deployment="dep",
        variant="v",
        workload="w",
        concurrency=1,
        emulated=False,
        sglang_version="0.5.23",
        provenance=prov,
        samples={"decode_tok_s": [decode] * 3},
        summary={"decode_tok_s": SampleSummary(n=3, median=decode, p10=decode, p90=decode)},
        baseline="b.json",
        rounds=Rounds(used=3, budget=12, sequential=True, reason="decode_tok_s clearly within its threshold"),
    )


def test_min_history_is_the_shortest_history_a_clean_step_is_found_in() -> None:
    """Below MIN_HISTORY the check could never fire: it must not claim to have looked."""
    for n in (MIN_HISTORY - 1, MIN_HISTORY):
        step = [100.0] * (n // 2) + [80.0] * (n - n // 2)
        assert bool(change_points(np.log(step).tolist())) is (n == MIN_HISTORY)
    step = [100.0] * (MIN_HISTORY // 2) + [80.0] * (MIN_HISTORY - MIN_HISTORY // 2)
    assert drift("decode_tok_s", step, LABELS[:MIN_HISTORY]) is not None


def test_the_report_names_the_night_a_drift_started(tmp_path: Path) -> None:
    values = 100 * _ramp(14, n=20) * _noise(np.random.default_rng(5), 0.005, 20)
    folders = []
    for label, value in zip(LABELS[:20], values, strict=False):
        folder = tmp_path / label
        (folder / "measurements").mkdir(parents=True)
        (folder / "measurements" / "dep-v-w-c1.json").write_text(_record("dep-v-w-c1", float(value)).model_dump_json())
        folders.append(folder)
    store = open_store(str(tmp_path / "history.sqlite"))
    assert store is not None
    for night, folder in enumerate(folders, 1):
        RunStamp(folder.name, f"2026-01-{night:02d}T00:00:00+00:00").write(folder)
        record = folder / "measurements" / "dep-v-w-c1.json"
        record.write_text(json.dumps({**json.loads(record.read_text()), "run_id": folder.name}))
        store.add_run(ingest.from_folder(folder))
    report = markdown.write(folders[-1], store).read_text()
    store.close()
    assert "decode_tok_s drifting since 2026-01-1" in report  # the 14th-16th night
    assert "Rounds: 3 of 12 (sequential: decode_tok_s clearly within its threshold)" in report
    assert (folders[-1] / "plots" / "dep-v-w-c1-history.png").is_file()
