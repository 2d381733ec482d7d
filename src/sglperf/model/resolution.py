"""Effective-args records: what SGLang's resolution (or a running server) says it will do."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Terminal colour and cursor codes SGLang's loggers emit when they think a terminal is attached.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


@dataclass(frozen=True)
class LogLine:
    level: str
    logger: str
    message: str


@dataclass(frozen=True)
class Write:
    """One decision SGLang's resolution made: which rule set which field."""

    field: str
    new: Any
    rule: str
    where: str = ""
    code: str = ""
    comment: str = ""
    changed: bool = True
    conditions: tuple[str, ...] = ()  # the if/elif headers the statement sits under, outermost first
    old: Any = None  # the field's value before this write

    def describe(self, comment_chars: int = 160) -> str:
        return describe_rule(self.rule, self.where, self.conditions, self.comment, comment_chars)


VALUE_CHARS = 70


def shown_value(value: Any) -> str:
    """A field's value in a line: long lists by their ends and length (``[1, 2, 3, ..., 32] (20 values)``)."""
    if isinstance(value, list) and len(value) > 6:
        return f"[{', '.join(map(repr, value[:3]))}, ..., {value[-1]!r}] ({len(value)} values)"
    text = repr(value)
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 3] + "..."


def describe_rule(rule: str, where: str, conditions: Sequence[str], comment: str, comment_chars: int = 160) -> str:
    """One line: ``_handle_piecewise_cuda_graph (server_args.py:1376), under `if self....is_multimodal`,
    "8. Multimodal / VLM models"``. Guards of the form ``x is None`` ("unless set") are left out: they
    say only that nothing asked for a value."""
    parts = [rule + (f" ({where})" if where else "")]
    shown = [c for c in conditions if not c.endswith("is None") and c != "else"]
    if shown:
        parts.append("under " + " and ".join(f"`{c}`" for c in shown))
    if comment:
        if len(comment) > comment_chars:
            comment = comment[:comment_chars].rsplit(" ", 1)[0] + " ..."
        parts.append(f'"{comment}"')
    return ", ".join(parts)


@dataclass(frozen=True)
class Decision:
    """One effective field SGLang set to something other than its parser default or what the argv asked."""

    field: str  # dotted for nested settings: cuda_graph_config.decode.max_bs
    value: Any
    concern: str
    was: Any  # what it would be without SGLang's rules: the argv's value, else the parser default
    asked: bool  # the argv asked for ``was``: SGLang overrode the ask
    rule: Write | None  # the last write that set it; None when no write was seen (the value came another way)
    turns_off: bool  # an optimisation switched off (disable_* True, enable_* False)


@dataclass(frozen=True)
class FieldChange:
    """One effective field that differs between two configs (two variants, two releases, a baseline and now)."""

    field: str
    concern: str
    before: Any
    after: Any
    rule_before: Write | None = None
    rule_after: Write | None = None
    absent_before: bool = False  # the field did not exist on the before side (a release without it)
    absent_after: bool = False
    asked_before: str | None = None  # the flag that asked for the before side's value, if one did
    asked_after: str | None = None
    name_before: str | None = None  # the before side's older name for the setting (cuda_graph_max_bs)

    @property
    def named(self) -> str:
        return f"{self.name_before} -> {self.field}" if self.name_before else self.field

    @property
    def shown_before(self) -> str:
        return "(absent)" if self.absent_before else shown_value(self.before)

    @property
    def shown_after(self) -> str:
        return "(absent)" if self.absent_after else shown_value(self.after)

    @property
    def move(self) -> str:
        """``cuda_graph_max_bs -> cuda_graph_config.decode.max_bs 24 -> 48``: the field and its two values."""
        return f"{self.named} {self.shown_before} -> {self.shown_after}"


# The error type of a variant whose resolution passed but whose start-up SGLang would refuse on the
# runner's GPUs (the probe, which runs without sglperf installed, spells it too).
STARTUP_REFUSAL = "StartupRefusal"


@dataclass(frozen=True)
class SGLangError:
    type: str
    message: str


@dataclass(frozen=True)
class ModelFacts:
    """What SGLang's own model class builds for a variant, constructed on torch's meta device inside
    the preflight worker (no weights, no memory, no GPU; tensor-parallel rank 0 simulated)."""

    architecture: str  # the model class SGLang chose
    vision_tower: str | None  # class of the vision tower it built (model.visual & co.), None when not built
    moe_layers: int  # modules with routed experts (FusedMoE, *SparseMoeBlock, ...)
    param_bytes_per_rank: int  # every parameter held by tensor-parallel rank 0
    vision_param_bytes_per_rank: int  # the vision tower's share of it
    draft_architecture: str | None = None  # speculative draft / MTP model class, when one is built
    draft_param_bytes_per_rank: int = 0
    seconds: float = 0.0  # construction time in the worker (target and draft; built once per model)
    draft_error: str | None = None  # "<Type>: <message>" when the target was built but its draft was not


@dataclass(frozen=True)
class EffectiveArgs:
    """What SGLang decided, seen from any tier: resolved fields, its log lines, and (in preflight)
    which of its rules set which field."""

    fields: dict[str, Any]
    logs: tuple[LogLine, ...] = ()
    writes: tuple[Write, ...] = ()
    model: ModelFacts | None = None  # what the model class builds (preflight, where construction works)
    model_error: str | None = None


@dataclass(frozen=True)
class Resolution:
    """One variant resolved by SGLang's own code in preflight (or refused by it)."""

    argv: tuple[str, ...]
    env: dict[str, str]
    effective: dict[str, Any] | None
    logs: tuple[LogLine, ...] = ()
    writes: tuple[Write, ...] = ()
    error: SGLangError | None = None
    seconds: float = 0.0
    cached: bool = False
    model: ModelFacts | None = None  # None when not built; model_error says why
    model_error: str | None = None

    @property
    def effective_args(self) -> EffectiveArgs | None:
        if self.effective is None:
            return None
        return EffectiveArgs(self.effective, self.logs, self.writes, self.model, self.model_error)
