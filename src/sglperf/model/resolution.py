"""Effective-args records: what SGLang's resolution (or a running server) says it will do."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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


@dataclass(frozen=True)
class SGLangError:
    type: str
    message: str


@dataclass(frozen=True)
class EffectiveArgs:
    """What SGLang decided, seen from any tier: resolved fields, its log lines, and (in preflight)
    which of its rules set which field."""

    fields: dict[str, Any]
    logs: tuple[LogLine, ...] = ()
    writes: tuple[Write, ...] = ()


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

    @property
    def effective_args(self) -> EffectiveArgs | None:
        if self.effective is None:
            return None
        return EffectiveArgs(self.effective, self.logs, self.writes)
