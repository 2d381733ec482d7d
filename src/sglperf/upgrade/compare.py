"""The deployments under two releases, side by side: flags, intents, fields under them, warnings, refusals."""

from __future__ import annotations

import re
from collections.abc import Sequence

from sglperf.judge.decisions import config_and_model, decisions, field_changes
from sglperf.model.resolution import FieldChange
from sglperf.model.verdict import Status
from sglperf.preflight import VariantCheck
from sglperf.sglang.argv import ParsedArgv, ParserInfo
from sglperf.sglang.config_fields import OTHER, ModelScope
from sglperf.sglang.deprecations import DeprecationLedger, replacement
from sglperf.upgrade.records import FieldChanges, FlagChange, IntentChange, UpgradeReport, WarningChange

NUMBER = re.compile(r"\d+(\.\d+)?")


def flag_changes(
    old: ParserInfo, new: ParserInfo, old_checks: Sequence[VariantCheck], architectures: tuple[str, ...]
) -> list[FlagChange]:
    """The flags the deployments pass on the old release (their own, and those their requests spell there)
    that the new release removed (renamed, when the releases' own words name what it accepts instead) or
    deprecates. How sglperf would spell an intent nobody asks for is no change of the user's."""
    users: dict[str, set[str]] = {}
    for check in old_checks:
        if check.launch is not None:
            for flag in ParsedArgv(check.launch.argv, old).names:
                users.setdefault(flag, set()).add(f"{check.deployment.key}/{check.variant.id}")
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


def warnings_of(check: VariantCheck) -> dict[str, str]:
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
    scope = ModelScope.of(old.deployment.hf_config(), before.effective, after.effective)
    kept: list[FieldChange] = []
    one_sided, out_of_scope = 0, []
    for change in field_changes(config_and_model(before), config_and_model(after), before.writes, after.writes):
        if change.concern == OTHER:
            continue
        if (change.absent_before or change.absent_after) and change.field not in decided:
            one_sided += 1
            continue
        if not scope.applies(change.field):
            out_of_scope.append(change.field)
            continue
        kept.append(change)
    return FieldChanges(old.deployment.key, old.variant.id, tuple(kept), one_sided, tuple(out_of_scope))


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
        if fields is not None and (fields.changes or fields.one_sided or fields.out_of_scope):
            report.fields.append(fields)
        errors = {v.detail for v in new.verdicts if v.status == Status.ERROR}
        report.errors += [f"{new.deployment.key}/{new.variant.id}: {e}" for e in sorted(errors)]
        old_w, new_w = warnings_of(old), warnings_of(new)
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
