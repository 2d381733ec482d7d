"""Effective-args records: what SGLang's resolution (or a running server) says it will do."""

from __future__ import annotations

import re
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
