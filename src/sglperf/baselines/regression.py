"""One measurement against its baseline: per-round samples, the comparison, or a new baseline record.

A sample is one round over the workload's prompt set (the mean over that round's requests, or the
round's own throughput for the per-round metrics), so each sample carries the same prompt mix as
the baseline's; rounds are what repeat independently. A run stopped by a sequential plan is judged
at the plan's level (`sglperf.baselines.sequential`), every metric.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sglperf.baselines import server_moves, stats, store
from sglperf.baselines.sequential import SequentialPlan
from sglperf.measure.samples import RequestSample, WorkloadResult, metric_values, round_metric_values
from sglperf.model.measurement import BaselineStatus, MetricComparison, Provenance
from sglperf.model.metrics import METRICS

# Metrics meaningless with random weights: what is accepted depends on the model's predictions.
WEIGHT_DEPENDENT = ("accept_length",)
SERVER_MOVED = "server metrics that moved since the baseline (SGLang's /metrics)"
DUMMY_NOTE = "--load-format dummy (random weights): acceptance is meaningless and not compared"


def round_samples(result: WorkloadResult) -> dict[str, list[float]]:
    """Per metric, one value per round: the mean over that round's requests, or the round's throughput."""
    by_round: dict[int, list[RequestSample]] = {}
    for sample in result.samples:
        by_round.setdefault(sample.repeat, []).append(sample)
    out: dict[str, list[float]] = {}
    for metric in METRICS:
        if METRICS[metric].per_round:
            open_loop = result.rate is not None
            if per_round := round_metric_values(result.rounds, result.concurrency, metric, open_loop=open_loop):
                out[metric] = list(per_round)
            continue
        values = []
        for _, samples in sorted(by_round.items()):
            xs = metric_values(samples, metric)
            if xs:
                values.append(float(np.mean(xs)))
        if values:
            out[metric] = values
    return out


@dataclass
class BaselineVerdict:
    """What comparing a measurement with its baseline (or recording it) decided."""

    status: BaselineStatus = BaselineStatus.COMPARED
    comparisons: list[stats.Comparison] = field(default_factory=list)
    stored_samples: dict[str, list[float]] = field(default_factory=dict)  # the baseline's, when compared
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # why it fails, one line each
    skip_reason: str | None = None
    changes: list[str] = field(default_factory=list)  # what a refresh changed

    @property
    def regressions(self) -> list[stats.Comparison]:
        return [c for c in self.comparisons if c.outcome.fails]

    def not_compared(self, status: BaselineStatus, message: str, policy: str) -> None:
        self.status = status
        if policy == "skip":
            self.skip_reason = message
        else:
            self.problems.append(message)


def compare_entry(
    entry: store.Entry,
    current: Mapping[str, Sequence[float]],
    thresholds: Mapping[str, float],
    skip: Sequence[str] = (),
    plan: SequentialPlan | None = None,
) -> list[stats.Comparison]:
    """Every metric both sides have, with the deployment's thresholds over the defaults.

    A metric on one side only (a baseline older than the metric, a metric absent at concurrency 1)
    is not compared. With ``plan`` (the run was stopped sequentially) each is judged at its level.
    """
    results = []
    for metric in sorted(set(entry.samples) & set(current)):
        if metric in skip or metric not in METRICS or not current[metric]:
            continue
        threshold = thresholds.get(metric)
        if plan is not None:
            results.append(plan.judge(metric, entry.samples[metric], current[metric], threshold=threshold))
        else:
            results.append(stats.compare_samples(metric, entry.samples[metric], current[metric], threshold=threshold))
    return results


@dataclass(frozen=True)
class BaselineLookup:
    """One measurement's stored baseline, read once before its first round: the sequential plan tests
    against ``entry`` while the rounds run, and the verdict compares with the same entry after them.
    ``entry`` is None when there is nothing to compare with, and ``status``/``problem`` say why."""

    path: Path
    key: str
    baseline: store.Baseline | None = None
    entry: store.Entry | None = None
    skip: tuple[str, ...] = ()  # metrics not compared (weight-dependent, with dummy weights on either side)
    status: BaselineStatus = BaselineStatus.COMPARED
    problem: str = ""  # the verdict's line when entry is None
    why_not_sequential: str = ""  # the same, said as the reason the full round budget runs


def look_up(path: Path, prov: Provenance, key: str, record_command: str, schedule: str = "") -> BaselineLookup:
    """The baseline entry ``key`` at ``path`` as comparable with a run of ``prov`` (and, open loop, of
    ``schedule``: `Workload.schedule`), read once."""
    try:
        stored = store.load(path)
    except store.BaselineMissing as exc:
        return BaselineLookup(
            path,
            key,
            status=BaselineStatus.MISSING,
            problem=f"no baseline for {key} at {path}; record it with: {record_command}",
            why_not_sequential=f"no usable baseline ({exc.problem})",
        )
    except store.BaselineError as exc:
        return BaselineLookup(
            path,
            key,
            status=BaselineStatus.UNREADABLE,
            problem=str(exc),
            why_not_sequential=f"no usable baseline ({exc.problem})",
        )
    entry = stored.entries.get(key)
    if entry is None:
        return BaselineLookup(
            path,
            key,
            stored,
            status=BaselineStatus.MISSING,
            problem=f"{path} has no entry {key}; record it with: {record_command}",
            why_not_sequential=f"the baseline has no entry {key}",
        )
    identity = store.identity_problems(stored, prov)
    if entry.schedule != schedule:  # other sends, another load: tails and goodput would differ by design
        then, now = entry.schedule or "closed loop", schedule or "closed loop"
        identity.append(f"{key} was sent as [{then}], this run as [{now}]")
    if identity:
        return BaselineLookup(
            path,
            key,
            stored,
            status=BaselineStatus.MISMATCH,
            problem=f"baseline {path} is not comparable with this run: {'; '.join(identity)}",
            why_not_sequential=f"the baseline is not comparable ({'; '.join(identity)})",
        )
    skip = WEIGHT_DEPENDENT if prov.dummy_weights or stored.provenance.dummy_weights else ()
    return BaselineLookup(path, key, stored, entry, skip)


def compare_to_baseline(
    path: Path,
    prov: Provenance,
    entry: store.Entry,
    thresholds: Mapping[str, float],
    *,
    missing: str,
    mismatch: str,
    record_command: str,
    plan: SequentialPlan | None = None,
) -> BaselineVerdict:
    """The comparison against the stored baseline at ``path`` (or why there is none)."""
    lookup = look_up(path, prov, entry.key, record_command)
    return judge_against(lookup, prov, entry, thresholds, missing=missing, mismatch=mismatch, plan=plan)


def judge_against(
    lookup: BaselineLookup,
    prov: Provenance,
    entry: store.Entry,
    thresholds: Mapping[str, float],
    *,
    missing: str,
    mismatch: str,
    plan: SequentialPlan | None = None,
) -> BaselineVerdict:
    """The comparison of ``entry`` with the looked-up baseline; ``plan``: see compare_entry.

    ``missing`` and ``mismatch`` are the policies ("fail" or "skip") for a baseline that is absent and
    one that is not comparable; an unreadable one always fails."""
    verdict = BaselineVerdict()
    stored, stored_entry, path = lookup.baseline, lookup.entry, lookup.path
    if stored is None or stored_entry is None:
        policy = {BaselineStatus.MISSING: missing, BaselineStatus.MISMATCH: mismatch}.get(lookup.status, "fail")
        verdict.not_compared(lookup.status, lookup.problem, policy)
        return verdict
    verdict.stored_samples = {m: list(v) for m, v in stored_entry.samples.items()}
    verdict.notes += store.context_notes(stored, stored_entry, prov, entry.prompt_digest)
    if stored.provenance.dummy_weights and not prov.dummy_weights:
        verdict.notes.append("the baseline was recorded with dummy weights: acceptance not compared")
    try:
        verdict.comparisons = compare_entry(stored_entry, entry.samples, thresholds, lookup.skip, plan)
    except ValueError as exc:  # samples the statistics cannot use; store.load refuses such baselines
        verdict.not_compared(BaselineStatus.UNREADABLE, f"{path} {entry.key}: {exc}", "fail")
        return verdict
    split = split_decode_change(stored_entry.samples, entry.samples)
    verdict.problems += [
        f"{c.message()}; {split}" if split and c.metric == "decode_tok_s" else c.message() for c in verdict.regressions
    ]
    moved = server_moves.moved_series(stored_entry.server, entry.server)
    if verdict.regressions and moved:
        verdict.problems.append(f"{SERVER_MOVED}: {'; '.join(moved)}")
    return verdict


# decode tok/s = verify steps/s x tokens per step (`sglperf.measure.samples`): its two halves.
SPLIT_METRICS = ("decode_tok_s", "verify_steps_s", "accept_length")


def split_decode_change(stored: Mapping[str, Sequence[float]], current: Mapping[str, Sequence[float]]) -> str | None:
    """With speculative decoding, which half of a decode tok/s change moved: "decode_tok_s -6.1%: verify
    steps/s -6.0%, accept length -0.1%: the kernels, not the drafter" (medians of the per-round values).
    A half counts as the cause when it moved at least twice as much as the other."""
    if not all(stored.get(m) and current.get(m) and np.median(stored[m]) > 0 for m in SPLIT_METRICS):
        return None
    change = {m: float(np.median(current[m]) / np.median(stored[m]) - 1) for m in SPLIT_METRICS}
    steps, accept = change["verify_steps_s"], change["accept_length"]
    if abs(steps) >= 2 * abs(accept):
        cause = "the kernels, not the drafter"
    elif abs(accept) >= 2 * abs(steps):
        cause = "acceptance (the drafter or the prompts), not the kernels"
    else:
        cause = "both the kernels and acceptance"
    return (
        f"decode_tok_s {change['decode_tok_s']:+.1%}: verify steps/s {steps:+.1%}, accept length {accept:+.1%}: {cause}"
    )


def comparison_record(c: stats.Comparison) -> MetricComparison:
    return MetricComparison(
        metric=c.metric,
        baseline_median=c.baseline_median,
        current_median=c.current_median,
        change=c.change,
        threshold=c.threshold,
        p_value=c.p_value,
        outcome=c.outcome,
        message=c.message(),
        n_baseline=c.n_baseline,
        n_current=c.n_current,
    )
