"""The walk: every release between the two ends resolved in turn, and where each change happened, with the
rule of the release it happened in; and each removed flag's chain through the releases' own deprecations."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from sglperf.judge.decisions import config_and_model, field_changes
from sglperf.judge.intent import explain as explain_intent
from sglperf.preflight import VariantCheck
from sglperf.sglang.deprecations import DeprecationLedger, flag_of
from sglperf.sglang.intents import INTENTS
from sglperf.upgrade.records import ReleaseStep, Transition, UpgradeReport, WalkReport


def _intent_values(check: VariantCheck) -> dict[str, str]:
    return {v.intent: str(v.actual) for v in check.verdicts}


def _intent_rule(name: str, check: VariantCheck) -> str:
    """Why the intent reads as it does on this release: the SGLang rule that set its field, else the field
    itself (a value no rule wrote: the release's own default changed)."""
    args = check.resolution.effective_args if check.resolution else None
    if args is None:
        return ""
    intent = INTENTS[name]
    try:
        reading = intent.read(args.fields, args.model)
    except (KeyError, TypeError):
        return ""
    rules = [r for r in explain_intent(intent, args, reading.value) if r.startswith("SGLang rule")]
    return rules[0] if rules else f"no rule wrote it: {reading.source}"


def _transitions(old: VariantCheck, new: VariantCheck, release: str, watched: set[str]) -> list[Transition]:
    """What moved for one variant from one walked release to the next: its intents, and the watched fields."""
    key = (old.deployment.key, old.variant.id)
    then, now = _intent_values(old), _intent_values(new)
    found = [
        Transition(*key, f"intent {intent}", release, value, now[intent], _intent_rule(intent, new))
        for intent, value in then.items()
        if intent in now and now[intent] != value
    ]
    before, after = old.resolution, new.resolution
    if before is None or after is None or before.effective is None or after.effective is None:
        return found
    for change in field_changes(config_and_model(before), config_and_model(after), before.writes, after.writes):
        if change.field in watched:
            write = change.rule_after or change.rule_before
            rule = write.describe() if write else ""
            found.append(Transition(*key, change.named, release, change.shown_before, change.shown_after, rule))
    return found


def walk_releases(steps: Sequence[ReleaseStep], report: UpgradeReport) -> WalkReport:
    """Each intent and each field of ``report``'s field diff, followed release by release: every
    transition, with the rule at the release where it happened; and, for every flag the target removed,
    the replacement chain the releases in between declared."""
    walk = WalkReport(report.from_version, report.to_version)
    walk.walked = [s.version for s in steps if s.error is None]
    walk.unresolved = [f"{s.version}: {s.error}" for s in steps if s.error is not None]
    resolved = [s for s in steps if s.error is None]
    watched = {(f.deployment, f.variant): {c.field for c in f.changes} for f in report.fields}
    for before, after in pairwise(resolved):
        by_key = {(c.deployment.key, c.variant.id): c for c in after.checks}
        for old in before.checks:
            key = (old.deployment.key, old.variant.id)
            if key in by_key:
                walk.transitions += _transitions(old, by_key[key], after.version, watched.get(key, set()))
    said = DeprecationLedger().with_parsers(*(s.parser for s in steps))
    target = steps[-1].parser
    for flag_change in report.flags:
        links = said.chain(flag_change.flag) if flag_change.change in ("removed", "renamed") else ()
        if links:
            walk.chains[flag_change.flag] = list(links)
            end = flag_of(links[-1].replacement)
            walk.chain_ends_accepted[flag_change.flag] = target is not None and target.canonical(end) is not None
    return walk
