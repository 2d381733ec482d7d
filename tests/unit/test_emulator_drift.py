"""The emulator's drift on request (timing.py, "Drift"): none by default, bit for bit; a step 10 minutes
past the epoch at 0.1 per minute lasts twice as long, in the plan and on a served request."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import numpy as np
import pytest

from sglperf.testing.emulator.config import ConfigError, EmulatorConfig, argv_effective, parse_launch_args
from sglperf.testing.emulator.server import EmulatorServer
from sglperf.testing.emulator.state import EmulatorState
from sglperf.testing.emulator.timing import (
    drift_factor,
    expected_decode_tok_s,
    loaded_step_s,
    plan_request,
)

TEN_MIN_S = 600.0


def _plans(config: EmulatorConfig, since_epoch_s: float | None) -> list[object]:
    """Plans of several requests (speculative or not, every one retracted), seeded as the server seeds them."""
    extra = () if since_epoch_s is None else (since_epoch_s,)
    return [
        plan_request(config, spec, 50 + i, 40, np.random.default_rng([3, i]), *extra)
        for i in range(20)
        for spec in (None, 3)
    ]


def test_without_drift_the_timing_is_bit_identical() -> None:
    before = EmulatorConfig(noise_cv=0.02, decode_step_s=0.0123, retract_fraction=0.5)
    off = dataclasses.replace(before, drift_per_min=0.0, drift_epoch=time.time() - TEN_MIN_S)
    # == on the plans compares every float exactly: the keys at 0 change no bit, whenever the request comes.
    assert _plans(off, TEN_MIN_S) == _plans(before, None)
    assert _plans(off, 1e9) == _plans(before, None)
    assert drift_factor(off, TEN_MIN_S) == 1.0
    assert expected_decode_tok_s(off, 3, 4, TEN_MIN_S) == expected_decode_tok_s(before, 3, 4)
    loaded = dataclasses.replace(before, step_s_per_running_request=0.004)
    assert loaded_step_s(dataclasses.replace(loaded, drift_per_min=0.0), 0.013, 3) == loaded_step_s(loaded, 0.013, 3)


def test_ten_minutes_at_a_tenth_per_minute_doubles_every_step() -> None:
    base = EmulatorConfig(noise_cv=0.0, decode_step_s=0.01, prefill_s_per_token=0.001, retract_fraction=1.0)
    drifting = dataclasses.replace(base, drift_per_min=0.1)
    assert drift_factor(drifting, TEN_MIN_S) == pytest.approx(2.0)
    assert drift_factor(drifting, -60.0) == 1.0  # before the epoch: none
    plain = plan_request(base, None, 100, 30, np.random.default_rng(0))
    slow = plan_request(drifting, None, 100, 30, np.random.default_rng(0), TEN_MIN_S)
    assert slow.prefill_s == pytest.approx(2 * plain.prefill_s)
    assert slow.retract_after == plain.retract_after and slow.retract_after is not None
    # The pause is a wait, not work: only the re-prefill in the retraction's gap drifts.
    assert slow.retract_s - base.retract_pause_s == pytest.approx(
        2 * (plain.retract_s - base.retract_pause_s), rel=1e-3
    )
    # The drift grows as the request runs (a second is 1/600 of ten minutes): 2x within 0.5 %.
    assert [p.tokens for p in slow.passes] == [p.tokens for p in plain.passes]
    for i in range(1, len(plain.passes)):
        step, slow_step = (q.passes[i].at_s - q.passes[i - 1].at_s for q in (plain, slow))
        if i - 1 == plain.retract_after:
            step, slow_step = step - plain.retract_s, slow_step - slow.retract_s
        assert slow_step == pytest.approx(2 * step, rel=5e-3)
    assert expected_decode_tok_s(drifting, None, 1, TEN_MIN_S) == pytest.approx(expected_decode_tok_s(base, None) / 2)


def test_validation_refuses_a_negative_or_infinite_drift() -> None:
    with pytest.raises(ConfigError, match=r"drift_per_min must be float \(non-negative\), got -0\.1"):
        EmulatorConfig(drift_per_min=-0.1)
    with pytest.raises(ConfigError, match="drift_per_min must be a finite number"):
        EmulatorConfig(drift_per_min=float("inf"))
    with pytest.raises(ConfigError, match="drift_epoch"):
        EmulatorConfig.from_mapping({"drift_epoch": "yesterday"})
    with pytest.raises(ConfigError, match="drift_epoch"):
        EmulatorConfig(drift_epoch=-5.0)
    config = EmulatorConfig.from_mapping({"drift_per_min": 0.05, "drift_epoch": 1767225600})
    assert (config.drift_per_min, config.drift_epoch) == (0.05, 1767225600)


@contextmanager
def _serving(config: EmulatorConfig) -> Iterator[str]:
    """An emulator served in this process, ready at once: its base URL."""
    launch = parse_launch_args(["--port", "0"])
    state = EmulatorState(config, launch, argv_effective(launch), "0.5.23", "argv")
    state.ready.set()
    server = EmulatorServer(("127.0.0.1", 0), state)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _decode_s(url: str, tokens: int) -> float:
    """Seconds from the first streamed chunk to the end of a request of ``tokens`` tokens."""
    body = {"text": "hello", "stream": True, "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}}
    first = None
    with httpx.Client(base_url=url, timeout=30.0) as client, client.stream("POST", "/generate", json=body) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data:"):
                first = time.perf_counter() if first is None else first
    assert first is not None
    return time.perf_counter() - first


@pytest.mark.parametrize("load", [False, True], ids=["alone", "load-knobs-on"])
def test_a_served_request_decodes_at_half_speed_ten_minutes_in(load: bool) -> None:
    config = EmulatorConfig(noise_cv=0.0, decode_step_s=0.01, startup_s=0.0)
    if load:  # the server times each step itself (EmulatorState.await_chunk): it must drift the same
        config = dataclasses.replace(config, step_s_per_running_request=0.001, prefill_slots=1)
    drifting = dataclasses.replace(config, drift_per_min=0.1, drift_epoch=time.time() - TEN_MIN_S)
    with _serving(config) as plain_url, _serving(drifting) as slow_url:
        plain, slow = _decode_s(plain_url, 25), _decode_s(slow_url, 25)
    # Generous: sleeping overshoots by about the same on both, and a loaded host adds to either.
    assert 1.5 < slow / plain < 2.6, (plain, slow)
