"""Verdict records: one intent of one variant, judged in one tier."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any


class Status(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    UNPROVEN = "unproven"  # the effective args cannot prove it; never counted as passed
    ERROR = "error"  # SGLang refused the variant (unknown flag, validation error)
    # Accepted and set, but SGLang will not act on it for this model and release. A failure.
    INERT = "inert"

    @property
    def failed(self) -> bool:
        return self in (Status.FAIL, Status.ERROR, Status.INERT)


@dataclass(frozen=True)
class Verdict:
    deployment: str
    variant: str
    intent: str
    expected: str
    actual: str | None
    status: Status
    detail: str
    sglang_version: str
    reasons: tuple[str, ...] = ()  # SGLang rules and log lines that explain the actual value
    warnings: tuple[str, ...] = ()
    tier: str = "preflight"
    caveats: tuple[str, ...] = ()  # SGLang's own words for a rule this request overrides

    @property
    def ok(self) -> bool | None:
        """True passed, False failed or errored, None unproven."""
        return {Status.PASS: True, Status.UNPROVEN: None}.get(self.status, False)

    @property
    def test_id(self) -> str:
        return f"{self.deployment}-{self.variant}-{self.intent}"

    def message(self) -> str:
        head = (
            f"{self.test_id}: {self.intent} expected {self.expected}, effective {self.actual} "
            f"(SGLang {self.sglang_version}, {self.tier})"
            if self.status != Status.ERROR
            else f"{self.test_id}: SGLang {self.sglang_version} refused the variant"
        )
        lines = [head, f"  {self.detail}"]
        lines += [f"  because: {r}" for r in self.reasons]
        lines += [f"  caveat: {c}" for c in self.caveats]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def to_record(self) -> dict[str, Any]:
        """The JSON record (`--json`, verdicts*.jsonl); `from_record` reads it back."""
        return {
            "deployment": self.deployment,
            "variant": self.variant,
            "intent": self.intent,
            "expected": self.expected,
            "actual": self.actual,
            "ok": self.ok,
            "status": self.status.value,
            "detail": self.detail,
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
            "sglang_version": self.sglang_version,
            "tier": self.tier,
            "caveats": list(self.caveats),
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Verdict:
        """KeyError/TypeError/ValueError when ``record`` is not one (a damaged verdicts file)."""
        names = ("deployment", "variant", "intent", "expected")
        if not all(isinstance(record[k], str) for k in names):
            raise TypeError(f"{', '.join(names)} are strings")
        return cls(
            deployment=record["deployment"],
            variant=record["variant"],
            intent=record["intent"],
            expected=record["expected"],
            actual=None if record.get("actual") is None else str(record["actual"]),
            status=Status(record["status"]),
            detail=str(record.get("detail", "")),
            sglang_version=str(record.get("sglang_version", "unknown")),
            reasons=_lines(record, "reasons"),
            warnings=_lines(record, "warnings"),
            tier=str(record.get("tier", "preflight")),
            caveats=_lines(record, "caveats"),
        )


def _lines(record: Mapping[str, Any], name: str) -> tuple[str, ...]:
    """A list of lines of a verdict record (absent: none); TypeError for anything else."""
    value = record.get(name, [])
    if not isinstance(value, list) or not all(isinstance(line, str) for line in value):
        raise TypeError(f"{name} is a list of strings")
    return tuple(value)
