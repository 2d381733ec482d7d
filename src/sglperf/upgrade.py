"""Upgrade check: the same deployments resolved by two SGLang releases, side by side.

What an operator wants to know before touching the GPU box: which flags the new release removed,
renamed or deprecated (and what sglperf will write instead), which intents change their effective
value, which performance-relevant fields change under them (a backend or a size behind an "on"), with
the rule on each side, which SGLang warnings appear or vanish, and which variants the new release refuses.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from itertools import groupby, pairwise
from typing import Any

from sglperf.judge.decisions import config_and_model, decisions, field_changes
from sglperf.judge.intent import explain as explain_intent
from sglperf.model.resolution import FieldChange
from sglperf.model.verdict import Status
from sglperf.preflight import VariantCheck
from sglperf.sglang.argv import ParsedArgv, ParserInfo
from sglperf.sglang.config_fields import OTHER
from sglperf.sglang.deprecations import Deprecation, DeprecationLedger, flag_of, replacement
from sglperf.sglang.intents import INTENTS

NUMBER = re.compile(r"\d+(\.\d+)?")


@dataclass(frozen=True)
class FlagChange:
    flag: str
    change: str  # "removed", "deprecated", "renamed"
    used_by: tuple[str, ...]  # variants (or "intent <name>") that use it on the old release
    replacement: str | None
    # Where the replacement comes from (sglperf.sglang.deprecations.Replacement.source): "SGLang X's parser"
    # (the new release's own deprecation), "SGLang X-Y's deprecation" (what the releases said, followed to a
    # spelling the new release takes) or "intent" (how sglperf spells the intent on the new release).
    source: str | None = None
    release_says: str | None = None  # the deprecation message in the releases' own words


@dataclass(frozen=True)
class IntentChange:
    deployment: str
    variant: str
    intent: str
    before: str | None
    after: str | None
    status_before: str
    status_after: str
    detail_after: str
    requested: bool = False  # False: the value is SGLang's default for this variant

    @property
    def changed(self) -> bool:
        return self.before != self.after or self.status_before != self.status_after

    @property
    def breaks(self) -> bool:
        return Status(self.status_after).failed


@dataclass(frozen=True)
class WarningChange:
    deployment: str
    variant: str
    appeared: tuple[str, ...]
    vanished: tuple[str, ...]


@dataclass(frozen=True)
class FieldChanges:
    """A variant's performance-relevant effective fields that differ between the two releases."""

    deployment: str
    variant: str
    changes: tuple[FieldChange, ...]
    # Fields only one release has that no rule of it set (new or retired options left at their default):
    # counted, not listed.
    one_sided: int = 0


@dataclass
class UpgradeReport:
    from_version: str
    to_version: str
    flags: list[FlagChange] = field(default_factory=list)
    intents: list[IntentChange] = field(default_factory=list)  # every intent, changed or not
    warnings: list[WarningChange] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # variants the new release refuses
    fields: list[FieldChanges] = field(default_factory=list)

    @property
    def breaking(self) -> list[IntentChange]:
        return [c for c in self.intents if c.breaks]

    @property
    def changed(self) -> list[IntentChange]:
        return [c for c in self.intents if c.changed]

    def to_record(self) -> dict[str, Any]:
        return {
            "from": self.from_version,
            "to": self.to_version,
            "breaking": len(self.breaking),
            "flags": [asdict(f) for f in self.flags],
            "intents": [asdict(c) for c in self.intents],
            "warnings": [asdict(w) for w in self.warnings],
            "errors": self.errors,
            "fields": [asdict(f) for f in self.fields],
        }


