"""`sglperf explain` for a person (text) and for tools (JSON)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from itertools import groupby

from sglperf.model.explanation import Explanation, FlagEffect
from sglperf.model.resolution import Decision, FieldChange, Write, shown_value
from sglperf.reporting.json_out import json_text


def _rule(write: Write | None) -> str:
    return write.describe() if write is not None else "no write seen (the release's own field default)"


def _decision(d: Decision) -> list[str]:
    was = f"asked {shown_value(d.was)}, SGLang set it" if d.asked else f"default {shown_value(d.was)}"
    return [f"  {d.field} = {shown_value(d.value)}  ({was})", f"      {_rule(d.rule)}"]


def _change(c: FieldChange, before: str, after: str) -> list[str]:
    lines = [f"  {c.named}: {c.shown_before} -> {c.shown_after}"]
    for side, asked, rule in ((before, c.asked_before, c.rule_before), (after, c.asked_after, c.rule_after)):
        if asked:
            lines.append(f"      {side}: asked by {asked}")
        elif rule is not None:
            lines.append(f"      {side}: {rule.describe()}")
    return lines


def _flag(effect: FlagEffect) -> list[str]:
    if effect.error is not None:
        return [f"  {effect.flag}: without it SGLang refuses the variant ({effect.error})"]
    if not effect.changes:
        return [f"  {effect.flag}: changes nothing (the same effective config without it)"]
    if effect.only_its_own_field:
        c = effect.changes[0]
        return [f"  {effect.flag}: changes only its own field ({c.move}): no other effective field moves"]
    return [f"  {effect.flag}: {', '.join(c.move for c in effect.changes if c.field != effect.field)}"]


def _decisions(decisions: Sequence[Decision]) -> list[str]:
    if not decisions:
        return ["  SGLang decided nothing beyond the argv and its parser's defaults"]
    out = []
    off = [d for d in decisions if d.turns_off]
    if off:
        out.append("Turned off by SGLang:")
        for d in off:
            out += _decision(d)
    for concern, group in groupby((d for d in decisions if not d.turns_off), key=lambda d: d.concern):
        out.append(f"{concern}:")
        for d in group:
            out += _decision(d)
    return out


def render(explanations: Sequence[Explanation]) -> str:
    out: list[str] = []
    for e in explanations:
        out.append(f"{e.deployment} / {e.variant} on SGLang {e.sglang_version}")
        if e.error is not None:
            out += [f"  not resolved: {e.error}", ""]
            continue
        out.append(f"  argv: {' '.join(e.argv)}")
        if e.comparison is None:
            out += _decisions(e.decisions)
        if e.comparison is not None:
            cmp = e.comparison
            out.append(f"Against {cmp.reference}: {len(cmp.changes)} effective field(s) differ")
            for concern, changes in groupby(cmp.changes, key=lambda c: c.concern):
                out.append(f"{concern}:")
                for c in changes:
                    out += _change(c, cmp.reference, e.variant)
            if cmp.flags:
                out.append(f"What each flag {e.variant} adds changes (resolved again without it):")
                for effect in cmp.flags:
                    out += _flag(effect)
        if e.out_of_scope:
            out.append(
                f"Left out, settings that cannot act on this model or its text traffic: {', '.join(e.out_of_scope)}"
            )
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def to_json(explanations: Sequence[Explanation]) -> str:
    return json_text([dataclasses.asdict(e) for e in explanations])
