"""The meter's records: per-request samples, their per-chunk arithmetic, and a workload's result.

Definitions, per request (times in seconds from just before the request is sent):

* TTFT: arrival of the first chunk that carries tokens.
* decode tok/s: tokens after the first chunk / (last chunk time - first chunk time). The first
  chunk is excluded because its tokens come from prefill, not from the decode loop.
* ITL: the same window per token, (last - first) / tokens after the first chunk = 1 / decode tok/s.
* verify steps/s (speculative decoding): the server's verify steps / the same window. The first chunk
  is prefill's token, so the window holds exactly those steps, and decode tok/s = verify steps/s x
  tokens per step: with every request producing output_len tokens, a relative change of decode tok/s
  is the change of verify steps/s (the kernels) times that of the acceptance length (the drafter).

TTFT is measured from the client's send to the first token-carrying chunk: the request (JSON body,
headers) is built and its connection opened before the clock starts, and the clock's zero is taken
immediately before the request is written, so request building and the TCP handshake are out;
waiting for a concurrency slot is out too (each request has its own zero). What is in: the network,
the server's queueing, tokenization and prefill, and the read that delivers the chunk. Chunks are
stamped on the network read that completes them; HTTP decoding, SSE splitting and JSON parsing
happen after the whole round has ended.

Per round, at concurrency > 1 (`RoundStats`):

* output tok/s: the round's completion tokens / its wall time, from the first request's send to the
  last token-carrying chunk of any request;
* req/s: the round's requests / the same wall time.

At concurrency 1 these are absent: the round's wall time would be the sum of its requests' E2E
plus the client's gaps between them, a number E2E and decode already describe, with client time in it.

Per round under load (concurrency > 1, or an open-loop rate), the tails, where queueing shows first:

* TTFT p90 / p99: over the round's requests' TTFT;
* ITL p90 / p99: over every gap between two token-carrying chunks of the round's requests (the first
  chunk, prefill's, excluded), each divided by the tokens of the later chunk: per token, as ITL is.
  A chunk of several tokens (speculative decoding, a stream interval) spreads its wait over them, and
  chunks that arrived in one network read count as one.

And with a workload ``slo``, at any load: goodput share, the round's requests that met every target
(TTFT, the request's ITL, E2E) over its requests, and goodput req/s, those requests over the round's
wall time. A round where none met them counts half a request (the statistics need positive values).

Open loop (a rate): each request's send lag is how long after it was due (its scheduled time, or the
moment a max_concurrency slot freed, whichever is later) the meter actually sent it. A round whose
lag is large measured the client, not the server (`sglperf.measure.meter`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from sglperf.errors import SglperfError
from sglperf.model.gpu_telemetry import GpuRound
from sglperf.model.host_load import HostLoad
from sglperf.model.metrics import GOODPUT_REQ_S, GOODPUT_SHARE, METRIC_NAMES, METRICS
from sglperf.model.workload import Slo

SERVER_ACCEPT_CAVEAT = (
    "server value is a running average since the server started (warm-up and other "
    "clients included); the client value covers the measured requests only"
)


class MeterError(SglperfError, RuntimeError):
    """A request or workload could not be measured; the message names server, request and cause."""


class HostBusyError(MeterError):
    """The machine stayed busy with other work: more rounds than the workload's repeats were disturbed."""


class GpuDisturbedError(MeterError):
    """A GPU kept throttling or running another process: more rounds than the workload's repeats dropped."""


@dataclass(frozen=True)
class Chunk:
    t: float  # perf_counter seconds since the request was sent
    tokens: int  # tokens this chunk carries


@dataclass(frozen=True)
class RequestSample:
    prompt_id: str
    repeat: int
    ttft_s: float
    decode_tok_s: float | None  # None with fewer than two token-carrying chunks
    itl_s: float | None  # per token, not per chunk
    e2e_s: float
    completion_tokens: int
    chunks: tuple[Chunk, ...]  # token-carrying chunks only
    spec_verify_ct: int | None
    spec_accept_length: float | None  # completion_tokens / spec_verify_ct (prefill token included)
    spec_accept_rate: float | None
    spec_note: str | None = None  # why the spec fields are None
    server_request_id: str | None = None  # the server's id for this request, to find it in server logs
    send_lag_s: float | None = None  # open loop: sent this long after it was due (see the module docstring)

    @property
    def verify_steps_s(self) -> float | None:
        """Verify steps per second over the decode window (see the module docstring)."""
        window = decode_window(self.chunks)
        return None if window is None or not self.spec_verify_ct else self.spec_verify_ct / window[1]

    def to_record(self) -> dict[str, Any]:
        record = asdict(self)
        record["chunks"] = [[c.t, c.tokens] for c in self.chunks]
        record["verify_steps_s"] = self.verify_steps_s
        return record


