"""When an open-loop round sends each of its requests: seeded gaps at a mean rate.

Poisson arrivals have exponential gaps, which are gamma gaps of shape 1; a shape below 1 keeps the
mean rate and makes bursts (gap CV = 1/sqrt(shape)), as SGLang's bench_serving and vLLM's
`bench serve` draw them. Constant arrivals are evenly spaced. The first request goes at 0.

Every round sends on the same schedule (drawn from the seed alone), so rounds differ by what the
server did, not by what was asked of it, and so does the baseline: the schedule is part of what
makes an open-loop baseline comparable (`Workload.schedule`). A round bounded by a duration sends
every request its schedule puts before the end: the first N of the same draws, so a longer duration
only appends sends.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

Arrival = Literal["poisson", "constant"]


def send_offsets(requests: int, rate: float, arrival: Arrival, burstiness: float, seed: int) -> tuple[float, ...]:
    """Seconds from the round's start at which each of ``requests`` requests is due."""
    if requests < 1 or not rate > 0 or not burstiness > 0:
        raise ValueError(f"need requests >= 1, rate > 0 and burstiness > 0 (got {requests}, {rate}, {burstiness})")
    if arrival == "constant":
        gaps = np.full(requests - 1, 1.0 / rate)
    else:
        rng = np.random.default_rng(seed)
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=requests - 1)
    return (0.0, *(float(t) for t in np.cumsum(gaps)))


def offsets_within(duration_s: float, rate: float, arrival: Arrival, burstiness: float, seed: int) -> tuple[float, ...]:
    """The sends of :func:`send_offsets` that fall before ``duration_s`` (at least the first, at 0)."""
    if not duration_s > 0:
        raise ValueError(f"need duration_s > 0 (got {duration_s})")
    # Twice the expected count, then doubled until the schedule passes the end: numpy draws a longer
    # schedule's gaps as the shorter one's followed by more, so the prefix is the same sends.
    requests = max(2, int(2 * rate * duration_s) + 2)
    while (sends := send_offsets(requests, rate, arrival, burstiness, seed))[-1] < duration_s:
        requests *= 2
    return tuple(t for t in sends if t < duration_s)
