"""How a failed pytest item of a run ended: the line a failing night's report shows even when the item
wrote no record of its own (a measurement refused on a busy host, a server that never came up, a user's
own test on the fixtures). Written as it happens, one JSON line each, so an interrupted run keeps them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# A reason longer than this keeps its head and its tail, where a traceback's message is; the pytest output
# has it whole.
MAX_REASON_CHARS = 4000
REASON_HEAD_CHARS = 800
HEADLINE_CHARS = 300
INTERRUPTED_PHASE = "interrupted"  # the phase of an item Ctrl-C or SIGTERM cut off
# A long traceback's frame opens with the function's arguments (pytest prints `cls = <class
# '_pytest.runner.CallInfo'>` first when the exception came out of a hook or fixture): never a reason.
_FRAME_ARGUMENT = re.compile(r"^[A-Za-z_]\w* = ")
# A traceback entry's last line: "src/sglperf/model/checkpoint.py:161: ValueError".
_ENTRY_END = re.compile(r"^(\S+:\d+): ([A-Za-z_][\w.]*)$")


def fit_reason(text: str) -> str:
    """A failure's text within MAX_REASON_CHARS: its head and its tail, with the cut said between."""
    if len(text) <= MAX_REASON_CHARS:
        return text
    marker = "\n[... cut here; the pytest output has it whole ...]\n"
    tail = MAX_REASON_CHARS - REASON_HEAD_CHARS - len(marker)
    return text[:REASON_HEAD_CHARS] + marker + text[-tail:]


@dataclass(frozen=True)
class ItemOutcome:
    nodeid: str
    phase: str  # "setup", "call", "teardown" (where it failed; "setup": an error before the test) or INTERRUPTED_PHASE
    reason: str  # the failure as pytest printed it, fitted by fit_reason
    duration_s: float
    # The exception's own line as pytest's crash report has it ("ValueError: ..."), when it was one;
    # "" for a failure an item words itself, and in records written before it was kept.
    message: str = ""

    def to_record(self) -> dict[str, Any]:
        record = {"nodeid": self.nodeid, "phase": self.phase, "reason": self.reason, "duration_s": self.duration_s}
        return {**record, "message": self.message} if self.message else record

    @classmethod
    def from_record(cls, raw: dict[str, Any]) -> ItemOutcome:
        """KeyError/TypeError/ValueError when ``raw`` is not one."""
        nodeid, phase, reason, message = raw["nodeid"], raw["phase"], raw["reason"], raw.get("message", "")
        if not all(isinstance(v, str) for v in (nodeid, phase, reason, message)):
            raise TypeError("nodeid, phase, reason and message are strings")
        return cls(nodeid, phase, reason, float(raw["duration_s"]), message)

    @property
    def headline(self) -> str:
        """The item's own failure line: its exception's message, else a traceback's last ``E`` line, else
        the reason's first line that says more than the item's name; never a traceback frame's arguments."""
        said = [ln.strip() for ln in self.message.splitlines() if ln.strip()]
        if said:
            return said[0][:HEADLINE_CHARS]
        lines = [ln.strip() for ln in self.reason.splitlines() if ln.strip()]
        if not lines:
            return "(no message)"
        errors = [ln for ln in lines if ln.startswith("E ")]
        if errors:
            return errors[-1][1:].strip()[:HEADLINE_CHARS]
        if _FRAME_ARGUMENT.match(lines[0]):  # a traceback whose message was cut off (an older record)
            entries = [m for ln in lines if (m := _ENTRY_END.match(ln))]
            where = f"{entries[-1][2]} at {entries[-1][1]}" if entries else "an exception"
            return f"{where}; its message is in the pytest output (this record kept only the traceback's start)"
        name = self.nodeid.rsplit("::", 1)[-1]
        if lines[0] in (f"{name}:", f"{name}") and len(lines) > 1:  # an item's own report opens with its name
            lines = lines[1:]
        return lines[0][:HEADLINE_CHARS]
