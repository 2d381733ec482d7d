"""Variant against variant, within one run: what each variant's flags bought on this machine.

A nightly run measures every variant with the same prompts on the same machine, so each variant's
rounds can be held against the reference variant's (the deployment's ``reference_variant``, default its
first) with no stored baseline at all: a first run on a new runner already answers "does the prefill
graph pay off here?". The judgement is the baseline verdict's (`sglperf.baselines.stats`): the one-sided
rank test at its alpha, the Hodges-Lehmann interval of the shift ratio, and the metric's regression
threshold for the workload as the practical floor. Four answers, never a bare "ok":

* better / worse: the median moved beyond the floor and the test is significant that way;
* no effect: the whole interval lies within +/- the floor: whatever the flags do here is below it;
* undecided: neither; the interval reaches past the floor, so more rounds would tell;
* not judged: too few rounds on one side for the test to reach its level.

Held so, the two variants' rounds ran one after the other on one machine: a slow drift of the machine
between them reads as an effect (measured: an A/A pair read "-9.8% (worse)" on a CPU runner that drifted
11% in the minutes between). So a variant-effect item measures more sessions, each on a fresh server, in
mirrored order (A B, then B A: the deployment's ``counterbalance``), and `counterbalanced_effect_of` judges
the rounds paired across an A B B A quartet, where a steady drift cancels (`sglperf.baselines.paired`):
the signed-rank test, the Hodges-Lehmann interval of the paired ratio, and the same floor and answers.
`effect_of` stays the judgement of a run that measured each variant once (a results folder alone, the
history store): such an effect says it is sequential.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Iterable, Mapping, Sequence
from itertools import groupby
from typing import Any

import numpy as np

from sglperf.baselines import paired, stats
from sglperf.baselines.regression import WEIGHT_DEPENDENT
from sglperf.model.measurement import MeasurementRecord
from sglperf.model.metrics import METRICS, Direction, MetricOutcome
from sglperf.model.variant_effect import EffectSession, EffectVerdict, VariantEffect

_MOVED = {MetricOutcome.IMPROVEMENT: EffectVerdict.BETTER, MetricOutcome.REGRESSION: EffectVerdict.WORSE}


def effect_verdict(c: stats.Comparison) -> EffectVerdict:
    """What a comparison of two variants' samples says, in the four answers above."""
    if c.outcome is MetricOutcome.INSUFFICIENT:
        return EffectVerdict.NOT_JUDGED
    if c.outcome in _MOVED:
        return _MOVED[c.outcome]
    # The floor as the baseline verdict applies it, on either side of 1 in log space.
    bound = -math.log1p(-c.threshold) if c.direction is Direction.HIGHER_IS_BETTER else math.log1p(c.threshold)
    inside = abs(math.log(c.ci_low)) <= bound and abs(math.log(c.ci_high)) <= bound
    return EffectVerdict.NO_EFFECT if inside else EffectVerdict.UNDECIDED


def effect_of(
    reference: MeasurementRecord, variant: MeasurementRecord, metric: str, floor: float | None = None
) -> VariantEffect:
    """One metric of ``variant`` against ``reference`` (same deployment, workload and load point)."""
    floor = floor if floor is not None else variant.floors.get(metric, reference.floors.get(metric))
    c = stats.compare_samples(metric, reference.samples[metric], variant.samples[metric], threshold=floor)
    return _effect(
        reference,
        variant,
        metric,
        direction=c.direction,
        reference_median=c.baseline_median,
        variant_median=c.current_median,
        ratio=c.ratio,
        ci_low=c.ci_low,
        ci_high=c.ci_high,
        p_value=c.p_value,
        level=c.ci_level,
        floor=c.threshold,
        verdict=effect_verdict(c),
        n_reference=c.n_baseline,
        n_variant=c.n_current,
    )


def counterbalanced_effect_of(
    reference: MeasurementRecord,
    variant: MeasurementRecord,
    metric: str,
    more_reference: Sequence[EffectSession],
    more_variant: Sequence[EffectSession],
) -> VariantEffect:
    """One metric of ``variant`` against ``reference`` over their measurement items' sessions and the
    mirrored ones after them (as many on each side, an even number in all: A B B A quartets)."""
    floor = variant.floors.get(metric, reference.floors.get(metric, METRICS[metric].default_threshold))
    sides = [
        [record.samples[metric], *(s.samples.get(metric, []) for s in sorted(more, key=lambda s: s.index))]
        for record, more in ((reference, more_reference), (variant, more_variant))
    ]
    c = paired.compare_paired(metric, paired.abba_log_ratios(sides[0], sides[1]), floor)
    rounds = [[v for session in side for v in session] for side in sides]
    return _effect(
        reference,
        variant,
        metric,
        direction=c.direction,
        reference_median=float(np.median(rounds[0])),
        variant_median=float(np.median(rounds[1])),
        ratio=c.ratio,
        ci_low=c.ci_low,
        ci_high=c.ci_high,
        p_value=min(c.p_lower, c.p_higher),
        level=c.level,
        floor=c.floor,
        verdict=c.verdict,
        n_reference=c.n_pairs,
        n_variant=c.n_pairs,
        sessions=len(sides[0]),
    )


