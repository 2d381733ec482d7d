"""The meter in open loop against the emulator: requests sent on their schedule whatever the server
does, the send lag of each, the tails and goodput of each round, a max_concurrency cap that is not
counted as the client's lag, and a client that falls behind its schedule refused as a measurement."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sglperf.measure import meter
from sglperf.measure.meter import measure
from sglperf.measure.samples import MeterError

from ..support.meter import Emulators, prompt_set, workload
from ..support.quiet_host import judged_on_a_quiet_host


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    emus = Emulators(tmp_path_factory.mktemp("emulators"))
    try:
        yield emus.start()
    finally:
        emus.close()


@pytest.mark.quiet_host
def test_an_open_loop_round_sends_every_request_on_schedule_and_yields_tails_and_goodput(url: str) -> None:
    load = workload("native", rate=40.0, arrival="constant", requests=12, repeats=2, output_len=16, slo={"ttft_s": 5})
    limit = meter.send_lag_limit_s(40.0)
    # Only the send lag is the host's to break (a send late by 10 ms drops the round): the rest fails as ever.
    with judged_on_a_quiet_host():
        result = measure(url, load, prompt_set(3), concurrency=12)
        assert not result.dropped_rounds
        assert all(r.send_lag_p90_s is not None and r.send_lag_p90_s <= limit for r in result.rounds)
    assert [r.requests for r in result.rounds] == [12, 12] and len(result.samples) == 24
    assert result.rate == 40.0
    # Twelve sends 25 ms apart: the round lasts at least the schedule's 275 ms.
    assert all(r.wall_s >= 0.275 for r in result.rounds)
    assert all(s.send_lag_s is not None and s.send_lag_s >= 0 for s in result.samples)
    assert {"ttft_p90_s", "ttft_p99_s", "itl_p90_s", "itl_p99_s", "output_tok_s"} <= result.summary.keys()
    assert result.summary["goodput_share"].median == 1.0  # the emulator answers within 5 s
    assert {s.prompt_id for s in result.samples} == {"p0", "p1", "p2"}  # the prompts in turn


@pytest.mark.quiet_host
def test_a_round_bounded_by_a_duration_sends_what_its_schedule_puts_before_the_end(url: str) -> None:
    load = workload("native", rate=40.0, arrival="constant", duration_s=0.3, repeats=2, output_len=8)
    assert load.schedule() == "rate=40 constant seed=0 duration=0.3s cap=none"
    sent = meter.requests_per_round(load, 3)
    assert sent == 12  # at 0, 25, ..., 275 ms; the next is due at the end
    with judged_on_a_quiet_host():  # a send late by 10 ms drops the round
        result = measure(url, load, prompt_set(3), concurrency=sent)
        assert not result.dropped_rounds
    assert [r.requests for r in result.rounds] == [12, 12]
    assert all(r.wall_s >= 0.275 for r in result.rounds)


@pytest.mark.quiet_host
def test_waiting_for_a_max_concurrency_slot_is_the_servers_time_not_the_clients_lag(url: str) -> None:
    # Each request takes about 32 x 3 ms; at 200 req/s with one slot, all but the first wait for it.
    load = workload("native", rate=200.0, arrival="constant", requests=6, max_concurrency=1, output_len=32)
    with judged_on_a_quiet_host():  # a send late by 10 ms drops the round
        result = measure(url, load, prompt_set(2), concurrency=1)
        assert not result.dropped_rounds
        assert max(s.send_lag_s or 0.0 for s in result.samples) < meter.send_lag_limit_s(200.0)
    assert result.rounds[0].wall_s > 6 * 32 * 0.003 * 0.9  # one at a time


def test_a_client_behind_its_schedule_drops_the_round_and_then_fails_the_measurement(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A limit of zero: any lag at all, as an overloaded client would have, is behind schedule.
    monkeypatch.setattr(meter, "SEND_LAG_FLOOR_S", 0.0)
    monkeypatch.setattr(meter, "SEND_LAG_SHARE_OF_GAP", 0.0)
    load = workload("native", rate=40.0, requests=4, repeats=1, output_len=8)
    with pytest.raises(MeterError) as failed:
        measure(url, load, prompt_set(2), concurrency=4)
    said = str(failed.value)
    assert f"{url} w: the meter could not keep its schedule: 2 rounds dropped, 2 of them behind schedule" in said
    assert "sending fell behind its schedule at 40 req/s: p90 send lag" in said
    assert "lower the workload's rate" in said