def ttft_s(chunks: Sequence[Chunk]) -> float | None:
    """Arrival of the first chunk carrying tokens."""
    return next((c.t for c in chunks if c.tokens > 0), None)


def decode_window(chunks: Sequence[Chunk]) -> tuple[int, float] | None:
    """(tokens after the first token-carrying chunk, seconds from it to the last), or None if undefined."""
    carrying = [c for c in chunks if c.tokens > 0]
    if len(carrying) < 2:
        return None
    window = carrying[-1].t - carrying[0].t
    if window <= 0:
        return None
    return sum(c.tokens for c in carrying[1:]), window


def decode_tok_s(chunks: Sequence[Chunk]) -> float | None:
    w = decode_window(chunks)
    return None if w is None else w[0] / w[1]


def itl_s(chunks: Sequence[Chunk]) -> float | None:
    w = decode_window(chunks)
    return None if w is None else w[1] / w[0]


def chunks_from_cumulative(times: Sequence[float], cumulative: Sequence[int]) -> tuple[Chunk, ...]:
    """Token-carrying chunks from a cumulative token counter; ValueError if the counter goes down."""
    chunks, previous = [], 0
    for t, total in zip(times, cumulative, strict=True):
        if total < previous:
            raise ValueError(f"completion_tokens went down from {previous} to {total} at {t:.4f} s")
        if total > previous:
            chunks.append(Chunk(t, total - previous))
        previous = total
    return tuple(chunks)


@dataclass(frozen=True)
class RoundStats:
    """One measured round over the prompt set: its requests, tokens, and wall time."""

    round: int
    requests: int
    completion_tokens: int
    wall_s: float  # first request's send to the last token-carrying chunk of any request
    host: HostLoad | None = None  # what the rest of the machine took meanwhile, when counted
    server: Mapping[str, float] | None = None  # the server's own metrics over the round, when read
    gpu: GpuRound | None = None  # the server's GPUs over the round, when sampled
    dropped_because: str | None = None  # a dropped round: "host: ...", "GPU: ..." and/or "client: ..."
    tails: Mapping[str, float] | None = None  # ttft_p90_s, ..., itl_p99_s: see the module docstring
    slo_met: int | None = None  # requests that met every target of the workload's slo (None: no slo)
    send_lag_p90_s: float | None = None  # open loop: how late the meter sent (see the module docstring)
    send_lag_max_s: float | None = None


# Per-round tail metrics: (metric, per-request or per-gap values, percentile).
TAIL_METRICS = (
    ("ttft_p90_s", "ttft", 90),
    ("ttft_p99_s", "ttft", 99),
    ("itl_p90_s", "itl", 90),
    ("itl_p99_s", "itl", 99),
)
GOODPUT_METRICS = (GOODPUT_SHARE, GOODPUT_REQ_S)


def token_gaps(samples: Sequence[RequestSample]) -> list[float]:
    """Per token, every wait between two token-carrying chunks after the first (see the module docstring).
    Chunks stamped by the same network read arrived together: one wait, shared by all their tokens (a
    gap of 0 is not a token that came for free, and the statistics need positive values)."""
    gaps = []
    for s in samples:
        reads: list[tuple[float, int]] = []
        for chunk in s.chunks:
            if reads and chunk.t == reads[-1][0]:
                reads[-1] = (chunk.t, reads[-1][1] + chunk.tokens)
            else:
                reads.append((chunk.t, chunk.tokens))
        for (before, _), (after, tokens) in itertools.pairwise(reads):
            gaps += [(after - before) / tokens] * tokens
    return gaps


def meets(sample: RequestSample, slo: Slo) -> bool:
    """Whether one request met every target; a target it has no value for (ITL of a one-chunk answer) it missed."""
    return (
        (slo.ttft_s is None or sample.ttft_s <= slo.ttft_s)
        and (slo.itl_s is None or (sample.itl_s is not None and sample.itl_s <= slo.itl_s))
        and (slo.e2e_s is None or sample.e2e_s <= slo.e2e_s)
    )


