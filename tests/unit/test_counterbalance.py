"""Counterbalanced sessions (issue 54): which sessions run, in which order, and which a verdict uses.

The sessions run against a stand-in live session (the emulator's end-to-end run is
tests/sglang/test_counterbalanced_effects.py); the judgement is `variant_effects` on records and sessions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sglperf.baselines.variant_effects import variant_effects
from sglperf.model.deployment import Deployment
from sglperf.model.deployment_file import DeploymentError, load
from sglperf.model.measurement import MeasurementRecord
from sglperf.model.variant_effect import EffectSession, EffectVerdict
from sglperf.model.workload import LoadPoint, Workload
from sglperf.session import counterbalance
from sglperf.session.counterbalance import Counterbalanced
from sglperf.session.running import LiveOptions

from ..support.history import measurement
from ..support.project import make_project, with_workloads

T0, T1 = "2026-12-07T01:00:00+00:00", "2026-12-07T01:01:00+00:00"
WORKLOAD = """
[[workloads]]
id = "decode-chat"
prompts = "../data/prompts/chat.jsonl"
max_prompts = 2
output_len = 16
concurrency = [1]
"""


def _drifting(variant: str, minute: float, ratio: float = 1.0, n: int = 12, seed: int = 0) -> list[float]:
    """decode tok/s of ``n`` rounds starting at ``minute`` of a run drifting 10% per minute, 1% noise."""
    rng = np.random.default_rng([seed, int(minute * 100)])
    t = minute + np.arange(n) * 0.02
    return [float(x) for x in 70.0 * ratio / (1 + 0.10 * t) * np.exp(rng.normal(0, 0.01, n))]


def _record(variant: str, samples: list[float], started: str) -> MeasurementRecord:
    return measurement("night", 70.0).model_copy(
        update={
            "key": f"qwen36-{variant}-chat-c1",
            "variant": variant,
            "samples": {"decode_tok_s": samples},
            "started_at": started,
            "reference_variant": "ref",
            "floors": {"decode_tok_s": 0.03},
            "expected_effects": {"decode_tok_s": "none"},
        }
    )


def _session(variant: str, index: int, samples: list[float]) -> EffectSession:
    return EffectSession(
        deployment="qwen36",
        variant=variant,
        workload="chat",
        load="c1",
        index=index,
        started_at=None,
        samples={"decode_tok_s": samples},
    )


def test_an_aa_pair_on_a_drifting_machine_is_worse_in_sequence_and_same_in_a_quartet() -> None:
    ref, same = _record("ref", _drifting("ref", 0.0), T0), _record("same", _drifting("same", 0.5), T1)
    (sequential,) = variant_effects([ref, same])
    assert sequential.sessions == 1 and sequential.verdict is EffectVerdict.WORSE, sequential.line()
    sessions = [_session("same", 1, _drifting("same", 1.0)), _session("ref", 1, _drifting("ref", 1.5))]
    (paired,) = variant_effects([ref, same], sessions)
    assert paired.sessions == 2 and paired.verdict is EffectVerdict.NO_EFFECT, paired.line()
    assert paired.expectation_met is True
    assert paired.design == "counterbalanced, 2 sessions each, 12 paired rounds"


def test_only_quartets_both_sides_completed_are_judged() -> None:
    ref, slow = _record("ref", _drifting("ref", 0.0), T0), _record("slow", _drifting("slow", 0.5, 0.9), T1)
    # The variant's third session ran, the reference's did not: the second quartet is incomplete, so it is
    # left out on both sides (sessions 2 of each are dropped with it).
    sessions = [
        _session("slow", 1, _drifting("slow", 1.0, 0.9)),
        _session("ref", 1, _drifting("ref", 1.5)),
        _session("ref", 2, _drifting("ref", 2.0)),
        _session("slow", 2, _drifting("slow", 2.5, 0.9)),
        _session("slow", 3, _drifting("slow", 3.0, 0.9)),
    ]
    (effect,) = variant_effects([ref, slow], sessions)
    assert effect.sessions == 2 and effect.verdict is EffectVerdict.WORSE, effect.line()
    # Only the reference's first quartet half: no quartet at all, so the sequential judgement.
    (alone,) = variant_effects([ref, slow], [_session("ref", 1, _drifting("ref", 1.0))])
    assert alone.sessions == 1


class _StandIn:
    """What `Counterbalanced` needs of a live session: which server runs, and the first sessions' records."""

    def __init__(self, deployment: Deployment, results: Path):
        self.options = LiveOptions(emulator=True, results_dir=results)
        self.said: list[str] = []
        self.progress = self.said.append
        self.events: list[str] = []
        self.records = {
            v.id: _record(v.id, [70.0] * 4, f"2026-12-07T01:0{i}:00+00:00") for i, v in enumerate(deployment.variants)
        }

    def running(self, deployment: Deployment, variant: Any) -> Any:
        self.events.append(f"start {variant.id}")
        return variant.id

    def stop(self) -> None:
        self.events.append("stop")

    def recorded(self, deployment: Deployment, variant_id: str, workload: Workload, load: LoadPoint) -> Any:
        return self.records.get(variant_id)


