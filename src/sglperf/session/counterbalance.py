"""A deployment's variant effects, measured in counterbalanced sessions.

The measurement items ran every variant once, in their order (A, then B, then C): the first session of
each point. Drift between them reads as an effect, so the effect items run more sessions of the same
points, each variant on a fresh server with its warm-up, in mirrored order: session 1 runs C, B, A (each
variant's points in reverse too), session 2 runs A, B, C again, and so on. Every A B B A quartet so formed
is symmetric in time, and `sglperf.baselines.paired` pairs its rounds so that a steady drift cancels. The
sessions are the deployment's, not one item's: the reference brackets every variant, and whichever effect
item runs first measures them for all.

What it costs is said before the first one starts: one server start per variant per session (the
deployment's ``counterbalance``). A session that fails (its server does not start, a round breaks) is
said and left out; `sglperf.baselines.variant_effects` then judges only the quartets both sides completed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import groupby
from typing import Protocol

from sglperf.errors import SglperfError
from sglperf.model.deployment import Deployment, Variant
from sglperf.model.measurement import MeasurementRecord
from sglperf.model.progress import Progress
from sglperf.model.variant_effect import EffectSession
from sglperf.model.workload import LoadPoint, Workload
from sglperf.runtime import server
from sglperf.session.measurement import Measurement
from sglperf.session.running import LiveOptions, LiveSkip, RunningVariant


class LiveSessionLike(Protocol):
    """What the sessions need of `sglperf.session.live_session.LiveSession`."""

    options: LiveOptions
    progress: Progress

    def running(self, deployment: Deployment, variant: Variant) -> RunningVariant: ...

    def stop(self) -> None: ...

    def recorded(
        self, deployment: Deployment, variant_id: str, workload: Workload, load: LoadPoint
    ) -> MeasurementRecord | None: ...


@dataclass(frozen=True)
class EffectPoint:
    """One variant's measurement at one point that an expected effect compares."""

    variant: str
    workload: Workload
    load: LoadPoint
    first: MeasurementRecord  # the measurement item's record: the first session


def effect_points(
    deployment: Deployment, recorded: Callable[[str, Workload, LoadPoint], MeasurementRecord | None]
) -> list[EffectPoint]:
    """The points the deployment's expected effects compare (each variant's and the reference's), in the
    order their first sessions ran; a point either side of which was not measured is left out."""
    points: dict[tuple[str, str, str], EffectPoint] = {}
    for variant in deployment.variants:
        for workload in (w for w in deployment.workloads if w.id in variant.expect_effect):
            for load in workload.load_points():
                pair = [(v, recorded(v, workload, load)) for v in (deployment.reference, variant.id)]
                if all(record is not None and record.started_at for _, record in pair):
                    for v, record in pair:
                        assert record is not None
                        points.setdefault((v, workload.id, load.tag), EffectPoint(v, workload, load, record))
    return sorted(points.values(), key=lambda p: (p.first.started_at or "", p.first.key))


class Counterbalanced:
    """The further sessions of one run's effect points, measured on demand and kept for the run."""

    def __init__(self, live: LiveSessionLike, record: Callable[[EffectSession], None]):
        self.live = live
        self.record = record  # where each session is kept (the results folder's session lines)
        self.sessions: dict[str, list[EffectSession]] = {}  # by deployment key
        self.done: dict[str, int] = {}  # by deployment key: further sessions run (or tried) so far

    def sessions_for(self, deployment: Deployment, further: int) -> list[EffectSession]:
        """Every session of the deployment's effect points up to ``further`` beyond the first, running the
        missing ones now."""
        done = self.done.get(deployment.key, 0)
        if further > done and self.live.options.attach_url:
            self.done[deployment.key] = further
            self.live.progress(
                f"{deployment.key}: variant effects sequential: an attached server cannot be restarted per session"
            )
        elif further > done:
            points = effect_points(deployment, lambda v, w, load: self.live.recorded(deployment, v, w, load))
            if done == 0:
                self._say_cost(deployment, points, further)
            for index in range(done + 1, further + 1):
                self._run_session(deployment, points, index)
                self.done[deployment.key] = index
        return list(self.sessions.get(deployment.key, []))

    def _say_cost(self, deployment: Deployment, points: list[EffectPoint], further: int) -> None:
        variants = list(dict.fromkeys(p.variant for p in points))
        budget = deployment.counterbalance.max_sessions - 1
        self.live.progress(
            f"{deployment.key}: variant effects in counterbalanced sessions (A B B A): {further} more session(s) "
            f"of {', '.join(variants)}, {further * len(variants)} server start(s)"
            + (f", up to {budget * len(variants)} while not yet known" if budget > further else "")
        )

    def _run_session(self, deployment: Deployment, points: list[EffectPoint], index: int) -> None:
        """Session ``index``: the first sessions' order, mirrored when ``index`` is odd."""
        order = list(reversed(points)) if index % 2 else points
        for variant_id, group in groupby(order, key=lambda p: p.variant):
            variant = deployment.variant(variant_id)
            self.live.stop()  # a fresh server for every session: its own start, warm-up and state
            try:
                running = self.live.running(deployment, variant)
                for point in group:
                    measured = Measurement(self.live.options, running, point.workload, point.load, self.live.progress)
                    started_at, samples = measured.session_samples()
                    session = EffectSession(
                        deployment=deployment.key,
                        variant=variant_id,
                        workload=point.workload.id,
                        load=point.load.tag,
                        index=index,
                        started_at=started_at,
                        samples=samples,
                    )
                    self.sessions.setdefault(deployment.key, []).append(session)
                    self.record(session)
            except (LiveSkip, server.ServerStartError, SglperfError, OSError) as exc:
                self.live.progress(
                    f"{deployment.key}/{variant_id}: effect session {index} left out ({str(exc).splitlines()[0]}); "
                    "the effects judge the quartets both sides completed"
                )
        self.live.stop()
