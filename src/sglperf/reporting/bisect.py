"""A bisect's answer in words (and as a JSON record): the culprit with SGLang's decisions that changed there,
every comparison measured on the way, and what the bisect cost."""

from __future__ import annotations

from typing import Any

from sglperf.model.numbers_source import NumbersSource
from sglperf.upgrade.bisect import Answer, BisectOutcome
from sglperf.upgrade.records import WARNING


def render(outcome: BisectOutcome, source: NumbersSource) -> str:
    state = outcome.state
    lines = [
        f"bisect {state.item}: {state.metric}, SGLang {state.from_version} -> {state.to_version}{source.words.caption}"
    ]
    lines.append(f"{outcome.answer.value}: {outcome.summary}")
    if outcome.answer is Answer.CULPRIT and outcome.explains:
        lines.append(f"  {outcome.explains}")
    if outcome.culprit and outcome.answer is Answer.CULPRIT:
        decided = [c for c in outcome.changes if c.what != WARNING]
        if decided:
            lines.append(f"what {outcome.culprit} changed in this item's effective config (the walk):")
        else:
            lines.append(
                f"no effective-config change: the cause is in SGLang's code between {outcome.parent} and "
                f"{outcome.culprit} (every flag, field and intent the walk follows resolved the same)"
            )
        warned = [c for c in outcome.changes if c.what == WARNING]
        for change in decided + warned:
            where = f" (or in {', '.join(change.unsure)}, not resolved)" if change.unsure else ""
            release = f" [SGLang {change.rule_release}]" if change.rule_release else ""
            rule = f"; {change.rule}{release}" if change.rule else ""
            lines.append(f"  {change.what}: {change.before} -> {change.after}{where}{rule}")
    lines.append("comparisons (newer against older, paired A B B A sessions on fresh servers):")
    for c in state.comparisons:
        cost = (
            f"comparison {c.same_as + 1}'s answer, not measured again"
            if c.same_as is not None
            else f"{c.quartets} quartet(s), {len(c.sessions)} server start(s), {c.seconds / 60:.1f} min"
        )
        lines.append(f"  {c.purpose.value:<10} {c.older} -> {c.newer}: {c.describe()}; {cost}")
    for release, why in state.unusable.items():
        lines.append(f"  {release} cannot run it: {why}")
    measured = outcome.releases_measured
    lines.append(
        f"cost: {outcome.server_starts} server start(s), {outcome.minutes:.1f} min of sessions; "
        f"{len(measured)} of the range's {len(state.releases)} releases measured ({', '.join(measured)})"
    )
    return "\n".join(lines)


def to_record(outcome: BisectOutcome, source: NumbersSource) -> dict[str, Any]:
    state = outcome.state
    return {
        "numbers": source.value,
        "answer": outcome.answer.value,
        "summary": outcome.summary,
        "culprit": outcome.culprit,
        "parent": outcome.parent,
        "explains": outcome.explains,
        "changes": [c.model_dump() for c in outcome.changes],
        "no_config_change": outcome.answer is Answer.CULPRIT and all(c.what == WARNING for c in outcome.changes),
        "releases_measured": outcome.releases_measured,
        "server_starts": outcome.server_starts,
        "minutes": round(outcome.minutes, 2),
        "state": state.model_dump(mode="json"),
    }
