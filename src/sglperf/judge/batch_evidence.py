"""Captured is not used: the measured rounds' batch log lines held against the graph intents.

The live tier proves from start-up memory that a graph was captured; SGLang has shipped releases
whose decode ran eager with the graph captured (its PR 31273: 1044 vs 2408 tok/s). Each logged batch
says whether it ran the graph (`sglperf.sglang.batch_log`), so per measured round we count them and:

* an intent expected on whose logged batches of that kind never ran the graph fails, quoting one;
* an intent expected off whose batches ran it fails the same way (the expectation is wrong);
* with the decode graph's captured sizes known (the server's ``decode_cuda_graph_bs``), eager decode
  lines are judged by the batch they ran: eager at a batch the graph was captured for fails (captured,
  not replayed), and eager above the largest captured batch fails too, confirming preflight's coverage
  failure with SGLang's own line (the workload decodes eager there, whatever the args say);
* the same for the prefill graph in tokens (``#new-token`` of a line that prefilled one request; lines
  of several requests prefilled together, a round's ramp, are left to the share below);
* otherwise a share between none and all is a note with an eager line quoted;
* no lines, or no graph field in them, is a note: nothing proven, and never reported as a pass;
* all or none, as expected, says nothing beyond the counts in the record and the report.

Stated is measured (`judge_in_flight`): the most running requests the rounds' lines show is held against
the decode batch the load point runs (`sglperf.model.graph_coverage.load_batch`, what preflight judged the
decode graph's coverage for). A closed loop whose server never ran that many at once fails, naming both
numbers: the concurrency its name states was not the load it measured. An open loop's ``max_concurrency``
is a cap the rate may never need: not reaching it is a note.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sglperf.model.batch_evidence import BatchEvidence, RoundBatches
from sglperf.model.graph_coverage import WorkloadBatch
from sglperf.model.intent_names import DECODE_CUDA_GRAPH, PREFILL_CUDA_GRAPH
from sglperf.sglang.batch_log import BatchLine, parse_batch_lines

NO_GRAPH_FIELD = "the server's batch lines carry no graph field: whether a graph ran is not proven"
_INTENT_OF_KIND = {"prefill": PREFILL_CUDA_GRAPH, "decode": DECODE_CUDA_GRAPH}
_WHY_PREFILL_EAGER = (
    " (a prefill longer than the captured token sizes runs eager by design: if every prompt is that long, "
    "shorten the prompts or raise the capture size)"
)


def collect(log: str, windows: Mapping[int, str], interval: int | None) -> BatchEvidence:
    """The batches logged in each measured round (``windows``: round index -> what the log gained)."""
    rounds = []
    quotes: dict[tuple[str, bool], str] = {}
    eager_batches: dict[int, int] = {}
    eager_quotes: dict[int, str] = {}
    eager_tokens: dict[int, int] = {}
    eager_token_quotes: dict[int, str] = {}
    label = None
    for index, text in sorted(windows.items()):
        lines = parse_batch_lines(text)
        rounds.append(_round(index, lines))
        for line in lines:
            label = label or line.graph_label
            if line.graph is not None:
                quotes.setdefault((line.kind, line.graph), line.text)
            if line.kind == "decode" and line.graph is False and line.running_req is not None:
                eager_batches[line.running_req] = eager_batches.get(line.running_req, 0) + 1
                eager_quotes.setdefault(line.running_req, line.text)
            if line.kind == "prefill" and line.graph is False and line.new_seq == 1 and line.new_token is not None:
                eager_tokens[line.new_token] = eager_tokens.get(line.new_token, 0) + 1
                eager_token_quotes.setdefault(line.new_token, line.text)
    return BatchEvidence(
        log=log,
        decode_log_interval=interval,
        graph_label=label,
        rounds=rounds,
        eager_prefill_line=quotes.get(("prefill", False)),
        graph_prefill_line=quotes.get(("prefill", True)),
        eager_decode_line=quotes.get(("decode", False)),
        graph_decode_line=quotes.get(("decode", True)),
        eager_decode_batches=eager_batches,
        eager_decode_quotes=eager_quotes,
        eager_prefill_tokens=eager_tokens,
        eager_prefill_quotes=eager_token_quotes,
    )


def _round(index: int, lines: Sequence[BatchLine]) -> RoundBatches:
    prefill = [b for b in lines if b.kind == "prefill"]
    decode = [b for b in lines if b.kind == "decode"]
    running = [b.running_req for b in lines if b.running_req is not None]
    queued = [b.queue_req for b in lines if b.queue_req is not None]
    accept = [b.accept_len for b in decode if b.accept_len is not None]
    return RoundBatches(
        round=index,
        prefill=len(prefill),
        prefill_graph=sum(1 for b in prefill if b.graph),
        decode=len(decode),
        decode_graph=sum(1 for b in decode if b.graph),
        max_running_req=max(running, default=None),
        max_queue_req=max(queued, default=None),
        accept_len=float(np.mean(accept)) if accept else None,
    )


def judge(
    evidence: BatchEvidence,
    expectations: Mapping[str, Any],
    decode_graph_sizes: Sequence[int] = (),
    prefill_graph_sizes: Sequence[int] = (),
) -> tuple[list[str], list[str]]:
    """(problems, notes): one line each; see the module docstring. ``decode_graph_sizes``: the batch
    sizes the server captured its decode graph for, ``prefill_graph_sizes`` the token sizes of its
    prefill graph (empty: not known)."""
    problems: list[str] = []
    notes: list[str] = []
    if evidence.graph_label is None:
        if any(r.prefill or r.decode for r in evidence.rounds):
            notes.append(NO_GRAPH_FIELD)
        else:
            notes.append(f"{evidence.log}: no batch lines in the measured rounds: whether a graph ran is not proven")
        return problems, notes
    for kind, intent in _INTENT_OF_KIND.items():
        batches, ran = evidence.total(kind)
        expected = expectations.get(intent)
        eager = getattr(evidence, f"eager_{kind}_line")
        graph = getattr(evidence, f"graph_{kind}_line")
        where = f"{batches} {kind} batches logged in {len(evidence.rounds)} measured rounds"
        if batches == 0:
            notes.append(f"{intent}: no {kind} batch logged in the measured rounds: not proven")
        elif (
            kind == "decode"
            and expected is True
            and _judged_by_size(evidence.eager_decode_batches, decode_graph_sizes, ran)
        ):
            problems += _coverage(
                DECODE_SIZE, evidence.eager_decode_batches, evidence.eager_decode_quotes, max(decode_graph_sizes), where
            )
        elif (
            kind == "prefill"
            and expected is True
            and _judged_by_size(evidence.eager_prefill_tokens, prefill_graph_sizes, ran)
        ):
            problems += _coverage(
                PREFILL_SIZE,
                evidence.eager_prefill_tokens,
                evidence.eager_prefill_quotes,
                max(prefill_graph_sizes),
                where,
            )
        elif expected is True and ran == 0:
            why = _WHY_PREFILL_EAGER if kind == "prefill" else ""
            problems.append(
                f"{intent} expected on, but none of the {where} ran the graph: SGLang logged {_quote(eager)}{why}"
            )
        elif expected is False and ran > 0:
            problems.append(
                f"{intent} expected off, but {ran} of the {where} ran the graph: SGLang logged {_quote(graph)}"
            )
        elif 0 < ran < batches:
            notes.append(f"{intent}: {ran} of the {where} ran the graph; eager e.g. {_quote(eager)}")
        # all or none, as expected (or nothing expected): the record's counts say it, no note
    return problems, notes


def judge_in_flight(evidence: BatchEvidence, need: WorkloadBatch, *, open_loop: bool) -> tuple[list[str], list[str]]:
    """(problems, notes): the most requests SGLang ran at once in the measured rounds against ``need``, the
    load point's decode batch (see the module docstring). Rounds with no line that counts running requests
    prove nothing (`judge` notes a log without batch lines)."""
    running = [r.max_running_req for r in evidence.rounds if r.max_running_req is not None]
    if not running or max(running) >= need.batch:
        return [], []
    most, queued = max(running), max((r.max_queue_req or 0 for r in evidence.rounds), default=0)
    seen = f"SGLang's batch lines in {len(evidence.rounds)} measured rounds show at most {most} running"
    if open_loop:
        return [], [
            f"{need.describe()}: {seen}, never the {need.batch} preflight judged the decode graph for (a rate "
            "that keeps fewer in flight does not reach its cap)"
        ]
    if queued:
        why = (
            f"up to {queued} waited in its queue: the server held them back (its KV cache pool, or "
            "max_running_requests)"
        )
    else:
        why = "none waited in its queue: the requests did not overlap (answers shorter than a wave's prefills)"
    return [
        f"{need.describe()} ran fewer in flight than it states: {seen}, not {need.batch}; {why}; the decode "
        f"batch preflight judged the graphs for never ran, so these numbers are not batch {need.batch}'s"
    ], []


@dataclass(frozen=True)
class _SizeUnit:
    """How a graph's captured sizes are counted, as the failures name them."""

    intent: str
    size: str  # one captured size: "batch", "token size"
    sizes: str  # several: "batches", "token sizes"
    label: str  # before the sizes of the lines quoted: "batch 4", "tokens 6000"
    outgrown: str  # what an eager line above the largest size means


