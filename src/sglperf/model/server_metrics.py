"""What SGLang's own Prometheus metrics said about each measured round (`--enable-metrics`, `/metrics`).

The meter reads `/metrics` before every measured round, about once a second during it, and after it
(`sglperf.measure.meter`). A round's *series* are then:

* ``<counter>``: how much a counter rose over the round (``sglang:num_retracted_requests_total``:
  requests retracted in that round); a histogram counts as its ``_count`` and ``_sum`` counters.
  A counter the release defines but has not printed yet (SGLang prints a labelled counter only once
  it moved) rose by 0.
* ``<gauge>:max`` and ``<gauge>:min``: the highest and lowest reading (``sglang:num_queue_reqs:max``:
  the longest queue seen). Gauges are read, not integrated: a queue that formed and drained between
  two readings is missed, so a ``:max`` is a lower bound.

Values of one name with several label sets (ranks, endpoints, phases) are added up: the same sum in
the baseline and now, so changes compare. A counter that fell (the server restarted) gives no value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

MAX_SUFFIX, MIN_SUFFIX = ":max", ":min"


@dataclass(frozen=True)
class ServerScrape:
    """One reading of ``/metrics``, summed over label sets."""

    at_s: float  # perf_counter time the answer was read
    counters: Mapping[str, float]  # counters' samples (``..._total``) and histograms' ``_count``/``_sum``
    gauges: Mapping[str, float]


def round_series(scrapes: Sequence[ServerScrape], defined_counters: Iterable[str] = ()) -> dict[str, float]:
    """One round's series from its readings in time order (the first before the round, the last after)."""
    if len(scrapes) < 2:
        return {}
    first, last = scrapes[0], scrapes[-1]
    out: dict[str, float] = {}
    for name in sorted({*first.counters, *last.counters, *defined_counters}):
        rise = last.counters.get(name, 0.0) - first.counters.get(name, 0.0)
        if rise >= 0:
            out[name] = rise
    for name in sorted({g for s in scrapes for g in s.gauges}):
        readings = [s.gauges[name] for s in scrapes if name in s.gauges]
        out[name + MAX_SUFFIX] = max(readings)
        out[name + MIN_SUFFIX] = min(readings)
    return out


def combined_series(per_server: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Several servers' series of one round as the deployment's (the workers behind a router): counters'
    rises add up (histograms' buckets, sums and counts included), a gauge's extremes are the extremes of all.
    A series some server lacks is left out: a sum over part of the workers would read as the whole."""
    if not per_server:
        return {}
    names = set.intersection(*(set(s) for s in per_server))
    out: dict[str, float] = {}
    for name in sorted(names):
        values = [s[name] for s in per_server]
        if name.endswith(MAX_SUFFIX):
            out[name] = max(values)
        elif name.endswith(MIN_SUFFIX):
            out[name] = min(values)
        else:
            out[name] = sum(values)
    return out


@dataclass(frozen=True)
class ServerMetricsRecord:
    """The server's metrics over one measurement's measured rounds, as written to its record."""

    scrapes: int  # readings taken, over all measured rounds
    series: dict[str, list[float]] = field(default_factory=dict)  # series -> one value per measured round

    @classmethod
    def of(cls, rounds: Sequence[Mapping[str, float]], scrapes: int) -> ServerMetricsRecord:
        """From each measured round's series; a series missing in some round is left out, and so is one
        that is not a number in some round (SGLang 0.5.23 on the CPU reports ``sglang:fwd_occupancy:max`` as
        NaN): written as JSON null, it made the whole record unreadable, and the run's report with it."""
        names = set.intersection(*(set(r) for r in rounds)) if rounds else set()
        finite = {n for n in names if all(math.isfinite(float(r[n])) for r in rounds)}
        return cls(scrapes, {n: [float(r[n]) for r in rounds] for n in sorted(finite)})
