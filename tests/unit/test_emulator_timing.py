"""The emulator's timing truth, without a server: expected rates, reproducible request plans, and the
gap a retraction leaves (the server itself: tests/integration/test_emulator.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sglperf.testing.emulator.config import ConfigError, EmulatorConfig
from sglperf.testing.emulator.timing import (
    chunk_plan,
    expected_accept_length,
    expected_decode_tok_s,
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