DECODE_SIZE = _SizeUnit(
    DECODE_CUDA_GRAPH,
    "batch",
    "batches",
    "batch",
    "the workload outgrows the graph (preflight names the rule that set the size and how to raise it)",
)
PREFILL_SIZE = _SizeUnit(
    PREFILL_CUDA_GRAPH,
    "token size",
    "token sizes",
    "tokens",
    "a prompt longer than the graph's sizes prefills eager (preflight names the rule that set the size and how "
    "to raise it)",
)


def _judged_by_size(eager: Mapping[int, int], sizes: Sequence[int], ran: int) -> bool:
    """Whether eager lines are judged by their size: with the sizes known, unless no line ran the graph
    and every eager one was within the sizes (a graph never replayed, said as such by the caller)."""
    return bool(sizes and eager) and (ran > 0 or max(eager) > max(sizes))


def _coverage(
    unit: _SizeUnit, eager: Mapping[int, int], quotes: Mapping[int, str], largest: int, where: str
) -> list[str]:
    """Eager lines split at the largest captured size: both sides are failures, with a line quoted from
    each."""
    problems = []
    for covered in (True, False):
        sizes = sorted(b for b in eager if (b <= largest) == covered)
        if not sizes:
            continue
        count = sum(eager[b] for b in sizes)
        quote = _quote(quotes.get(sizes[-1]))
        shown = ", ".join(map(str, sizes))
        if covered:
            problems.append(
                f"{unit.intent}: {count} of the {where} ran eager at {unit.sizes} the graph was captured for "
                f"({unit.label} {shown}; captured up to {largest}): SGLang logged {quote}"
            )
        else:
            problems.append(
                f"{unit.intent}: {count} of the {where} ran eager above the largest captured {unit.size} {largest} "
                f"({unit.label} {shown}): SGLang logged {quote}; {unit.outgrown}"
            )
    return problems


def _quote(line: str | None) -> str:
    return repr(line) if line else "(no line)"