def flag_changes(
    old: ParserInfo, new: ParserInfo, old_checks: Sequence[VariantCheck], architectures: tuple[str, ...]
) -> list[FlagChange]:
    """Flags the deployments use on the old release, plus every spelling the intents know: those the new
    release removed (renamed, when the releases' own words name what it accepts instead) or deprecates."""
    users: dict[str, set[str]] = {}
    for check in old_checks:
        if check.launch is not None:
            for flag in ParsedArgv(check.launch.argv, old).names:
                users.setdefault(flag, set()).add(f"{check.deployment.key}/{check.variant.id}")
    for intent in INTENTS.values():
        for flag in intent.known_flags:
            if old.has(flag):
                users.setdefault(flag, set()).add(f"intent {intent.name}")
    ledger = DeprecationLedger.shipped().with_parsers(old, new)
    changes = []
    for flag, used_by in sorted(users.items()):
        new_flag = new.canonical(flag)
        if new_flag is None:
            instead = replacement(flag, new, ledger, architectures)
            change = "renamed" if instead is not None and instead.from_releases else "removed"
        elif new.options[new_flag].deprecated and not old.options[flag].deprecated:
            instead, change = replacement(new_flag, new, ledger, architectures), "deprecated"
        else:
            continue
        changes.append(
            FlagChange(
                flag,
                change,
                tuple(sorted(used_by)),
                instead.spelled if instead else None,
                instead.source if instead else None,
                instead.release_says if instead else None,
            )
        )
    return changes


def _warnings(check: VariantCheck) -> dict[str, str]:
    """Warning lines keyed by their wording: numbers (sizes, ports) vary without meaning a change."""
    if check.resolution is None:
        return {}
    return {
        NUMBER.sub("N", line.message.strip()): line.message.strip()[:240]
        for line in check.resolution.logs
        if line.level in ("WARNING", "ERROR", "CRITICAL")
    }


def _field_changes(
    old: VariantCheck, new: VariantCheck, old_parser: ParserInfo, new_parser: ParserInfo
) -> FieldChanges | None:
    """The performance-relevant fields (and the built model) that differ. A field only one release has is
    listed when a rule of that release set it (0.5.13's cuda_graph_max_bs, 0.5.23's
    cuda_graph_config.decode.max_bs), and counted otherwise."""
    before, after = old.resolution, new.resolution
    if before is None or after is None or before.effective is None or after.effective is None:
        return None
    decided = {d.field for d in decisions(before, old_parser)} | {d.field for d in decisions(after, new_parser)}
    kept: list[FieldChange] = []
    one_sided = 0
    for change in field_changes(config_and_model(before), config_and_model(after), before.writes, after.writes):
        if change.concern == OTHER:
            continue
        if (change.absent_before or change.absent_after) and change.field not in decided:
            one_sided += 1
            continue
        kept.append(change)
    return FieldChanges(old.deployment.key, old.variant.id, tuple(kept), one_sided)


def compare_releases(
    old_version: str,
    new_version: str,
    old_parser: ParserInfo,
    new_parser: ParserInfo,
    old_checks: Sequence[VariantCheck],
    new_checks: Sequence[VariantCheck],
) -> UpgradeReport:
    report = UpgradeReport(old_version, new_version)
    architectures = tuple(sorted({a for c in old_checks for a in c.deployment.architectures}))
    report.flags = flag_changes(old_parser, new_parser, old_checks, architectures)
    new_by_key = {(c.deployment.key, c.variant.id): c for c in new_checks}
    for old in old_checks:
        new = new_by_key.get((old.deployment.key, old.variant.id))
        if new is None:
            continue
        after = {v.intent: v for v in new.verdicts}
        for before in old.verdicts:
            v = after.get(before.intent)
            if v is None:
                continue
            report.intents.append(
                IntentChange(
                    old.deployment.key,
                    old.variant.id,
                    before.intent,
                    before.actual,
                    v.actual,
                    before.status.value,
                    v.status.value,
                    v.detail if v.status != Status.PASS else "",
                    requested=before.intent in old.variant.request or before.intent == "speculative",
                )
            )
        fields = _field_changes(old, new, old_parser, new_parser)
        if fields is not None and (fields.changes or fields.one_sided):
            report.fields.append(fields)
        errors = {v.detail for v in new.verdicts if v.status == Status.ERROR}
        report.errors += [f"{new.deployment.key}/{new.variant.id}: {e}" for e in sorted(errors)]
        old_w, new_w = _warnings(old), _warnings(new)
        if old_w.keys() != new_w.keys():
            report.warnings.append(
                WarningChange(
                    old.deployment.key,
                    old.variant.id,
                    tuple(sorted(new_w[k] for k in new_w.keys() - old_w.keys())),
                    tuple(sorted(old_w[k] for k in old_w.keys() - new_w.keys())),
                )
            )
    return report


