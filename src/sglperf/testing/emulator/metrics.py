"""The emulator's ``/metrics``: the SGLang metrics it keeps, in SGLang's exposition.

:data:`FAMILIES` is the one table of what is emulated: each family's name, kind, HELP text and labels
as SGLang 0.5.23 defines them (``sglang/srt/observability/metrics_collector.py``), and how its value is
read from a :class:`Snapshot` of the emulator's state. :func:`render` formats it with prometheus_client's
own ``generate_latest``, as SGLang does, so HELP/TYPE lines and samples read the same. A family with no
sample is left out, as SGLang's multiprocess collector leaves out a labelled metric never touched
(the retraction counters until a first retraction, the request counters until a first request).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

Kind = Literal["counter", "gauge", "histogram"]

# SGLang's default buckets (TokenizerMetricsCollector, without --bucket-time-to-first-token and
# --bucket-e2e-request-latency).
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0)
E2E_BUCKETS = (*TTFT_BUCKETS, 600.0, 1200.0, 1800.0, 2400.0)

# The tokenizer's labels, and the scheduler's (reported by TP rank 0 only, as SGLang does by default).
TOKENIZER_LABELS = ("engine_type", "model_name")
SCHEDULER_RANKS = {"moe_ep_rank": "0", "pp_rank": "0", "tp_rank": "0"}


@dataclass
class Observations:
    """A histogram as prometheus_client keeps one: a count per bucket (the last is +Inf) and the sum."""

    bounds: tuple[float, ...]
    counts: list[int] = field(init=False)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1  # a bucket holds values <= its bound
        self.total += value

    @property
    def count(self) -> int:
        return sum(self.counts)


@dataclass
class Served:
    """The tokenizer's per-request metrics for one ``is_streaming`` value."""

    requests: int = 0  # finished
    prompt_tokens: int = 0
    generation_tokens: int = 0
    ttft: Observations = field(default_factory=lambda: Observations(TTFT_BUCKETS))  # at the first token
    e2e: Observations = field(default_factory=lambda: Observations(E2E_BUCKETS))  # at the finish


@dataclass
class Retractions:
    """The scheduler's retraction counters."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0  # generated before the retraction


@dataclass(frozen=True)
class Snapshot:
    """What ``/metrics`` reports, read from the emulator's state at one moment."""

    model_name: str
    engine_type: str
    pid: int
    served: Mapping[bool, Served]  # by is_streaming
    aborted: int
    running: int
    queued: int
    token_usage: float
    gen_throughput: float
    spec_accept_length: float
    retracted_reported: int  # the num_retracted_reqs gauge
    retractions: Retractions


Value = float | Observations
Read = Callable[[Snapshot], Mapping[str, Value]]  # the samples' values, by the extra label's value
Side = Literal["tokenizer", "scheduler"]  # whose labels: the scheduler's add its ranks


@dataclass(frozen=True)
class Family:
    name: str
    kind: Kind
    side: Side
    documentation: str
    read: Read
    extra_label: str | None = None  # "is_streaming", or "pid" for a gauge in SGLang's multiprocess "all" mode


def _by_stream(value: Callable[[Served], Value]) -> Read:
    """One sample per ``is_streaming`` value served so far."""
    return lambda s: {("true" if stream else "false"): value(v) for stream, v in s.served.items() if v.requests}


def _once(value: Callable[[Snapshot], float]) -> Read:
    """A labelled counter: absent until it first moves."""
    return lambda s: {"": v} if (v := value(s)) else {}


def _one(value: Callable[[Snapshot], float]) -> Read:
    return lambda s: {"": value(s)}


