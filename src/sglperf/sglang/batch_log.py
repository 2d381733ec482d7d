"""SGLang's per-batch log lines: what the scheduler says each logged batch actually ran.

The scheduler logs every prefill batch and every ``decode_log_interval``-th decode step
(`managers/scheduler_components/metrics_reporter.py`, the same format in 0.5.13, 0.5.19 and 0.5.23)::

    Prefill batch, #new-seq: 1, #new-token: 20, ..., #running-req: 0, #queue-req: 0, ..., cpu graph: False, ...
    Decode batch, #running-req: 1, #token: 80, ..., accept len: 1.00, accept rate: 0.00, cuda graph: True, ...

The graph field is ``can_run_cuda_graph`` of that very batch, labelled by device ("cuda graph",
"cpu graph", "npu graph", "musa graph"): a graph that was captured but not replayed shows False here
while the start-up memory says it exists. ``accept len`` (speculative decoding only) is the mean over
the decode steps since the previous line. The rest of a line is read as ``key: value`` pairs, so a
release that adds fields still parses; one that drops the graph field gives ``graph = None``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

DECODE_LOG_INTERVAL_FLAG = "--decode-log-interval"
DECODE_LOG_INTERVAL_FIELD = "decode_log_interval"
DEFAULT_DECODE_LOG_INTERVAL = 40  # SGLang's default in every managed release

_HEAD = re.compile(r"(Prefill batch|Decode batch)(?: \[\d+\])?, ")
_PAIR = re.compile(r"([^,:]+): ([^,]+)")
_GRAPH_KEY = re.compile(r"^(cuda|cpu|npu|musa|\w+) graph$")

BatchKind = Literal["prefill", "decode"]
_KINDS: dict[str, BatchKind] = {"Prefill batch": "prefill", "Decode batch": "decode"}


@dataclass(frozen=True)
class BatchLine:
    """One logged batch."""

    kind: BatchKind
    graph: bool | None  # None: the release printed no graph field
    graph_label: str | None  # e.g. "cuda graph", "cpu graph"
    running_req: int | None
    queue_req: int | None
    accept_len: float | None  # decode lines with speculative decoding only
    text: str  # the line from its kind on, for quoting
    fields: tuple[str, ...] = ()  # every key, in the order printed
    new_seq: int | None = None  # prefill lines: the requests this prefill started
    new_token: int | None = None  # prefill lines: the tokens it computed (the cached prefix not counted)


def parse_batch_line(line: str) -> BatchLine | None:
    """The batch a log line describes, or None for any other line."""
    head = _HEAD.search(line)
    if head is None:
        return None
    body = line[head.end() :].strip()
    fields = {key.strip(): value.strip() for key, value in _PAIR.findall(body)}
    graph_key = next((k for k in fields if _GRAPH_KEY.match(k)), None)
    graph_value = fields.get(graph_key) if graph_key else None
    return BatchLine(
        kind=_KINDS[head.group(1)],
        graph={"True": True, "False": False}.get(graph_value) if graph_value is not None else None,
        graph_label=graph_key,
        running_req=_int(fields.get("#running-req")),
        queue_req=_int(fields.get("#queue-req")),
        accept_len=_float(fields.get("accept len")),
        text=line[head.start() :].strip(),
        fields=tuple(fields),
        new_seq=_int(fields.get("#new-seq")),
        new_token=_int(fields.get("#new-token")),
    )


def parse_batch_lines(text: str) -> list[BatchLine]:
    return [b for line in text.splitlines() if (b := parse_batch_line(line)) is not None]


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


# Decode lines wanted per request of the shortest output, so that every measured round has some.
LINES_PER_REQUEST = 4


def decode_log_interval_for(shortest_output: int, tokens_per_step: int = 1) -> int:
    """The ``--decode-log-interval`` for a measurement launch: ``LINES_PER_REQUEST`` decode lines per
    request of ``shortest_output`` tokens (a step yields up to ``tokens_per_step`` with speculative
    decoding), never sparser than SGLang's default. A line costs the scheduler one formatted log
    record, tens of microseconds, against decode steps of milliseconds."""
    wanted = shortest_output // (LINES_PER_REQUEST * max(1, tokens_per_step))
    return max(1, min(DEFAULT_DECODE_LOG_INTERVAL, wanted))
