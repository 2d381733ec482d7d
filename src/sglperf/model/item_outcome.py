"""How a failed pytest item of a run ended: the line a failing night's report shows even when the item
wrote no record of its own (a measurement refused on a busy host, a server that never came up, a user's
own test on the fixtures). Written as it happens, one JSON line each, so an interrupted run keeps them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_REASON_CHARS = 4000  # a traceback is cut here; the pytest output has it whole
INTERRUPTED_PHASE = "interrupted"  # the phase of an item Ctrl-C or SIGTERM cut off


@dataclass(frozen=True)
class ItemOutcome:
    nodeid: str
    phase: str  # "setup", "call", "teardown" (where it failed; "setup": an error before the test) or INTERRUPTED_PHASE
    reason: str  # the failure as pytest printed it, cut to MAX_REASON_CHARS
    duration_s: float

    def to_record(self) -> dict[str, Any]:
        return {"nodeid": self.nodeid, "phase": self.phase, "reason": self.reason, "duration_s": self.duration_s}

    @classmethod
    def from_record(cls, raw: dict[str, Any]) -> ItemOutcome:
        """KeyError/TypeError/ValueError when ``raw`` is not one."""
        nodeid, phase, reason = raw["nodeid"], raw["phase"], raw["reason"]
        if not all(isinstance(v, str) for v in (nodeid, phase, reason)):
            raise TypeError("nodeid, phase and reason are strings")
        return cls(nodeid, phase, reason, float(raw["duration_s"]))

    @property
    def headline(self) -> str:
        """The reason's first line that says something (a traceback's last line when it is one)."""
        lines = [ln.strip() for ln in self.reason.splitlines() if ln.strip()]
        if not lines:
            return "(no message)"
        errors = [ln for ln in lines if ln.startswith("E ")]
        return (errors[-1][1:].strip() if errors else lines[0])[:300]