FAMILIES: tuple[Family, ...] = (
    # Tokenizer side: counted when a request finishes (TTFT at its first token).
    Family(
        "sglang:num_requests_total",
        "counter",
        "tokenizer",
        "Number of requests processed.",
        _by_stream(lambda v: v.requests),
        "is_streaming",
    ),
    Family(
        "sglang:prompt_tokens_total",
        "counter",
        "tokenizer",
        "Number of prefill tokens processed.",
        _by_stream(lambda v: v.prompt_tokens),
        "is_streaming",
    ),
    Family(
        "sglang:generation_tokens_total",
        "counter",
        "tokenizer",
        "Number of generation tokens processed.",
        _by_stream(lambda v: v.generation_tokens),
        "is_streaming",
    ),
    Family(
        "sglang:num_aborted_requests_total",
        "counter",
        "tokenizer",
        "Number of requests aborted.",
        _once(lambda s: s.aborted),
    ),
    Family(
        "sglang:time_to_first_token_seconds",
        "histogram",
        "tokenizer",
        "Histogram of time to first token in seconds.",
        lambda s: {("true" if stream else "false"): v.ttft for stream, v in s.served.items() if v.ttft.count},
        "is_streaming",
    ),
    Family(
        "sglang:e2e_request_latency_seconds",
        "histogram",
        "tokenizer",
        "Histogram of End-to-end request latency in seconds",
        _by_stream(lambda v: v.e2e),
        "is_streaming",
    ),
    # Scheduler side.
    Family(
        "sglang:num_running_reqs", "gauge", "scheduler", "The number of running requests.", _one(lambda s: s.running)
    ),
    Family(
        "sglang:num_queue_reqs",
        "gauge",
        "scheduler",
        "The number of requests in the waiting queue.",
        _one(lambda s: s.queued),
    ),
    Family("sglang:token_usage", "gauge", "scheduler", "The token usage.", _one(lambda s: s.token_usage)),
    Family("sglang:cache_hit_rate", "gauge", "scheduler", "The prefix cache hit rate.", _one(lambda s: 0.0)),
    Family(
        "sglang:gen_throughput",
        "gauge",
        "scheduler",
        "The generation throughput (token/s).",
        _one(lambda s: s.gen_throughput),
    ),
    Family(
        "sglang:spec_accept_length",
        "gauge",
        "scheduler",
        "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
        _one(lambda s: s.spec_accept_length),
    ),
    Family(
        "sglang:num_retracted_reqs",
        "gauge",
        "scheduler",
        "The number of retracted requests.",
        lambda s: {str(s.pid): s.retracted_reported},
        "pid",
    ),
    Family(
        "sglang:num_retracted_requests_total",
        "counter",
        "scheduler",
        "Total number of retracted requests.",
        _once(lambda s: s.retractions.requests),
    ),
    Family(
        "sglang:num_retracted_input_tokens_total",
        "counter",
        "scheduler",
        "Total number of retracted input tokens.",
        _once(lambda s: s.retractions.input_tokens),
    ),
    Family(
        "sglang:num_retracted_output_tokens_total",
        "counter",
        "scheduler",
        "Total number of retracted output tokens.",
        _once(lambda s: s.retractions.output_tokens),
    ),
)


def engine_type(disaggregation_mode: object) -> str:
    """SGLang's ``engine_type`` label (DisaggregationMode.to_engine_type)."""
    return str(disaggregation_mode) if disaggregation_mode in ("prefill", "decode") else "unified"


def render(snapshot: Snapshot) -> str:
    """The Prometheus text exposition of :data:`FAMILIES`, from a private registry."""
    registry = CollectorRegistry()
    registry.register(_Families(snapshot))
    return generate_latest(registry).decode()


class _Families(Collector):
    """Families built from one snapshot. prometheus_client's Counter and Histogram objects can only be
    incremented and observed, not loaded from the emulator's counts, so the families are built directly;
    ``generate_latest`` formats them as it formats those objects' (without ``_created`` samples, which
    SGLang's multiprocess exposition has none of)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        s = self.snapshot
        tokenizer = dict(zip(TOKENIZER_LABELS, (s.engine_type, s.model_name), strict=True))
        scheduler = {**tokenizer, **SCHEDULER_RANKS}
        for family in FAMILIES:
            values = family.read(s)
            if not values:
                continue
            # A counter family is named without "_total"; generate_latest appends it again.
            metric = Metric(family.name.removesuffix("_total"), family.documentation, family.kind)
            for extra, value in values.items():
                labels = dict(scheduler if family.side == "scheduler" else tokenizer)
                if family.extra_label is not None:
                    labels[family.extra_label] = extra
                _add_samples(metric, family.name, labels, value)
            yield metric


def _add_samples(metric: Metric, name: str, labels: dict[str, str], value: Value) -> None:
    if not isinstance(value, Observations):
        metric.add_sample(name, labels, float(value))
        return
    # In the order SGLang's exposition lists them: sum, buckets (cumulative), count.
    metric.add_sample(f"{name}_sum", labels, value.total)
    cumulative = 0
    for bound, count in zip((*value.bounds, float("inf")), value.counts, strict=True):
        cumulative += count
        le = floatToGoString(bound)  # type: ignore[no-untyped-call]  # how Histogram spells its bounds
        metric.add_sample(f"{name}_bucket", {**labels, "le": le}, float(cumulative))
    metric.add_sample(f"{name}_count", labels, float(cumulative))
