"""What SGLang decided beyond the argv: every effective field its resolution set, and what differs
between two effective configs.

A field is a *decision* when its effective value is neither what the argv asked nor, where the argv did
not ask, the parser's default (for a nested setting such as ``cuda_graph_config.decode.max_bs``, which no
flag sets alone, the value the flags parsed to before any rule ran). Each decision carries the last
write that set it: the rule, its file:line, the branch and SGLang's comment. A value equal to what was
asked or defaulted is not a decision, even when a rule wrote it again.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from sglperf.model.resolution import Decision, FieldChange, Resolution, Write
from sglperf.sglang.argv import AskedValue, ParsedArgv, ParserInfo
from sglperf.sglang.config_fields import concern_of, concern_rank, container_of, flatten, newest_names, turns_off
from sglperf.sglang.server_api import IDENTITY_FIELDS


def same_value(asked: str | list[str] | bool, value: Any) -> bool:
    """An argv string against a resolved value: ``"4096"`` is 4096, ``["1", "2"]`` is [1, 2]."""
    if isinstance(value, bool) and isinstance(asked, str):
        return asked.lower() in ("true", "1") if value else asked.lower() in ("false", "0")
    if isinstance(asked, bool) or isinstance(value, bool):
        return bool(asked == value)
    if isinstance(asked, list) or isinstance(value, list | tuple):
        items = asked if isinstance(asked, list) else [asked]
        values = list(value) if isinstance(value, list | tuple) else [value]
        return len(items) == len(values) and all(same_value(a, v) for a, v in zip(items, values, strict=True))
    if value is None:
        return asked.lower() == "none"
    if isinstance(value, int | float):
        try:
            return float(asked) == float(value)
        except ValueError:
            return False
    return asked == str(value)


def _last_write(writes: Sequence[Write], path: str) -> Write | None:
    """The last write that changed ``path``: its own (a traced nested setting), else its container's."""
    for name in (path, container_of(path)):
        found = [w for w in writes if w.field == name and w.changed]
        if found:
            return found[-1]
    return None


def _parsed_before_rules(writes: Sequence[Write], path: str) -> tuple[bool, Any]:
    """A nested setting's value as the flags parsed it, read from the first write to its container."""
    first = next((w for w in writes if w.field == container_of(path)), None)
    if first is None or path == first.field:
        return False, None
    value: Any = first.old if isinstance(first.old, Mapping) else first.new
    for key in path.split(".")[1:]:
        if not isinstance(value, Mapping) or key not in value:
            return False, None
        value = value[key]
    return True, value


def decisions(resolution: Resolution, parser: ParserInfo) -> list[Decision]:
    """Every decision of one resolution, those that switched an optimisation off first, then by concern
    (most performance-relevant first) and name."""
    if resolution.effective is None:
        return []
    asked = ParsedArgv(resolution.argv, parser).asked()
    # A switch that sets no default of its own (argparse.SUPPRESS) leaves the field's default to ServerArgs.
    defaults = {o.dest: o.default for o in parser.options.values() if o.default != argparse.SUPPRESS}
    found: list[Decision] = []
    for path, value in flatten(resolution.effective).items():
        write = _last_write(resolution.writes, path)
        if path in asked:
            if same_value(asked[path].value, value):
                continue
            was, by_argv = asked[path].value, True
        elif path in defaults:
            if defaults[path] == value:
                continue
            was, by_argv = defaults[path], False
        else:
            known, was = _parsed_before_rules(resolution.writes, path)
            if (known and was == value) or write is None:
                continue
            by_argv = False
        found.append(Decision(path, value, concern_of(path), was, by_argv, write, turns_off(path, was, value)))
    return sorted(found, key=lambda d: (not d.turns_off, concern_rank(d.field), d.field))


def field_changes(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    writes_before: Sequence[Write] = (),
    writes_after: Sequence[Write] = (),
    leave_out: frozenset[str] = IDENTITY_FIELDS,
) -> list[FieldChange]:
    """Fields whose effective values differ, by concern (most performance-relevant first) and name; a
    field only one side has is a change too (a release added or removed it)."""
    flat_before, flat_after = flatten(before, leave_out), flatten(after, leave_out)
    # A setting one side names the old way (0.5.13's cuda_graph_max_bs) compares under its newest name.
    # (Only where the other side has the newest name: two sides that both say cuda_graph_max_bs keep it.)
    renamed_before = {old: new for old, new in newest_names(flat_before).items() if new in flat_after}
    renamed_after = {old: new for old, new in newest_names(flat_after).items() if new in flat_before}
    named_before = {renamed_before.get(k, k): k for k in flat_before}
    named_after = {renamed_after.get(k, k): k for k in flat_after}
    changes = []
    for path in sorted(named_before.keys() | named_after.keys(), key=lambda p: (concern_rank(p), p)):
        was_name, now_name = named_before.get(path), named_after.get(path)
        old = flat_before[was_name] if was_name is not None else None
        new = flat_after[now_name] if now_name is not None else None
        if was_name is not None and now_name is not None and old == new:
            continue
        changes.append(
            FieldChange(
                path,
                concern_of(path),
                old,
                new,
                _last_write(writes_before, was_name) if was_name else None,
                _last_write(writes_after, now_name) if now_name else None,
                absent_before=was_name is None,
                absent_after=now_name is None,
                name_before=was_name if was_name != path else None,
            )
        )
    return changes


# What the model class builds, compared beside the fields (a flag can change the model and no field:
# language_model_only drops the vision tower). Construction time is not a decision.
BUILT_MODEL = "built_model"
_BUILT_MODEL_FIELDS = (
    "architecture",
    "vision_tower",
    "moe_layers",
    "param_bytes_per_rank",
    "vision_param_bytes_per_rank",
    "draft_architecture",
    "draft_param_bytes_per_rank",
)


def config_and_model(resolution: Resolution) -> dict[str, Any]:
    """The effective fields, with what the model class builds under ``built_model`` when it was built."""
    config = dict(resolution.effective or {})
    if resolution.model is not None:
        config[BUILT_MODEL] = {name: getattr(resolution.model, name) for name in _BUILT_MODEL_FIELDS}
    return config


def differing_flags(reference_argv: Sequence[str], argv: Sequence[str], parser: ParserInfo) -> list[AskedValue]:
    """The flags ``argv`` has that ``reference_argv`` does not have with the same value."""
    reference = ParsedArgv(reference_argv, parser).asked()
    return [a for dest, a in ParsedArgv(argv, parser).asked().items() if reference.get(dest) != a]