def round_stats(
    index: int,
    sent_at: Sequence[float],
    samples: Sequence[RequestSample],
    host: HostLoad | None = None,
    slo: Slo | None = None,
) -> RoundStats:
    """A round's totals from each request's send time (perf_counter) and its sample."""
    ends = [t0 + (s.chunks[-1].t if s.chunks else s.e2e_s) for t0, s in zip(sent_at, samples, strict=True)]
    wall = max(ends) - min(sent_at) if samples else 0.0
    stats = RoundStats(index, len(samples), sum(s.completion_tokens for s in samples), wall, host)
    if not samples:
        return stats
    values = {"ttft": [s.ttft_s for s in samples], "itl": token_gaps(samples)}
    tails = {m: float(np.percentile(values[kind], q)) for m, kind, q in TAIL_METRICS if values[kind]}
    lags = [s.send_lag_s for s in samples if s.send_lag_s is not None]
    return replace(
        stats,
        tails=tails,
        slo_met=None if slo is None else sum(meets(s, slo) for s in samples),
        send_lag_p90_s=float(np.percentile(lags, 90)) if lags else None,
        send_lag_max_s=max(lags) if lags else None,
    )


def round_metric_values(
    rounds: Sequence[RoundStats], concurrency: int, metric: str, *, open_loop: bool = False
) -> tuple[float, ...]:
    """One value per round of a per-round metric: throughput and tails only under load (concurrency > 1
    or open loop), goodput whenever the workload has an slo (see the module docstring)."""
    if metric not in METRICS or not METRICS[metric].per_round:
        raise KeyError(f"{metric!r} is not a per-round metric")
    timed = [r for r in rounds if r.wall_s > 0]
    if metric in GOODPUT_METRICS:
        # A round where no request met the slo counts half a request: the statistics compare ratios
        # (logs) and need a positive value, and 0.5 of N stays below any round that met one.
        met = [(r, max(r.slo_met, 0.5)) for r in timed if r.slo_met is not None]
        if metric == GOODPUT_SHARE:
            return tuple(n / r.requests for r, n in met)
        return tuple(n / r.wall_s for r, n in met)
    if concurrency <= 1 and not open_loop:
        return ()
    if any(metric == name for name, _, _ in TAIL_METRICS):
        return tuple(r.tails[metric] for r in timed if r.tails and metric in r.tails)
    per_request = metric == "request_s"
    return tuple((r.requests if per_request else r.completion_tokens) / r.wall_s for r in timed)


@dataclass(frozen=True)
class RequestSummary:
    median: float
    p10: float
    p90: float
    mean: float
    stdev: float | None  # sample standard deviation; None for a single value
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> RequestSummary:
        a = np.asarray(values, dtype=float)
        if a.size == 0:
            raise ValueError("no values to summarise")
        p10, median, p90 = np.percentile(a, [10, 50, 90])
        stdev = float(a.std(ddof=1)) if a.size > 1 else None
        return cls(float(median), float(p10), float(p90), float(a.mean()), stdev, int(a.size))


@dataclass(frozen=True)
class WorkloadResult:
    base_url: str
    workload_id: str
    api: str
    concurrency: int
    output_len: int
    prompt_set: str
    prompt_digest: str
    samples: tuple[RequestSample, ...]
    summary: Mapping[str, RequestSummary]  # by metric name (the metric table); a metric without values is absent
    client_accept_length: float | None  # total completion tokens / total verify steps, measured requests
    server_accept_length: float | None  # server-wide running average, see SERVER_ACCEPT_CAVEAT
    accept_note: str | None  # why an acceptance value is missing
    wall_s: float
    rounds: tuple[RoundStats, ...] = ()  # measured rounds, in order
    dropped_rounds: tuple[RoundStats, ...] = ()  # run, but the host was busy: not in samples or summary
    server_scrapes: int = 0  # /metrics readings of the measured rounds
    metrics_note: str | None = None  # why the server's metrics stopped being read
    rate: float | None = None  # open loop: requests per second (``concurrency`` is then the cap in flight)

    def to_record(self) -> dict[str, Any]:
        record = {k: v for k, v in asdict(self).items() if k not in ("samples", "summary")}
        record["summary"] = {k: asdict(v) for k, v in self.summary.items()}
        record["server_accept_caveat"] = SERVER_ACCEPT_CAVEAT
        record["samples"] = [s.to_record() for s in self.samples]
        return record


def metric_values(samples: Sequence[RequestSample], metric: str) -> tuple[float, ...]:
    """Per-request values of one metric, skipping requests where it is undefined (per-round metrics: none)."""
    if metric not in METRIC_NAMES:
        raise KeyError(f"unknown metric {metric!r}; known: {', '.join(METRIC_NAMES)}")
    if METRICS[metric].per_round:
        return ()
    attr = "spec_accept_length" if metric == "accept_length" else metric
    return tuple(v for s in samples if (v := getattr(s, attr)) is not None)
