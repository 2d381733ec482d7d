"""Which of the server's own metrics moved beyond noise since the baseline, for a failing measurement's line.

Only the watched series (`sglperf.sglang.metrics_catalogue.WATCHED`: retractions, aborts, queue,
running requests, KV usage, cache hits, the server's accept length and tok/s) are named: the rest
(time spent per stage, requests served) move with any slowdown and explain nothing. A series moved when
every current round lies on one side of the baseline's whole range and its median changed by at least
``MIN_CHANGE`` (or left zero). With nothing changed and three rounds on each side, all three current
rounds land above (or below) all three baseline rounds with probability 2/20: the line is a lead for a
person to follow, never a verdict, so that is cheap; needing one side of the range keeps a noisy gauge
out.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from sglperf.sglang.metrics_catalogue import WATCHED, WatchedSeries

MIN_CHANGE = 0.10  # of the baseline's median


def _number(value: float) -> str:
    return f"{value:.0f}" if value == int(value) and abs(value) < 1e9 else f"{value:.3g}"


def moved_series(
    baseline: Mapping[str, Sequence[float]],
    current: Mapping[str, Sequence[float]],
    watched: Sequence[WatchedSeries] = WATCHED,
) -> list[str]:
    """One phrase per watched series that moved, e.g. "retracted requests per round rose from 0 to 14"."""
    out = []
    for w in watched:
        before, now = baseline.get(w.series), current.get(w.series)
        if not before or not now:
            continue
        above, below = min(now) > max(before), max(now) < min(before)
        b, c = statistics.median(before), statistics.median(now)
        if not (above or below) or (b != 0 and abs(c - b) < MIN_CHANGE * abs(b)):
            continue
        per_round = " per round" if w.per_round else ""
        out.append(
            f"{w.label}{per_round} {'rose' if above else 'fell'} from {_number(b)} to {_number(c)} "
            f"(median of {len(now)} rounds, baseline {_number(min(before))}-{_number(max(before))}; {w.series})"
        )
    return out


def baseline_series(rounds: Mapping[str, Sequence[float]]) -> dict[str, list[float]]:
    """The watched series of a measurement, as a baseline entry keeps them."""
    names = {w.series for w in WATCHED}
    return {name: list(values) for name, values in rounds.items() if name in names}
