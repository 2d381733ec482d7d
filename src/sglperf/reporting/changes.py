"""`sglperf compare A B` for a person: what changed between two runs (`history.compare`), as a table.

A metric's move is shown with B's own verdict on it, in its report's words: a move within the noise is
"unchanged" (with its p-value), never "better" or "worse" by its sign alone."""

from __future__ import annotations

from collections.abc import Sequence

from sglperf.history.compare import ChangeRow, MetricMove
from sglperf.model.metrics import MetricOutcome, describe_change


def move_words(move: MetricMove) -> str:
    """The change, then B's verdict against its baseline as its report gives it (and A's when it differs):
    "+15.2% (worse); B regression (p = 0.0011)", "-21.1%; B unchanged (p = 0.12)" (noise has no better
    or worse), "-11.0% (worse); not judged in B" (no baseline comparison in B)."""
    shown = describe_change(move.metric, move.before, move.after)  # "+15.2% (worse)", or the bare change
    moved = shown.split(" (", 1)[0]
    p = f" (p = {move.p_value:.2g})" if move.p_value is not None else ""
    if move.verdict is None:
        said = f"{shown}; not judged in B"
    elif move.verdict is MetricOutcome.INSUFFICIENT:
        said = f"{moved}; B not judged (too few samples)"
    elif move.verdict is MetricOutcome.UNCHANGED:
        said = f"{moved}; B unchanged{p}"
    else:
        said = f"{shown}; B {move.verdict.value}{p}"
    was = f", A {move.was.value}" if move.was is not None and move.was != move.verdict else ""
    return said + was


def changes_table(a_label: str, b_label: str, rows: Sequence[ChangeRow]) -> str:
    """A markdown table (one line when nothing changed)."""
    if not rows:
        return f"no metric moved by its floor and no intent changed between A {a_label} and B {b_label}"
    lines = [
        f"A: {a_label}",
        f"B: {b_label}",
        "",
        "| item | metric / intent | A | B | change |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.item} | {r.what} | {r.before} | {r.after} | {move_words(r.move) if r.move else r.change} |" for r in rows
    ]
    return "\n".join(lines)
