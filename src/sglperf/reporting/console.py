"""The preflight verdicts for a terminal: a fixed-width table, or JSON records."""

from __future__ import annotations

from collections.abc import Sequence

from sglperf.model.verdict import Status, Verdict
from sglperf.reporting.json_out import json_text

SYMBOL = {
    Status.PASS: "ok",
    Status.FAIL: "FAIL",
    Status.INERT: "INERT",  # accepted, set, and no effect: a failure, never "ok"
    Status.UNPROVEN: "unproven",
    Status.ERROR: "ERROR",
}


def _cell(text: str | None, width: int) -> str:
    text = "-" if text is None else str(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def verdict_table(verdicts: Sequence[Verdict]) -> str:
    """A fixed-width table, then the full explanation of everything that did not pass."""
    headers = ("deployment", "variant", "intent", "expected", "effective", "verdict")
    rows = [(v.deployment, v.variant, v.intent, v.expected, v.actual, SYMBOL[v.status]) for v in verdicts]
    limits = (20, 24, 24, 44, 44, 9)
    widths = [
        min(limit, max(len(h), *(len(str(r[i] or "-")) for r in rows))) if rows else len(h)
        for i, (h, limit) in enumerate(zip(headers, limits))
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(_cell(c, w).ljust(w) for c, w in zip(row, widths)) for row in rows]
    notes = _notes(verdicts)
    if notes:
        lines += ["", *notes]
    counts = {s: sum(v.status == s for v in verdicts) for s in Status}
    versions = sorted({v.sglang_version for v in verdicts})
    lines += [
        "",
        f"SGLang {', '.join(versions)}: {counts[Status.PASS]} passed, {counts[Status.FAIL]} failed, "
        f"{counts[Status.INERT]} inert, {counts[Status.ERROR]} errors, {counts[Status.UNPROVEN]} unproven",
    ]
    return "\n".join(lines)


def _notes(verdicts: Sequence[Verdict]) -> list[str]:
    """The explanation of each verdict that did not pass; items SGLang refused for one reason (a flag of the
    deployment's [launch], refused for every variant) share one note."""
    refused: dict[tuple[str, str, str], list[Verdict]] = {}
    for v in verdicts:
        if v.status == Status.ERROR:
            refused.setdefault((v.deployment, v.sglang_version, v.detail), []).append(v)
    notes = []
    for v in verdicts:
        if v.status == Status.PASS and not v.caveats:
            continue
        together = refused.get((v.deployment, v.sglang_version, v.detail), []) if v.status == Status.ERROR else []
        if len(together) < 2:
            notes.append(v.message())
        elif v is together[0]:
            variants = ", ".join(dict.fromkeys(w.variant for w in together))
            head = f"{v.deployment}: SGLang {v.sglang_version} refused {len(together)} items (variants {variants})"
            notes.append("\n".join([head, *v.message().splitlines()[1:]]))
    return notes


def verdict_json(verdicts: Sequence[Verdict]) -> str:
    return json_text([v.to_record() for v in verdicts])