def render(report: UpgradeReport) -> str:
    f, t = report.from_version, report.to_version
    lines = [f"SGLang {f} -> {t}", ""]
    lines.append("Flags" if report.flags else "Flags: no flag in use was removed, renamed or deprecated")
    for change in report.flags:
        if change.change == "renamed":
            said = f' ("{change.release_says}")' if change.release_says else ""
            instead = f"; its new name is {change.replacement}, from {change.source}{said}"
        elif change.source and change.source.startswith("SGLang"):
            said = f' ("{change.release_says}")' if change.release_says else ""
            instead = f"; {change.source} names its replacement: {change.replacement}{said}"
        else:
            instead = f"; sglperf will use {change.replacement}" if change.replacement else "; no known replacement"
        lines.append(f"  {change.flag}: {change.change} in {t} (used by {', '.join(change.used_by)}){instead}")
    lines += ["", f"Intents (effective value with {f} -> {t})"]
    width = max((len(f"{c.deployment}/{c.variant}") for c in report.intents), default=10)
    for c in report.intents:
        mark = ""
        if c.changed:
            mark = "BREAKS" if c.breaks else ("SGLang default changed" if not c.requested else "changed")
        lines.append(
            f"  {f'{c.deployment}/{c.variant}':{width}}  {c.intent:24} {c.before!s:34} -> "
            f"{c.after!s:34} {c.status_before}->{c.status_after} {mark}".rstrip()
        )
    if report.breaking:
        lines += ["", f"Would fail with {t}:"] + [
            f"  {c.deployment}/{c.variant} {c.intent}: {c.detail_after}" for c in report.breaking
        ]
    if report.fields:
        lines += ["", f"Effective fields that change under the intents ({f} -> {t}), with the rule on each side"]
    for fc in report.fields:
        lines.append(f"  {fc.deployment}/{fc.variant}:")
        for fchange in fc.changes:
            lines.append(f"    {fchange.named}: {fchange.shown_before} -> {fchange.shown_after}")
            sides = ((f, fchange.rule_before), (t, fchange.rule_after))
            lines += [f"        {v}: {w.describe()}" for v, w in sides if w is not None]
        if fc.one_sided:
            lines.append(
                f"    and {fc.one_sided} field(s) only one release has, at their defaults (counted, not listed)"
            )
    if report.warnings:
        lines += ["", "SGLang warnings"]
        for w in report.warnings:
            lines += [f"  {w.deployment}/{w.variant} new: {m}" for m in w.appeared]
            lines += [f"  {w.deployment}/{w.variant} gone: {m}" for m in w.vanished]
    if report.errors:
        lines += ["", f"Refused by {t}:"] + [f"  {e}" for e in report.errors]
    lines += [
        "",
        f"{len(report.changed)} intents change, {len(report.breaking)} would fail with {t}, "
        f"{len(report.flags)} flag changes",
    ]
    return "\n".join(lines)


# --- The walk: the releases in between, resolved in turn ---------------------------------------------


