"""The run report: a `RunReport` as markdown (report.md), with its plots."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sglperf.baselines import roofline
from sglperf.history import HistoryError, SqlHistoryStore, open_store
from sglperf.history.ingest import stored_run
from sglperf.model.files import NotAFolderError, own_folder, write_text_atomic
from sglperf.model.item_outcome import INTERRUPTED_PHASE
from sglperf.model.measurement import MeasurementRecord, Roofline
from sglperf.model.metrics import describe_change
from sglperf.model.numbers_source import NumbersSource
from sglperf.reporting import history, plots
from sglperf.reporting.effects import effects_markdown
from sglperf.reporting.plots import effect_plot_name
from sglperf.reporting.run_report import RunReport, read_report
from sglperf.results.folder import PLOTS_DIR, REPORT_NAME, ResultsError, collect
from sglperf.sglang.metrics_catalogue import WATCHED


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def _rounds_line(m: MeasurementRecord) -> str | None:
    if m.rounds is None:
        return None
    how = "sequential" if m.rounds.sequential else "fixed"
    reason = f": {m.rounds.reason}" if m.rounds.reason else ""
    return f"Rounds: {m.rounds.used} of {m.rounds.budget} ({how}{reason})"


def _host_line(m: MeasurementRecord) -> str | None:
    h = m.host
    if h is None:
        return f"Host: {m.host_note}" if m.host_note else None
    line = (
        f"Host: other processes and the hypervisor took a median {h.median_share:.0%} of this machine's CPU "
        f"during the measured rounds (max {h.max_share:.0%}; a round above {h.limit:.0%} is run again)"
    )
    if h.dropped_rounds:
        line += f"; **{h.dropped_rounds} round(s) run again**, the busiest: {h.worst_dropped}"
    return line


def _gpu_line(m: MeasurementRecord) -> str | None:
    g = m.gpu
    if g is None:
        return f"GPU: {m.gpu_note}" if m.gpu_note else None
    line = f"GPU (NVML, measured rounds): {g.describe()}"
    if g.dropped_rounds:
        line += f"; **{g.dropped_rounds} round(s) run again**, the worst: {g.worst_dropped}"
    return line


def _server_metrics_line(m: MeasurementRecord) -> str | None:
    s = m.server_metrics
    if s is None:
        return f"Server metrics: {m.server_metrics_note}" if m.server_metrics_note else None
    shown = [f"{w.label} {statistics.median(s.series[w.series]):.3g}" for w in WATCHED if s.series.get(w.series)]
    return f"Server metrics (SGLang's /metrics, {s.scrapes} readings; median over rounds): " + ", ".join(shown)


def _hardware_roofline(m: MeasurementRecord) -> Roofline | None:
    """The roofline to show as a hardware figure: none for the emulator, even from a record written
    before sglperf stopped computing one there (the runner's GPU bandwidth is not the emulator's)."""
    return None if m.numbers_source is NumbersSource.EMULATOR else m.roofline


def _roofline_line(m: MeasurementRecord) -> str | None:
    if m.numbers_source is NumbersSource.EMULATOR:
        return f"Roofline: not computed ({roofline.EMULATOR_NOTE})"
    r = m.roofline
    if r is None:
        return f"Roofline: not computed ({m.roofline_note})" if m.roofline_note else None
    if r.problem:
        return f"Roofline: **not a hardware figure**: {r.problem}"
    return (
        f"Roofline: decode {r.measured_tok_s:.4g} tok/s is **{r.fraction:.0%} of roofline** "
        f"({r.limit_tok_s:.4g} tok/s = {r.bandwidth_gbs:g} GB/s / {r.weight_bytes_per_gpu / 1e9:.3g} GB "
        f"per GPU per step x {r.tokens_per_step:.3g} tok/step; bandwidth: {r.bandwidth_source}; "
        f"weights: {r.weight_source}; tokens per step: {r.tokens_per_step_source})"
    )


def _batches_line(m: MeasurementRecord) -> str | None:
    b = m.batches
    if b is None:
        return None
    prefill, prefill_graph = b.total("prefill")
    decode, decode_graph = b.total("decode")
    every = f"1 step in {b.decode_log_interval}" if b.decode_log_interval else "at the release's interval"
    label = b.graph_label or "no graph field"
    line = (
        f"Batches (SGLang's log: every prefill, decode {every}): decode {decode_graph} of {decode} ran the "
        f"graph, prefill {prefill_graph} of {prefill} ({label})"
    )
    running = [r.max_running_req for r in b.rounds if r.max_running_req is not None]
    queued = [r.max_queue_req for r in b.rounds if r.max_queue_req is not None]
    if running:
        line += f"; at most {max(running)} running, {max(queued, default=0)} queued"
    accept = [r.accept_len for r in b.rounds if r.accept_len is not None]
    if accept:
        line += f"; accept len per round {min(accept):.2f}-{max(accept):.2f}"
    return line


def markdown(report: RunReport, plot_files: Mapping[str, Sequence[Path]] | None = None) -> str:
    """Per variant: intents with verdicts, then metrics against the baseline, rounds, roofline, drift;
    first, since when each failing item fails."""
    plot_files = plot_files or {}
    past = report.past
    drifts = past.drifts
    variants = sorted(
        {(v.deployment, v.variant) for v in report.verdicts} | {(m.deployment, m.variant) for m in report.measurements}
    )
    failed = sum(v.status.failed for v in report.verdicts)
    regressions = sum(c.outcome.value == "regression" for m in report.measurements for c in m.comparisons)
    lines = [f"# sglperf report: {report.label}", ""]
    if banner := report.numbers.words.banner:
        lines += [banner, ""]
    lines += [
        f"{len(variants)} variants, {len(report.verdicts)} intent checks ({failed} failed), "
        f"{len(report.measurements)} measurements ({regressions} regressions).",
        "",
    ]
    cut = [o for o in report.failed_items if o.phase == INTERRUPTED_PHASE]
    if cut:
        lines += [
            f"**Run cut short**: {cut[0].headline} (`{cut[0].nodeid}`); this report holds what ran before it.",
            "",
        ]
    # Said up front, not only on the measurement's own line: an impossible share means a number in
    # this report (bandwidth, weight bytes, tokens per step, or the measured rate) is wrong.
    impossible = [m.key for m in report.measurements if (r := _hardware_roofline(m)) and r.problem]
    if impossible:
        lines += [
            f"**Roofline check**: {len(impossible)} measurement(s) above the memory-bandwidth limit, which no GPU "
            f"can do, so their roofline inputs or their measurement are wrong: {', '.join(impossible)} "
            "(each one's Roofline line names the inputs).",
            "",
        ]
    if report.failed_items:
        # First: a night that failed is the one that most needs its report, records or not.
        lines += [f"## Failed items ({len(report.failed_items)})", ""]
        lines += [f"- `{o.nodeid}` ({o.phase}, {o.duration_s:.0f} s): {o.headline}" for o in report.failed_items]
        lines.append("")
    if past.note:
        lines += [f"History: {past.note}", ""]
    if past.streaks:
        lines += ["## Failing since", ""]
        lines += [f"- {streak.message()}" for _, streak in sorted(past.streaks.items())]
        lines.append("")
    for deployment, variant in variants:
        lines += [f"## {deployment} / {variant}", ""]
        checks = [v for v in report.verdicts if (v.deployment, v.variant) == (deployment, variant)]
        if checks:
            lines += ["| tier | intent | expected | effective | verdict | detail |", "|---|---|---|---|---|---|"]
            for v in checks:
                detail = "; ".join([v.detail, *v.reasons[:1]]).replace("|", "\\|")[:300]
                lines.append(
                    f"| {v.tier} | {v.intent} | {v.expected} | {_fmt(v.actual)} | **{v.status.value}** | {detail} |"
                )
            lines.append("")
        for m in (m for m in report.measurements if (m.deployment, m.variant) == (deployment, variant)):
            lines += [f"### {m.workload} at {m.load.describe()}", ""]
            if m.notes:
                lines += [f"Notes: {'; '.join(m.notes)}", ""]
            for d in drifts.get(m.key, ()):
                lines += [f"**Drift**: {d.message()}", ""]
            if (not_checked := past.drift_line(m.key)) is not None:
                lines += [not_checked, ""]
            if m.key in past.streaks:
                lines += [f"**Failing since**: {past.streaks[m.key].message()}", ""]
            described = (
                _rounds_line(m),
                _host_line(m),
                _gpu_line(m),
                _server_metrics_line(m),
                _batches_line(m),
                _roofline_line(m),
            )
            lines += [line + "\n" for line in described if line]
            comparisons = {c.metric: c for c in m.comparisons}
            lines += ["| metric | baseline | current | delta | threshold | verdict |", "|---|---:|---:|---:|---:|---|"]
            for metric, summary in sorted(m.summary.items()):
                c = comparisons.get(metric)
                if c:
                    lines.append(
                        f"| {metric} | {_fmt(c.baseline_median)} | {_fmt(c.current_median)} | "
                        f"{describe_change(metric, c.baseline_median, c.current_median)} | {c.threshold * 100:.0f}% | "
                        f"**{c.outcome.value}** |"
                    )
                else:
                    lines.append(f"| {metric} | - | {_fmt(summary.median)} | - | - | {m.baseline_status.value} |")
            lines.append("")
            for path in plot_files.get(m.key, ()):
                lines += [f"![{path.stem}]({PLOTS_DIR}/{path.name})", ""]
    lines += effects_markdown(report.effects)
    for name in sorted({effect_plot_name(e) for e in report.effects}):
        lines += [f"![{path.stem}]({PLOTS_DIR}/{path.name})\n" for path in plot_files.get(name, ())]
    if any(_hardware_roofline(m) for m in report.measurements):
        lines += [
            "## Roofline",
            "",
            f"Per-stream decode tok/s (median over rounds) against the memory-bandwidth limit: {roofline.FORMULA}. "
            f"{roofline.LEFT_OUT}. At concurrency > 1 a step serves several streams, so the per-stream fraction "
            "falls by design: compare it between runs of one concurrency.",
            "",
        ]
    return "\n".join(lines)


def write(folder: Path, store: SqlHistoryStore | None = None, store_note: str | None = None) -> Path:
    """Write report.md and plots/*.png into the results folder, with the history ``store`` holds (the
    run recorded in it already); returns the report's path."""
    return write_report(read_report(folder, store, store_note), folder)


def write_report(report: RunReport, folder: Path) -> Path:
    """``report`` as report.md and plots/*.png in ``folder``; returns the markdown's path."""
    try:
        made = plots.draw(report, own_folder(folder, PLOTS_DIR))
    except NotAFolderError as exc:
        raise ResultsError(str(exc)) from None
    path = folder / REPORT_NAME
    write_text_atomic(path, markdown(report, made) + "\n")  # a link there is replaced, never written through
    return path


@dataclass(frozen=True)
class WrittenReport:
    report: RunReport  # what the console summary shows too
    path: Path  # report.md
    said: list[str]  # what to tell the user about the history store


def record_and_write(folder: Path, location: str) -> WrittenReport:
    """Record the run in the history store at ``location``, then write its report with the history read
    from there. A store that cannot be used is one line to tell the user, and the report is written all
    the same (without history)."""
    said: list[str] = []
    store, note = None, None
    run = collect(folder)
    try:
        store = open_store(location)
        if store is not None:
            stored = stored_run(run)
            added = store.add_run(stored)
            where = store.backend.where
            said.append(
                f"sglperf history: run {stored.identity.run_id} "
                + (f"recorded in {where}" if added else f"was already in {where}")
            )
    except HistoryError as exc:
        if store is not None:
            store.close()
            store = None
        note = f"{exc}: not read"
        said.append(
            f"sglperf history: {exc}; the results folder is complete: `sglperf history import {folder}` adds it later"
        )
    try:
        report = RunReport.of(run, history.read(run, store, note))
        return WrittenReport(report, write_report(report, folder), said)
    finally:
        if store is not None:
            store.close()
