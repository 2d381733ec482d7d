"""What the history store keeps of a run: its identity, its measurements in short, its verdicts.

A stored run is built from a results folder (`history.ingest`) and written in one transaction; the
measurement record itself is kept whole (JSON) so nothing a later sglperf wants is lost, and the
fields that series, streaks and comparisons are looked up by are kept beside it as columns.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglperf.model.measurement import MeasurementRecord
from sglperf.model.variant_effect import EffectSession
from sglperf.model.verdict import Verdict


@dataclass(frozen=True)
class RunIdentity:
    run_id: str
    recorded_at: str  # UTC, ISO 8601: history is ordered by it, never by folder name
    runner: str  # the runner profile(s) measured, comma-joined; "" for a run without measurements
    gpus: str  # e.g. "2x NVIDIA RTX A6000"; "" when unknown
    sglang_version: str  # comma-joined when a run used several
    args_digest: str  # comma-joined effective-args digests of its measurements
    deployment_commit: str  # git commit of the deployment files, "unknown" outside git
    emulated: bool
    source: str  # the results folder it was read from

    @property
    def label(self) -> str:
        """How reports name the run: its time to the minute and its id."""
        return f"{self.recorded_at[:16].replace('T', ' ')} ({self.run_id})"


@dataclass(frozen=True)
class StoredRun:
    identity: RunIdentity
    measurements: tuple[MeasurementRecord, ...]
    verdicts: tuple[Verdict, ...]
    # Variant effects' counterbalanced sessions: a results folder's; the SQL store keeps none (its runs'
    # effects are judged sequentially, and say so).
    sessions: tuple[EffectSession, ...] = ()


def measurement_failed(record: MeasurementRecord) -> bool:
    """The item failed: a problem was found or a metric regressed."""
    return bool(record.problems) or any(c.outcome.fails for c in record.comparisons)


@dataclass(frozen=True)
class SeriesPoint:
    """One run's value of one series (runner x deployment x variant x workload x concurrency x metric)."""

    run_id: str
    recorded_at: str
    label: str
    value: float


@dataclass(frozen=True)
class ItemOutcome:
    """Whether one item (a measurement key, or a verdict's test id in a tier) failed in one run."""

    run: RunIdentity
    failed: bool
    detail: str  # a verdict's status, or the measurement's first problem / regressed metrics
    sglang_version: str
    args_digest: str  # the measurement's effective args; for a verdict, the run's