@dataclass(frozen=True)
class ReleaseStep:
    """One release of a walk, as it resolved the deployments (or why it could not)."""

    version: str
    parser: ParserInfo | None
    checks: tuple[VariantCheck, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class Transition:
    """A value that changed from one walked release to the next, and the rule that set it there."""

    deployment: str
    variant: str
    what: str  # "intent prefill_cuda_graph" or a field path
    release: str  # the first release with the new value
    before: str
    after: str
    rule: str = ""


@dataclass
class WalkReport:
    from_version: str
    to_version: str
    walked: list[str] = field(default_factory=list)  # every release resolved, in order
    unresolved: list[str] = field(default_factory=list)  # "0.5.17: why"
    transitions: list[Transition] = field(default_factory=list)
    # A flag the target lacks -> what the walked releases' own parsers said of it, link by link.
    chains: dict[str, list[Deprecation]] = field(default_factory=dict)
    chain_ends_accepted: dict[str, bool] = field(default_factory=dict)  # does the target accept the chain's end

    def to_record(self) -> dict[str, Any]:
        return {
            "from": self.from_version,
            "to": self.to_version,
            "walked": self.walked,
            "unresolved": self.unresolved,
            "transitions": [asdict(t) for t in self.transitions],
            "chains": {flag: [asdict(link) for link in links] for flag, links in self.chains.items()},
            "chain_ends_accepted": self.chain_ends_accepted,
        }


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
            new = by_key.get(key)
            if new is None:
                continue
            then, now = _intent_values(old), _intent_values(new)
            for intent, value in then.items():
                if intent in now and now[intent] != value:
                    rule = _intent_rule(intent, new)
                    walk.transitions.append(
                        Transition(*key, f"intent {intent}", after.version, value, now[intent], rule)
                    )
            if old.resolution is None or new.resolution is None:
                continue
            if old.resolution.effective is None or new.resolution.effective is None:
                continue
            for change in field_changes(
                config_and_model(old.resolution),
                config_and_model(new.resolution),
                old.resolution.writes,
                new.resolution.writes,
            ):
                if change.field not in watched.get(key, ()):
                    continue
                write = change.rule_after or change.rule_before
                walk.transitions.append(
                    Transition(
                        *key,
                        change.named,
                        after.version,
                        change.shown_before,
                        change.shown_after,
                        write.describe() if write else "",
                    )
                )
    said = DeprecationLedger().with_parsers(*(s.parser for s in steps))
    target = steps[-1].parser
    for flag_change in report.flags:
        if flag_change.change in ("removed", "renamed"):
            links = said.chain(flag_change.flag)
            if links:
                walk.chains[flag_change.flag] = list(links)
                end = flag_of(links[-1].replacement)
                walk.chain_ends_accepted[flag_change.flag] = target is not None and target.canonical(end) is not None
    return walk


def render_walk(walk: WalkReport) -> str:
    lines = ["", f"Releases walked: {' -> '.join(walk.walked)}"]
    lines += [f"  not resolved: {u}" for u in walk.unresolved]
    if walk.chains:
        lines += ["", "Flags the target lacks, through the releases' own deprecations"]
        for flag, links in walk.chains.items():
            said = " -> ".join(
                f"{link.replacement} ({link.first} deprecated {link.flag} and named it)" for link in links
            )
            end = (
                f"accepted by {walk.to_version}"
                if walk.chain_ends_accepted.get(flag)
                else f"not accepted by {walk.to_version}"
            )
            lines.append(f"  {flag} -> {said}; {end}")
    lines += ["", "Where each change happened (the first release with the new value, and its rule)"]
    if not walk.transitions:
        lines.append("  nothing the upgrade changes moved in between")
    by_variant = sorted(walk.transitions, key=lambda t: (t.deployment, t.variant))  # stable: releases in order
    for (deployment, variant), group in groupby(by_variant, key=lambda t: (t.deployment, t.variant)):
        lines.append(f"  {deployment}/{variant}:")
        for t in group:
            lines.append(f"    {t.release}: {t.what}: {t.before} -> {t.after}")
            if t.rule:
                lines.append(f"        {t.rule[:300]}")
    return "\n".join(lines)
