"""The busy-host check: its arithmetic (Hypothesis), and Linux's real counters on a quiet round (around
real processes: tests/integration/test_foreign_processes.py)."""

from __future__ import annotations

import argparse
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglperf.model.host_load import HostLoad, HostLoadSummary
from sglperf.options import share
from sglperf.runtime import host_probe

from ..support.quiet_host import cpu_of_others, used_between

seconds = st.floats(min_value=0.0, max_value=100.0, allow_nan=False)
shares = st.floats(min_value=0.01, max_value=1.0, allow_nan=False)


@st.composite
def loads(draw: st.DrawFn) -> HostLoad:
    return HostLoad(
        wall_s=draw(st.floats(min_value=0.0, max_value=30.0)),
        cpus=draw(st.integers(min_value=1, max_value=256)),
        foreign_cpu_s=draw(st.floats(min_value=-1.0, max_value=100.0)),
        steal_cpu_s=draw(seconds),
        slack_cpu_s=draw(st.floats(min_value=0.0, max_value=1.0)),
    )


@given(loads(), shares)
def test_a_disturbed_round_is_above_the_limit_by_more_than_the_slack(load: HostLoad, limit: float) -> None:
    if load.disturbed(limit):
        assert load.share > limit
        assert load.foreign_cpu_s + load.steal_cpu_s - load.slack_cpu_s > limit * load.capacity_cpu_s
    if load.share <= limit or load.capacity_cpu_s == 0:
        assert not load.disturbed(limit)


@given(loads(), shares, st.floats(min_value=0.0, max_value=50.0))
def test_more_foreign_time_never_makes_a_round_less_disturbed(load: HostLoad, limit: float, extra: float) -> None:
    busier = HostLoad(load.wall_s, load.cpus, load.foreign_cpu_s + extra, load.steal_cpu_s, load.slack_cpu_s)
    assert busier.disturbed(limit) or not load.disturbed(limit)
    assert busier.share >= load.share


def test_summary_says_how_many_rounds_were_run_again_and_the_busiest() -> None:
    quiet = HostLoad(1.0, 2, 0.02, 0.0, 0.06)
    busy = HostLoad(1.0, 2, 1.0, 0.1, 0.06)
    assert HostLoadSummary.of(0.1, [], []) is None
    summary = HostLoadSummary.of(0.1, [quiet, quiet], [busy])
    assert summary is not None
    assert summary.median_share == pytest.approx(0.01) and summary.dropped_rounds == 1
    assert summary.note() == (
        "1 round(s) dropped and measured again: the host was busy (limit 10% of its CPU; busiest: "
        "55% of 2 CPUs (other processes 1.00 s, steal 0.10 s, in 1.00 s))"
    )
    assert HostLoadSummary.of(0.1, [quiet], []).note() is None  # type: ignore[union-attr]


# --- the real counters (Linux) ---

linux_only = pytest.mark.skipif(host_probe.available() is not None, reason=str(host_probe.available()))


@linux_only
def test_the_slack_covers_the_counters_rounding_on_a_short_quiet_round() -> None:
    probe = host_probe.HostProbe()
    before = cpu_of_others()
    probe.start()
    load = probe.stop()
    others = used_between(before, cpu_of_others())  # an xdist sibling's work in the window is foreign
    assert load.slack_cpu_s >= 2 * math.sqrt(host_probe.SYSTEM_COUNTERS_PER_CPU * load.cpus / 6) * host_probe.TICK_S
    assert -load.slack_cpu_s - 0.05 <= load.foreign_cpu_s <= others + load.slack_cpu_s + 0.05


@pytest.mark.parametrize("text", ["0", "-0.1", "1.5", "ten", "nan"])
def test_max_host_load_outside_0_to_1_is_a_usage_error(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=f"'{text}' is not a share of the CPU between 0"):
        share(text)
    assert share("0.03") == 0.03 and share("1") == 1.0
