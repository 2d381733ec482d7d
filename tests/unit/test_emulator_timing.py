"""The emulator's timing truth, without a server: expected rates, reproducible request plans, the gap
a retraction leaves, and the load model (the server itself: tests/integration/test_emulator.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sglperf.testing.emulator.config import ConfigError, EmulatorConfig
from sglperf.testing.emulator.timing import (
    PrefillSlots,
    chunk_plan,
    expected_accept_length,
    expected_decode_tok_s,
    loaded_step_s,
    plan_request,
)


def test_truth_functions() -> None:
    assert expected_accept_length(0.7, 3) == pytest.approx(1 + 0.7 + 0.49 + 0.343)
    assert expected_accept_length(0.3, 0) == 1.0
    config = EmulatorConfig(decode_step_s=0.01, decode_slowdown=2.0, accept_prob=0.5)
    assert expected_decode_tok_s(config, None) == pytest.approx(50.0)
    assert expected_decode_tok_s(config, 2) == pytest.approx(1.75 * 50.0)


def test_plan_is_reproducible_and_matches_expectation() -> None:
    config = EmulatorConfig(noise_cv=0.0, accept_prob=0.7, decode_step_s=0.01)
    plans = [plan_request(config, 3, 100, 20000, np.random.default_rng([7, i])) for i in (0, 0)]
    assert plans[0] == plans[1]
    plan = plans[0]
    assert plan.completion_tokens == 20000
    assert all(1 <= p.tokens <= 4 for p in plan.passes)
    assert plan.passes[0].at_s == pytest.approx(100 * config.prefill_s_per_token + 0.01)
    assert (plan.completion_tokens - 1) / plan.verify_steps == pytest.approx(expected_accept_length(0.7, 3), rel=0.02)
    chunks = chunk_plan(plan, 4, splits=(11,))
    assert [c.end for c in chunks] == sorted(c.end for c in chunks) and chunks[-1].final
    assert 11 in [c.end for c in chunks] and chunks[-1].verify_ct == plan.verify_steps


def test_retraction_leaves_a_gap_in_the_plan() -> None:
    config = EmulatorConfig(noise_cv=0.02, decode_step_s=0.01, retract_fraction=1.0, retract_pause_s=0.3)
    plain = plan_request(
        dataclasses.replace(config, retract_fraction=0.0), None, 100, 50, np.random.default_rng([7, 3])
    )
    plan = plan_request(config, None, 100, 50, np.random.default_rng([7, 3]))
    after = plan.retract_after
    assert after is not None and plain.retract_after is None and plan.retract_tokens == after + 1
    # Drawn after the steps: the same steps, every one after the retraction later by its gap.
    assert plan.passes[: after + 1] == plain.passes[: after + 1]
    gap = 0.3 + config.prefill_s_per_token * (100 + after + 1)  # the pause, then the re-prefill
    assert plan.retract_s == pytest.approx(gap)
    for p, q in zip(plan.passes[after + 1 :], plain.passes[after + 1 :], strict=True):
        assert p.tokens == q.tokens and p.at_s == pytest.approx(q.at_s + gap)
    at = plan.passes[after].at_s
    assert not plan.waiting(at - 0.001) and plan.waiting(at) and plan.waiting(at + 0.29) and not plan.waiting(at + 0.3)
    # The tokens before the retraction go out before its gap, whatever the stream interval.
    assert any(c.end == plan.retract_tokens and c.at_s == at for c in chunk_plan(plan, 7))
    # A share of requests, the same ones on every run; a request without a decode step is never retracted.
    half = dataclasses.replace(config, retract_fraction=0.5)
    drawn = [plan_request(half, None, 10, 20, np.random.default_rng([0, i])).retract_after for i in range(400)]
    assert drawn == [plan_request(half, None, 10, 20, np.random.default_rng([0, i])).retract_after for i in range(400)]
    assert 150 < sum(a is not None for a in drawn) < 250
    assert plan_request(config, None, 10, 1, np.random.default_rng(0)).retract_after is None
    with pytest.raises(ConfigError):
        EmulatorConfig(retract_fraction=1.5)
    with pytest.raises(ConfigError):
        EmulatorConfig(retract_fraction=-0.1)
    with pytest.raises(ConfigError):
        EmulatorConfig(retract_pause_s=-1.0)


# --- under load (timing.py's "Under load") ---


def _with_knobs(config: EmulatorConfig) -> EmulatorConfig:
    return dataclasses.replace(config, step_s_per_running_request=0.01, prefill_slots=1)


def _burst_ttfts(config: EmulatorConfig, n: int, prefill_s: float) -> list[float]:
    """TTFTs of n requests arriving at once: the prefill queue, the prefill, then a first step beside
    the requests decoding by then (each reaches its first step after those ahead of it)."""
    slots = PrefillSlots(config.prefill_slots)
    ttfts = []
    for i in range(n):
        start = slots.admit(0.0, prefill_s)
        decoding = i + 1 if config.prefill_slots == 1 else n
        ttfts.append(start + prefill_s + loaded_step_s(config, config.decode_step_s, decoding))
    return ttfts


def test_load_knobs_off_by_default_change_nothing() -> None:
    config = EmulatorConfig(decode_step_s=0.01, decode_slowdown=1.5)
    assert config.step_s_per_running_request == 0.0 and config.prefill_slots is None and not config.contended
    # Exactly (not approximately) today's numbers, whatever the concurrency.
    for running in (1, 2, 8, 256):
        assert expected_decode_tok_s(config, None, running) == 1.0 / (0.01 * 1.5)
        assert expected_decode_tok_s(config, 3, running) == expected_decode_tok_s(config, 3)
        assert loaded_step_s(config, 0.0123, running) == 0.0123
    slots = PrefillSlots(None)
    assert [slots.admit(t, 0.5) for t in (0.0, 0.0, 0.1, 0.1)] == [0.0, 0.0, 0.1, 0.1]
    assert _burst_ttfts(config, 8, 0.05) == [0.05 + 0.01] * 8


def test_load_slows_a_batch_and_queues_a_burst() -> None:
    config = _with_knobs(EmulatorConfig(decode_step_s=0.01, noise_cv=0.0))
    assert config.contended
    # A step serves the whole batch: 8 streams each decode at an eighth of one's rate.
    assert expected_decode_tok_s(config, None, 8) == pytest.approx(expected_decode_tok_s(config, None) / 8)
    assert expected_decode_tok_s(config, 3, 2) == pytest.approx(expected_decode_tok_s(config, 3) / 2)
    # The noise drawn for the step scales the load's share too.
    assert loaded_step_s(config, 0.012, 8) == pytest.approx(0.012 * 8)
    # One slot: a burst prefills one after another, first come first served.
    slots = PrefillSlots(1)
    assert [slots.admit(0.0, 0.05) for _ in range(4)] == pytest.approx([0.0, 0.05, 0.10, 0.15])
    assert slots.admit(0.1, 0.05) == pytest.approx(0.2)  # arrived later, so behind all of them
    assert slots.admit(5.0, 0.05) == 5.0  # the queue drained long before: no wait
    two = PrefillSlots(2)
    assert [two.admit(0.0, 0.05) for _ in range(5)] == pytest.approx([0.0, 0.0, 0.05, 0.05, 0.10])
    # p99 TTFT of a burst of 8 against one request alone: the tail grows with the queue.
    alone = _burst_ttfts(config, 1, 0.05)[0]
    burst = _burst_ttfts(config, 8, 0.05)
    assert float(np.percentile(burst, 99)) > 5 * alone
    assert min(burst) == alone  # the first in line waits for nobody


def test_a_request_alone_is_unaffected_by_the_load_knobs() -> None:
    plain = EmulatorConfig(noise_cv=0.05, decode_step_s=0.01)
    loaded = _with_knobs(plain)
    assert expected_decode_tok_s(loaded, None) == expected_decode_tok_s(plain, None)
    assert expected_decode_tok_s(loaded, 3, running=1) == expected_decode_tok_s(plain, 3)
    assert loaded_step_s(loaded, 0.0123, 1) == 0.0123
    assert PrefillSlots(1).admit(2.5, 0.05) == 2.5
    assert _burst_ttfts(loaded, 1, 0.05) == _burst_ttfts(plain, 1, 0.05)
    # The plan is drawn the same way: the knobs move when passes happen, never what they yield.
    for i in range(3):
        assert plan_request(loaded, 3, 100, 200, np.random.default_rng([0, i])) == plan_request(
            plain, 3, 100, 200, np.random.default_rng([0, i])
        )


def test_load_knob_validation() -> None:
    assert EmulatorConfig.from_mapping({"prefill_slots": None}).prefill_slots is None
    assert EmulatorConfig.from_env('{"prefill_slots": 2, "step_s_per_running_request": 0.001}').prefill_slots == 2
    for bad in ({"prefill_slots": 0}, {"prefill_slots": -1}, {"prefill_slots": 1.5}, {"prefill_slots": True}):
        with pytest.raises(ConfigError, match="prefill_slots"):
            EmulatorConfig.from_mapping(bad)
    with pytest.raises(ConfigError, match="step_s_per_running_request"):
        EmulatorConfig(step_s_per_running_request=-0.001)
