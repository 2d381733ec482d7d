"""Variant against variant in one run: better / worse / no effect / undecided / not judged, with the
baseline verdict's test, interval and floor; the run order kept; the expectation a deployment states."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglperf.baselines.variant_effects import effect_of, variant_effects, without_measured_effect
from sglperf.model.measurement import MeasurementRecord
from sglperf.model.numbers_source import NumbersSource
from sglperf.model.variant_effect import EffectVerdict, VariantEffect
from sglperf.reporting.effects import NO_MEASURED_EFFECT, effect_lines, effects_markdown
from sglperf.reporting.plots import effects_figure

from ..support.history import measurement


def _variant(
    variant: str,
    decode: list[float],
    ttft: list[float] | None = None,
    *,
    reference: str | None = "ref",
    started: str = "2026-12-05T01:00:00+00:00",
    expected: dict[str, str] | None = None,
) -> MeasurementRecord:
    samples = {"decode_tok_s": decode, **({"ttft_s": ttft} if ttft else {})}
    return measurement("night", 70.0).model_copy(
        update={
            "key": f"qwen36-{variant}-chat-c1",
            "variant": variant,
            "samples": samples,
            "started_at": started,
            "reference_variant": reference,
            "floors": {"decode_tok_s": 0.03, "ttft_s": 0.05},
            "expected_effects": expected or {},
        }
    )


def _noisy(median: float, n: int = 12, cv: float = 0.01, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(x) for x in median * np.exp(rng.normal(0, cv, n))]


def test_eight_percent_faster_is_better_with_an_interval_that_covers_it() -> None:
    ref, fast = _variant("ref", _noisy(70.0)), _variant("fast", _noisy(75.6, seed=1))
    effect = effect_of(ref, fast, "decode_tok_s")
    assert effect.verdict is EffectVerdict.BETTER
    assert effect.ci_low <= 1.08 <= effect.ci_high
    assert effect.describe().startswith("+") and effect.describe().endswith("(better)")


def test_a_slower_latency_is_worse_and_its_change_keeps_the_values_sign() -> None:
    ref = _variant("ref", _noisy(70.0), _noisy(0.020, seed=2))
    slow = _variant("slow", _noisy(70.0, seed=3), _noisy(0.021, seed=4))
    effect = effect_of(ref, slow, "ttft_s")
    assert effect.verdict is EffectVerdict.WORSE and effect.ratio > 1
    assert effect.describe().startswith("+5.") or effect.describe().startswith("+4.")  # the value rose: "+", "worse"
    assert effect.describe().endswith("(worse)")


def test_an_unchanged_variant_is_no_effect_within_the_floor() -> None:
    ref, same = _variant("ref", _noisy(70.0, cv=0.005)), _variant("same", _noisy(70.0, cv=0.005, seed=5))
    effect = effect_of(ref, same, "decode_tok_s")
    assert effect.verdict is EffectVerdict.NO_EFFECT
    assert effect.describe().startswith("no effect detected: within +/-") and effect.describe().endswith("(floor 3%)")


def test_a_noisy_pair_is_undecided_not_no_effect() -> None:
    ref, noisy = _variant("ref", _noisy(70.0, cv=0.08)), _variant("noisy", _noisy(70.0, cv=0.08, seed=6))
    assert effect_of(ref, noisy, "decode_tok_s").verdict is EffectVerdict.UNDECIDED


def test_too_few_rounds_is_not_judged() -> None:
    effect = effect_of(_variant("ref", [70.0] * 3), _variant("v", [71.0] * 3), "decode_tok_s")
    assert effect.verdict is EffectVerdict.NOT_JUDGED and "n=3/3" in effect.describe()


def test_effects_pair_each_variant_with_the_reference_at_the_same_point_and_keep_the_order() -> None:
    records = [
        _variant("ref", _noisy(70.0), started="2026-12-05T01:00:00+00:00"),
        _variant("fast", _noisy(75.6, seed=1), started="2026-12-05T01:04:00+00:00"),
        _variant("same", _noisy(70.0, seed=7), started="2026-12-05T01:08:00+00:00"),
    ]
    effects = variant_effects(records)
    assert [(e.variant, e.reference) for e in effects] == [("fast", "ref"), ("same", "ref")]
    assert [e.apart_s for e in effects] == [240.0, 480.0]
    # Records written before variant effects name no reference: nothing is paired, nothing invented.
    assert variant_effects([r.model_copy(update={"reference_variant": None}) for r in records]) == []
    # A reference that was not measured in this run: nothing to hold the others against.
    assert variant_effects(records[1:]) == []


def test_a_variant_with_no_effect_anywhere_is_named() -> None:
    records = [_variant("ref", _noisy(70.0, cv=0.005)), _variant("same", _noisy(70.0, cv=0.005, seed=5))]
    assert without_measured_effect(variant_effects(records)) == ["qwen36/same"]


@pytest.mark.parametrize(("median", "met"), [(75.6, True), (70.0, False), (65.0, False)])
def test_an_expected_effect_is_met_only_when_detected_the_stated_way(median: float, met: bool) -> None:
    ref = _variant("ref", _noisy(70.0, cv=0.005))
    variant = _variant("v", _noisy(median, cv=0.005, seed=8), expected={"decode_tok_s": "higher"})
    effect = effect_of(ref, variant, "decode_tok_s")
    assert effect.expectation_met is met
    if not met:
        assert "expected decode_tok_s higher, not detected at 98%" in effect.line()
        assert effect.interval() in effect.line()


@settings(max_examples=40, deadline=None)
@given(st.floats(0.8, 1.25), st.integers(0, 10_000))
def test_swapping_reference_and_variant_mirrors_the_verdict(shift: float, seed: int) -> None:
    a, b = _variant("a", _noisy(70.0, seed=seed)), _variant("b", _noisy(70.0 * shift, seed=seed + 1))
    forward, backward = effect_of(a, b, "decode_tok_s"), effect_of(b, a, "decode_tok_s")
    mirror = {EffectVerdict.BETTER: EffectVerdict.WORSE, EffectVerdict.WORSE: EffectVerdict.BETTER}
    assert backward.verdict is mirror.get(forward.verdict, forward.verdict)
    assert forward.ci_low == pytest.approx(1 / backward.ci_high) and forward.ci_high == pytest.approx(
        1 / backward.ci_low
    )


def _run_effects() -> list[VariantEffect]:
    records = [
        _variant("ref", _noisy(70.0, cv=0.005), _noisy(0.020, cv=0.005, seed=9), started="2026-12-05T01:00:00+00:00"),
        _variant(
            "fast",
            _noisy(75.6, cv=0.005, seed=1),
            _noisy(0.020, cv=0.005, seed=10),
            started="2026-12-05T01:06:00+00:00",
            expected={"ttft_s": "lower"},
        ),
        _variant("same", _noisy(70.0, cv=0.005, seed=5), _noisy(0.020, cv=0.005, seed=11)),
    ]
    return variant_effects(records)


def test_the_console_says_what_moved_in_full_and_counts_the_rest() -> None:
    lines = effect_lines(_run_effects())
    assert lines[0] == "qwen36/fast vs ref, chat@c1 (ran 6.0 min after it):"
    assert lines[1].startswith("  decode_tok_s: +8.") and lines[1].endswith("(better)")
    assert lines[2].startswith("  ttft_s: no effect detected: within +/-") and lines[2].endswith(
        "EXPECTED lower, NOT DETECTED"
    )
    assert lines[3] == "qwen36/same vs ref, chat@c1 (ran 0.0 min after it):"
    assert lines[4] == "  all metrics: 2 no effect"
    assert lines[-1] == f"qwen36/same: {NO_MEASURED_EFFECT}"


def test_the_report_has_a_row_per_metric_and_the_forest_plot_draws(tmp_path: Path) -> None:
    effects = _run_effects()
    section = "\n".join(effects_markdown(effects))
    assert section.startswith("## Variant effects")
    assert "| fast | ref | chat@c1 (ran 6.0 min after it) | decode_tok_s | 70." in section
    assert "no effect (expected lower: **not detected**)" in section
    assert f"- **qwen36/same**: {NO_MEASURED_EFFECT}" in section
    path = effects_figure(effects, tmp_path / "effects.png", NumbersSource.EMULATOR)
    assert path.stat().st_size > 10_000


def test_no_effect_can_be_required_and_is_met_only_inside_the_floor() -> None:
    ref = _variant("ref", _noisy(70.0, cv=0.005))
    same = _variant("same", _noisy(70.0, cv=0.005, seed=5), expected={"decode_tok_s": "none"})
    moved = _variant("moved", _noisy(75.6, cv=0.005, seed=1), expected={"decode_tok_s": "none"})
    assert effect_of(ref, same, "decode_tok_s").expectation_met is True
    failed = effect_of(ref, moved, "decode_tok_s")
    assert failed.expectation_met is False
    assert "; expected no effect, but it is better at 98% (change +8." in failed.line()


def test_no_effect_undecided_is_neither_met_nor_failed() -> None:
    ref = _variant("ref", _noisy(70.0, cv=0.005))
    noisy = _variant("noisy", _noisy(70.0, cv=0.2, seed=3), expected={"decode_tok_s": "none"})
    effect = effect_of(ref, noisy, "decode_tok_s")
    assert effect.verdict is EffectVerdict.UNDECIDED, effect.line()
    assert effect.expectation_met is None and effect.expectation_undecided
    assert effect.line().endswith("; expected no effect: not decided either way (more rounds)")
    assert any("EXPECTED NO EFFECT: NOT DECIDED" in line for line in effect_lines([effect]))
