"""Open-loop send schedules: seeded, starting at 0, at the asked mean rate, burstier below shape 1."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglperf.measure.arrivals import offsets_within, send_offsets

rates = st.floats(min_value=0.01, max_value=1000.0)
shapes = st.floats(min_value=0.05, max_value=20.0)


@given(requests=st.integers(1, 500), rate=rates, burstiness=shapes, seed=st.integers(0, 2**32 - 1))
def test_a_schedule_starts_at_zero_never_goes_back_and_repeats_from_its_seed(
    requests: int, rate: float, burstiness: float, seed: int
) -> None:
    offsets = send_offsets(requests, rate, "poisson", burstiness, seed)
    assert len(offsets) == requests and offsets[0] == 0.0
    assert all(b >= a for a, b in itertools.pairwise(offsets))
    assert offsets == send_offsets(requests, rate, "poisson", burstiness, seed)


@given(requests=st.integers(2, 200), rate=rates)
def test_constant_arrivals_are_evenly_spaced(requests: int, rate: float) -> None:
    gaps = np.diff(send_offsets(requests, rate, "constant", 1.0, 0))
    assert gaps == pytest.approx(np.full(requests - 1, 1 / rate))


@pytest.mark.parametrize(("burstiness", "cv"), [(1.0, 1.0), (0.25, 2.0), (4.0, 0.5)])
def test_poisson_gaps_have_the_mean_rate_and_the_gamma_shapes_spread(burstiness: float, cv: float) -> None:
    gaps = np.diff(send_offsets(40_001, 5.0, "poisson", burstiness, seed=7))
    assert gaps.mean() == pytest.approx(1 / 5.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)


def test_another_seed_is_another_schedule_and_bad_input_is_refused() -> None:
    assert send_offsets(10, 2.0, "poisson", 1.0, 0) != send_offsets(10, 2.0, "poisson", 1.0, 1)
    with pytest.raises(ValueError, match="rate > 0"):
        send_offsets(10, 0.0, "poisson", 1.0, 0)


@given(duration=st.floats(0.001, 60.0), rate=rates, burstiness=shapes, seed=st.integers(0, 2**32 - 1))
def test_a_duration_bounded_round_sends_the_schedules_first_sends_up_to_its_end(
    duration: float, rate: float, burstiness: float, seed: int
) -> None:
    """The same sends as a round of that many requests, and the next one would fall at or after the end."""
    within = offsets_within(duration, rate, "poisson", burstiness, seed)
    assert within[0] == 0.0 and all(t < duration for t in within)
    longer = send_offsets(len(within) + 1, rate, "poisson", burstiness, seed)
    assert longer[:-1] == within and longer[-1] >= duration


def test_a_constant_schedule_within_a_duration_has_rate_times_duration_sends() -> None:
    assert len(offsets_within(10.0, 4.0, "constant", 1.0, 0)) == 40
    with pytest.raises(ValueError, match="duration_s > 0"):
        offsets_within(0.0, 4.0, "constant", 1.0, 0)
