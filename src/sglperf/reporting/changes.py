"""`sglperf compare A B` for a person: what changed between two runs (`history.compare`), as a table."""

from __future__ import annotations

from collections.abc import Sequence

from sglperf.history.compare import ChangeRow


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
    lines += [f"| {r.item} | {r.what} | {r.before} | {r.after} | {r.change} |" for r in rows]
    return "\n".join(lines)
