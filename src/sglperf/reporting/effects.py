"""Variant effects for a person: one block per variant and load point for the terminal (the console
summary and `sglperf compare --variants`), a table for the report, JSON for tools; each from the run's
one `RunReport`. Computed in `sglperf.baselines.variant_effects`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import groupby

from sglperf.baselines.variant_effects import without_measured_effect
from sglperf.model.variant_effect import UNDECIDED_NONE, EffectVerdict, VariantEffect
from sglperf.reporting.json_out import json_text
from sglperf.reporting.run_report import RunReport

NO_MEASURED_EFFECT = "effective, no measured effect: every metric at every load point within its floor"


def _by_point(effects: Sequence[VariantEffect]) -> list[tuple[tuple[str, str, str, str, str], list[VariantEffect]]]:
    def key(e: VariantEffect) -> tuple[str, str, str, str, str]:
        return (e.deployment, e.variant, e.reference, e.workload, e.load)

    return [(k, list(g)) for k, g in groupby(sorted(effects, key=key), key=key)]


def _apart(effects: Sequence[VariantEffect]) -> str:
    if effects[0].sessions > 1:  # drift cancels: how far apart the first sessions ran says nothing
        return f" ({effects[0].design})"
    apart = effects[0].apart_s
    if apart is None:
        return ""
    way = "after" if apart >= 0 else "before"
    return f" (ran {abs(apart) / 60:.1f} min {way} it)"


def effect_lines(effects: Sequence[VariantEffect]) -> list[str]:
    """Per variant and point: every metric that moved or was expected to, in full; the rest counted."""
    lines: list[str] = []
    for (deployment, variant, reference, workload, load), group in _by_point(effects):
        lines.append(f"{deployment}/{variant} vs {reference}, {workload}@{load}{_apart(group)}:")
        shown = [e for e in group if e.verdict.moved or e.expected is not None]
        for e in shown:
            met = e.expectation_met
            missed = "; EXPECTED NO EFFECT" if e.expected == "none" else f"; EXPECTED {e.expected}, NOT DETECTED"
            expectation = (
                f"; {UNDECIDED_NONE.upper()}"
                if e.expectation_undecided
                else ""
                if met is None
                else "; as expected"
                if met
                else missed
            )
            lines.append(f"  {e.metric}: {e.describe()}{expectation}")
        rest = [e for e in group if e not in shown]
        counts = {v: sum(e.verdict is v for e in rest) for v in EffectVerdict}
        said = [f"{n} {v.value}" for v, n in counts.items() if n]
        if said:
            undecided = [e.metric for e in rest if e.verdict is EffectVerdict.UNDECIDED]
            more = f" (undecided: {', '.join(undecided)})" if undecided else ""
            lines.append(f"  {'other' if shown else 'all'} metrics: {', '.join(said)}{more}")
    lines += [f"{name}: {NO_MEASURED_EFFECT}" for name in without_measured_effect(effects)]
    return lines


def effects_console(report: RunReport) -> tuple[str, list[str]]:
    """The console summary's section: its title, saying whose numbers they are, and its lines."""
    return f"sglperf variant effects{report.numbers.words.caption}", effect_lines(report.effects)


def effects_text(report: RunReport) -> str:
    """`sglperf compare --variants`: the run's effects, or one line saying it has none."""
    if not report.effects:
        return f"{report.label}: no variant effects (it measured no point with the reference variant and another one)"
    lines = [f"Variant effects in {report.label}{report.numbers.words.caption}", *effect_lines(report.effects)]
    return "\n".join(lines)


def effects_markdown(effects: Sequence[VariantEffect]) -> list[str]:
    """The report's section: one row per variant, point and metric."""
    if not effects:
        return []
    lines = [
        "## Variant effects",
        "",
        "Each variant against the reference variant, from this run's rounds (no baseline involved): the change "
        "of the median with its Hodges-Lehmann interval; **better**/**worse** beyond the metric's floor at the "
        "test's level, *no effect* when the whole interval is inside the floor, *undecided* otherwise.",
        "",
    ]
    lines += [f"- **{name}**: {NO_MEASURED_EFFECT}" for name in without_measured_effect(effects)]
    lines += [
        "",
        "| variant | vs | point | metric | reference | variant | change [interval] | floor | verdict |",
        "|---|---|---|---|---:|---:|---|---:|---|",
    ]
    for (_, variant, reference, workload, load), group in _by_point(effects):
        for e in group:
            verdict = e.verdict.value if not e.verdict.moved else f"**{e.verdict.value}**"
            if e.expectation_met is False:
                verdict += (
                    " (expected no effect)" if e.expected == "none" else f" (expected {e.expected}: **not detected**)"
                )
            change = f"{e.ratio - 1:+.1%} {e.interval()}" if e.verdict is not EffectVerdict.NOT_JUDGED else "-"
            point = f"{workload}@{load}{_apart(group)}"
            medians = f"{e.reference_median:.4g} | {e.variant_median:.4g}"
            lines.append(
                f"| {variant} | {reference} | {point} | {e.metric} | {medians} | {change} | {e.floor:.0%} | {verdict} |"
            )
    lines.append("")
    return lines


def effects_json(effects: Sequence[VariantEffect]) -> str:
    # Through pydantic's own JSON, which writes a NaN as null, as it always has here.
    return json_text([json.loads(e.model_dump_json()) for e in effects])