def test_further_sessions_mirror_the_first_order_with_a_fresh_server_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = with_workloads(WORKLOAD, own_model_folder=True).replace(
        'id = "mtp1"\n', 'id = "mtp1"\nexpect_effect = { decode-chat = { decode_tok_s = "none" } }\n', 1
    )
    deployment = load(make_project(tmp_path, text) / "deployments" / "qwen36.toml")
    live = _StandIn(deployment, tmp_path / "results")
    measured: list[str] = []

    class _Measurement:
        def __init__(self, options: Any, running: Any, workload: Workload, load: LoadPoint, progress: Any):
            self.name = f"{running} {workload.id}@{load.tag}"

        def session_samples(self) -> tuple[str, dict[str, list[float]]]:
            measured.append(self.name)
            live.events.append(f"measure {self.name}")
            return "2026-12-07T02:00:00+00:00", {"decode_tok_s": [70.0] * 4}

    monkeypatch.setattr(counterbalance, "Measurement", _Measurement)
    kept: list[EffectSession] = []
    sessions = Counterbalanced(live, kept.append)
    first = sessions.sessions_for(deployment, 1)
    # mtp1 measured first (the file's first variant), the reference mtp3-defaults later: mirrored, mtp3-defaults
    # runs first in session 1, each on its own fresh server.
    assert live.events == [
        "stop",
        "start mtp3-defaults",
        "measure mtp3-defaults decode-chat@c1",
        "stop",
        "start mtp1",
        "measure mtp1 decode-chat@c1",
        "stop",
    ]
    assert [(s.variant, s.index) for s in first] == [("mtp3-defaults", 1), ("mtp1", 1)] and kept == first
    assert live.said == [
        "qwen36: variant effects in counterbalanced sessions (A B B A): 1 more session(s) of mtp1, mtp3-defaults, "
        "2 server start(s), up to 6 while not yet known"
    ]
    assert sessions.sessions_for(deployment, 1) == first and len(measured) == 2  # kept for the run, not rerun
    more = sessions.sessions_for(deployment, 3)
    later = [(s.variant, s.index) for s in more[2:]]
    assert later == [("mtp1", 2), ("mtp3-defaults", 2), ("mtp3-defaults", 3), ("mtp1", 3)]


def test_the_budget_is_checked_when_the_deployment_loads(tmp_path: Path) -> None:
    for bad, said in [
        ("counterbalance = { sessions = 3 }", "sessions: 3 is odd"),
        ("counterbalance = { sessions = 4, max_sessions = 2 }", "max_sessions: 2 is fewer than sessions (4)"),
        ("counterbalance = { blocks = 2 }", "blocks"),
    ]:
        path = make_project(tmp_path, bad + "\n" + with_workloads(WORKLOAD, own_model_folder=True))
        with pytest.raises(DeploymentError, match="counterbalance") as raised:
            load(path / "deployments" / "qwen36.toml")
        assert said in str(raised.value), raised.value
