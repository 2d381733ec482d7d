"""An upgrade check and its walk, for a person."""

from __future__ import annotations

from itertools import groupby

from sglperf.upgrade import FieldChanges, FlagChange, IntentChange, UpgradeReport, WalkReport
from sglperf.upgrade.records import MODEL_BUILD, WARNING, Transition


def _flag_line(change: FlagChange, target: str) -> str:
    said = f' ("{change.release_says}")' if change.release_says else ""
    if change.change == "renamed":
        instead = f"; its new name is {change.replacement}, from {change.source}{said}"
    elif change.source and change.source.startswith("SGLang"):
        instead = f"; {change.source} names its replacement: {change.replacement}{said}"
    else:
        instead = f"; sglperf will use {change.replacement}" if change.replacement else "; no known replacement"
    return f"  {change.flag}: {change.change} in {target} (used by {', '.join(change.used_by)}){instead}"


def _intent_line(c: IntentChange, width: int) -> str:
    mark = ""
    if c.changed:
        mark = "BREAKS" if c.breaks else ("SGLang default changed" if not c.requested else "changed")
    elif c.standing:
        mark = "fails on both"
    return (
        f"  {f'{c.deployment}/{c.variant}':{width}}  {c.intent:24} {c.before!s:34} -> "
        f"{c.after!s:34} {c.status_before}->{c.status_after} {mark}".rstrip()
    )


def _field_lines(fc: FieldChanges, old: str, new: str) -> list[str]:
    lines = [f"  {fc.deployment}/{fc.variant}:"]
    for change in fc.changes:
        lines.append(f"    {change.named}: {change.shown_before} -> {change.shown_after}")
        sides = ((old, change.rule_before), (new, change.rule_after))
        lines += [f"        {v}: {w.describe()}" for v, w in sides if w is not None]
    if fc.one_sided:
        lines.append(f"    and {fc.one_sided} field(s) only one release has, at their defaults (counted, not listed)")
    if fc.out_of_scope:
        lines.append(
            f"    and settings that cannot act on this model or its text traffic: {', '.join(fc.out_of_scope)}"
        )
    return lines


def render(report: UpgradeReport) -> str:
    f, t = report.from_version, report.to_version
    lines = [f"SGLang {f} -> {t}", ""]
    lines.append("Flags" if report.flags else "Flags: no flag in use was removed, renamed or deprecated")
    lines += [_flag_line(change, t) for change in report.flags]
    lines += ["", f"Intents (effective value with {f} -> {t})"]
    width = max((len(f"{c.deployment}/{c.variant}") for c in report.intents), default=10)
    lines += [_intent_line(c, width) for c in report.intents]
    if report.breaking:
        lines += ["", f"Would fail with {t}:"] + [
            f"  {c.deployment}/{c.variant} {c.intent}: {c.detail_after}" for c in report.breaking
        ]
    if report.standing:
        lines += ["", f"Failing with {f} and {t} alike (not the upgrade's doing):"] + [
            f"  {c.deployment}/{c.variant} {c.intent}: {c.detail_after}" for c in report.standing
        ]
    if report.fields:
        lines += ["", f"Effective fields that change under the intents ({f} -> {t}), with the rule on each side"]
    for fc in report.fields:
        lines += _field_lines(fc, f, t)
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
        f"{len(report.standing)} fail on both, {len(report.flags)} flag changes",
    ]
    return "\n".join(lines)


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
            lines.append(f"    {_transition_line(t)}")
            if t.rule:
                lines.append(f"        {t.rule_release + ': ' if t.rule_release else ''}{t.rule[:300]}")
    return "\n".join(lines)


def _transition_line(t: Transition) -> str:
    when = t.release + (f" (or {', '.join(t.unsure)} before it, where it is not known)" if t.unsure else "")
    if t.what == WARNING:
        return (
            f"{when}: SGLang warns: {t.after}"
            if t.before == "(none)"
            else f"{when}: SGLang no longer warns: {t.before}"
        )
    if t.what == MODEL_BUILD and t.after == "built":
        return f"{when}: the model class is built again"
    if t.what == MODEL_BUILD:
        return f"{when}: the model class was {t.after}: what it builds, and the intents that depend on it, are unproven"
    return f"{when}: {t.what}: {t.before} -> {t.after}"
