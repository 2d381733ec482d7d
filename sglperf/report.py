"""What people read: the preflight table and JSON, and the run report (markdown) from a results folder."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglperf.verdict import Status, Verdict

SYMBOL = {Status.PASS: "ok", Status.FAIL: "FAIL", Status.UNPROVEN: "unproven", Status.ERROR: "ERROR"}


def _cell(text: str | None, width: int) -> str:
    text = "-" if text is None else str(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def verdict_table(verdicts: Sequence[Verdict]) -> str:
    """A fixed-width table, then the full explanation of everything that did not pass."""
    headers = ("deployment", "variant", "intent", "expected", "effective", "verdict")
    rows = [(v.deployment, v.variant, v.intent, v.expected, v.actual, SYMBOL[v.status]) for v in verdicts]
    limits = (20, 24, 24, 44, 44, 9)
    widths = [min(limit, max(len(h), *(len(str(r[i] or "-")) for r in rows))) if rows else len(h)
              for i, (h, limit) in enumerate(zip(headers, limits))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(_cell(c, w).ljust(w) for c, w in zip(row, widths)) for row in rows]
    notes = [v.message() for v in verdicts if v.status != Status.PASS]
    if notes:
        lines += ["", *notes]
    counts = {s: sum(v.status == s for v in verdicts) for s in Status}
    versions = sorted({v.sglang_version for v in verdicts})
    lines += ["", f"SGLang {', '.join(versions)}: {counts[Status.PASS]} passed, {counts[Status.FAIL]} failed, "
                  f"{counts[Status.ERROR]} errors, {counts[Status.UNPROVEN]} unproven"]
    return "\n".join(lines)


def verdict_json(verdicts: Sequence[Verdict]) -> str:
    return json.dumps([v.to_record() for v in verdicts], indent=2, sort_keys=True)


# --- the run report: results folder -> markdown + plots -------------------------------------------

VERDICTS_GLOB = "verdicts*.jsonl"
MEASUREMENTS_DIR = "measurements"
REPORT_NAME = "report.md"


@dataclass(frozen=True)
class RunResults:
    folder: Path
    verdicts: tuple[dict[str, Any], ...]
    measurements: tuple[dict[str, Any], ...]


def collect(folder: Path) -> RunResults:
    """Read what a run wrote: verdict lines (one file per pytest process) and measurement records."""
    verdicts: list[dict[str, Any]] = []
    for path in sorted(folder.glob(VERDICTS_GLOB)):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                try:
                    verdicts.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{n}: not a JSON record ({exc})") from None
    measurements = []
    for path in sorted((folder / MEASUREMENTS_DIR).glob("*.json")):
        try:
            measurements.append(json.loads(path.read_text()))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not a JSON record ({exc})") from None
    if not verdicts and not measurements:
        raise ValueError(f"{folder}: no sglperf results here (expected {VERDICTS_GLOB} or {MEASUREMENTS_DIR}/*.json)")
    return RunResults(folder, tuple(verdicts), tuple(measurements))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def markdown(run: RunResults, plots: Mapping[str, Sequence[Path]] | None = None) -> str:
    """Per variant: intents with verdicts, then metrics against the baseline."""
    plots = plots or {}
    variants = sorted({(r["deployment"], r["variant"]) for r in (*run.verdicts, *run.measurements)})
    emulated = any(m.get("emulated") for m in run.measurements) or any("emulator" in v.get("tier", "") for v in run.verdicts)
    failed = sum(v.get("status") in ("fail", "error") for v in run.verdicts)
    regressions = sum(c.get("outcome") == "regression" for m in run.measurements for c in m.get("comparisons", []))
    lines = [f"# sglperf report: {run.folder.name}", ""]
    if emulated:
        lines += ["> Live numbers below come from the **SGLang emulator, a test double**: they are not GPU results.", ""]
    lines += [f"{len(variants)} variants, {len(run.verdicts)} intent checks ({failed} failed), "
              f"{len(run.measurements)} measurements ({regressions} regressions).", ""]
    for deployment, variant in variants:
        lines += [f"## {deployment} / {variant}", ""]
        checks = [v for v in run.verdicts if (v["deployment"], v["variant"]) == (deployment, variant)]
        if checks:
            lines += ["| tier | intent | expected | effective | verdict | detail |", "|---|---|---|---|---|---|"]
            for v in checks:
                detail = "; ".join([v.get("detail", ""), *v.get("reasons", [])[:1]]).replace("|", "\\|")[:300]
                lines.append(f"| {v.get('tier', '')} | {v['intent']} | {v['expected']} | {_fmt(v.get('actual'))} | "
                             f"**{v['status']}** | {detail} |")
            lines.append("")
        for m in (m for m in run.measurements if (m["deployment"], m["variant"]) == (deployment, variant)):
            lines += [f"### {m['workload']} at concurrency {m['concurrency']}", ""]
            notes = m.get("notes") or []
            if notes:
                lines += [f"Notes: {'; '.join(notes)}", ""]
            comparisons = {c["metric"]: c for c in m.get("comparisons", [])}
            lines += ["| metric | baseline | current | delta | threshold | verdict |", "|---|---:|---:|---:|---:|---|"]
            for metric, summary in sorted(m.get("summary", {}).items()):
                c = comparisons.get(metric)
                if c:
                    lines.append(f"| {metric} | {_fmt(c['baseline_median'])} | {_fmt(c['current_median'])} | "
                                 f"{c['change'] * 100:+.1f}% | {c['threshold'] * 100:.0f}% | **{c['outcome']}** |")
                else:
                    lines.append(f"| {metric} | - | {_fmt(summary.get('median'))} | - | - | "
                                 f"{m.get('baseline_status', 'no baseline')} |")
            lines.append("")
            for path in plots.get(m["key"], ()):
                lines += [f"![{path.stem}](plots/{path.name})", ""]
    return "\n".join(lines)


def write(folder: Path, history: Sequence[Path] = ()) -> Path:
    """Write report.md and plots/*.png into the results folder; returns the report's path."""
    from sglperf import plots as plotting

    run = collect(folder)
    made = plotting.draw(run, folder / "plots", history)
    path = folder / REPORT_NAME
    path.write_text(markdown(run, made) + "\n")
    return path
