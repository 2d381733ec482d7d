"""Since when an item fails: the streak of failing runs that ends with the latest one.

Read from the store's outcomes of one item, newest first (a measurement on one runner, or an intent's
verdict in one tier). The streak's first run is where it went bad; its SGLang version and args digest
are what to look at first, beside the last run that passed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sglperf.history.records import ItemOutcome


@dataclass(frozen=True)
class FailingStreak:
    item: str
    runs: int  # failing runs in a row, the latest included
    first: ItemOutcome  # where it went bad
    last_pass: ItemOutcome | None  # the run just before, None when it never passed in the store

    def message(self) -> str:
        went_bad = (
            f"{self.item}: failing since {self.first.run.label}, {self.runs} run(s) in a row; first bad with "
            f"SGLang {self.first.sglang_version}, args {self.first.args_digest[:12]}"
        )
        if self.last_pass is None:
            return went_bad + "; it has not passed in the stored history"
        changed = []
        if self.last_pass.sglang_version != self.first.sglang_version:
            changed.append(f"SGLang {self.last_pass.sglang_version} -> {self.first.sglang_version}")
        if self.last_pass.args_digest != self.first.args_digest:
            changed.append("effective args changed")
        since = f"; last passed {self.last_pass.run.label}"
        return went_bad + since + (f" ({', '.join(changed)})" if changed else " (same SGLang and args)")


def failing_streak(item: str, newest_first: Sequence[ItemOutcome]) -> FailingStreak | None:
    """The streak of failures ending with the newest outcome; None when the newest passed."""
    runs = 0
    for outcome in newest_first:
        if not outcome.failed:
            break
        runs += 1
    if runs == 0:
        return None
    last_pass = newest_first[runs] if runs < len(newest_first) else None
    return FailingStreak(item, runs, newest_first[runs - 1], last_pass)