def _effect(reference: MeasurementRecord, variant: MeasurementRecord, metric: str, **judged: Any) -> VariantEffect:
    """The effect record of one metric at the two records' point, with what a judgement found."""
    return VariantEffect(
        deployment=variant.deployment,
        reference=reference.variant,
        variant=variant.variant,
        workload=variant.workload,
        load=variant.load.tag,
        metric=metric,
        expected=variant.expected_effects.get(metric),
        apart_s=_apart(reference, variant),
        **judged,
    )


def _apart(reference: MeasurementRecord, variant: MeasurementRecord) -> float | None:
    """Seconds from the reference's first round to the variant's (negative: the variant ran first)."""
    if reference.started_at is None or variant.started_at is None:
        return None
    began = _dt.datetime.fromisoformat(reference.started_at)
    return (_dt.datetime.fromisoformat(variant.started_at) - began).total_seconds()


def effect_metrics(reference: MeasurementRecord, variant: MeasurementRecord) -> list[str]:
    """The metrics both measured that an effect is judged on (none that dummy weights make meaningless)."""
    dummy = reference.provenance.dummy_weights or variant.provenance.dummy_weights
    both = set(reference.samples) & set(variant.samples)
    return sorted(
        m
        for m in both
        if m in METRICS and reference.samples[m] and variant.samples[m] and not (dummy and m in WEIGHT_DEPENDENT)
    )


def _point(record: MeasurementRecord) -> tuple[str, str, str, str]:
    return (record.run_id or "", record.deployment, record.workload, record.load.tag)


def variant_effects(
    records: Iterable[MeasurementRecord], sessions: Iterable[EffectSession] = ()
) -> list[VariantEffect]:
    """Every variant against its deployment's reference variant, per workload x load point and metric,
    for the points where both were measured in the same run (and the reference is known: records written
    before variant effects carry none); counterbalanced where ``sessions`` hold both sides' further ones."""
    more: dict[tuple[str, str, str, str], list[EffectSession]] = {}
    for session in sessions:
        more.setdefault((session.deployment, session.variant, session.workload, session.load), []).append(session)
    effects: list[VariantEffect] = []
    for _, group in groupby(sorted(records, key=_point), key=_point):
        at_point = list(group)
        named = {r.reference_variant for r in at_point if r.reference_variant}
        by_variant = {r.variant: r for r in at_point}
        if len(named) != 1 or (reference := by_variant.get(named.pop())) is None:
            continue
        for record in sorted(at_point, key=lambda r: r.variant):
            if record is not reference:
                effects += [
                    effect_between(reference, record, metric, more) for metric in effect_metrics(reference, record)
                ]
    return effects


def effect_between(
    reference: MeasurementRecord,
    variant: MeasurementRecord,
    metric: str,
    more: Mapping[tuple[str, str, str, str], Sequence[EffectSession]],
) -> VariantEffect:
    """Counterbalanced over the quartets both sides completed (further sessions 1..k on each, k odd, each
    with the metric); else the sequential judgement of the two measurement items alone."""
    sides = [
        {s.index: s for s in more.get((r.deployment, r.variant, r.workload, r.load.tag), ()) if s.samples.get(metric)}
        for r in (reference, variant)
    ]
    k = 0
    while k + 1 in sides[0] and k + 1 in sides[1]:
        k += 1
    k -= 1 - k % 2  # whole quartets only: an interrupted one is left out on both sides
    if k < 1:
        return effect_of(reference, variant, metric)
    ours, theirs = ([side[i] for i in range(1, k + 1)] for side in sides)
    return counterbalanced_effect_of(reference, variant, metric, ours, theirs)


def without_measured_effect(effects: Sequence[VariantEffect]) -> list[str]:
    """Variants whose every judged metric, at every point, came out "no effect": effective flags that
    bought nothing measurable on this run's machine (the runtime twin of preflight's INERT)."""
    out = []
    keyed = sorted(effects, key=lambda e: (e.deployment, e.variant))
    for (deployment, variant), group in groupby(keyed, key=lambda e: (e.deployment, e.variant)):
        verdicts = {e.verdict for e in group}
        if verdicts == {EffectVerdict.NO_EFFECT}:
            out.append(f"{deployment}/{variant}")
    return out
