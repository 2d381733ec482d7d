"""Two runs side by side: every metric and intent that changed between them.

A metric counts as changed when its median moved by at least its practical floor (the metric
table's default threshold: smaller moves are run-to-run noise) or both runs judged it against a
baseline with different outcomes; an intent when its verdict's status differs. Items present in one
run only are listed as such. Beside each metric's move: B's own verdict on it (against its baseline,
from its record), so a move inside the noise reads as the report reads it, unchanged
(`reporting.changes` words it).
"""

from __future__ import annotations

from dataclasses import dataclass

from sglperf.history.records import StoredRun
from sglperf.model.metrics import METRICS, MetricOutcome


@dataclass(frozen=True)
class MetricMove:
    """One metric's median in A and in B, and each run's own verdict on it against its baseline."""

    metric: str
    before: float
    after: float
    verdict: MetricOutcome | None  # B's; None: B judged no baseline (none, a refresh, a refusal)
    p_value: float | None  # B's verdict's
    was: MetricOutcome | None  # A's


@dataclass(frozen=True)
class ChangeRow:
    item: str  # a measurement key, or a verdict's test id
    what: str  # a metric name, or "intent (tier)"
    before: str
    after: str
    change: str  # for a status, "->"; for a measurement in one run, which; for a metric, "" (see move)
    move: MetricMove | None = None  # a metric's


def compare_runs(a: StoredRun, b: StoredRun) -> list[ChangeRow]:
    rows: list[ChangeRow] = []
    before = {m.key: m for m in a.measurements}
    after = {m.key: m for m in b.measurements}
    for key in sorted(before.keys() | after.keys()):
        if key not in after:
            rows.append(ChangeRow(key, "measurement", "measured", "-", "only in A"))
            continue
        if key not in before:
            rows.append(ChangeRow(key, "measurement", "-", "measured", "only in B"))
            continue
        old, new = before[key].medians, after[key].medians
        old_outcomes, new_outcomes = before[key].outcomes, after[key].outcomes
        p_values = {c.metric: c.p_value for c in after[key].comparisons}
        for metric in sorted(old.keys() & new.keys()):
            rel = new[metric] / old[metric] - 1.0 if old[metric] else 0.0
            floor = METRICS[metric].default_threshold if metric in METRICS else 0.0
            # A metric judged in one run only (a baseline refresh judges nothing) has not changed verdict.
            was, now = old_outcomes.get(metric), new_outcomes.get(metric)
            outcome_changed = was is not None and now is not None and was != now
            if abs(rel) >= floor or outcome_changed:
                move = MetricMove(metric, old[metric], new[metric], now, p_values.get(metric), was)
                rows.append(ChangeRow(key, metric, f"{old[metric]:.4g}", f"{new[metric]:.4g}", "", move))
    verdicts_a = {(v.test_id, v.tier): v.status.value for v in a.verdicts}
    verdicts_b = {(v.test_id, v.tier): v.status.value for v in b.verdicts}
    for item, tier in sorted(verdicts_a.keys() | verdicts_b.keys()):
        old_status, new_status = verdicts_a.get((item, tier), "-"), verdicts_b.get((item, tier), "-")
        if old_status != new_status:
            rows.append(ChangeRow(item, f"intent ({tier})", old_status, new_status, "->"))
    return rows
