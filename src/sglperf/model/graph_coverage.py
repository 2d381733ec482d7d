"""Graph coverage records: the batch sizes a decode graph is captured for (the token sizes, for the
prefill graph), against the batches a deployment's workloads will run.

A decode graph replays only for a batch no larger than the largest size it was captured for; a larger
batch runs eager, every step, while the graph reads "on"; the prefill graph is the same in tokens.
SGLang picks the largest size by rules that change with the release, the GPU's memory and the
parallelism; the rule that picked it travels with the sizes so a failure can quote it.

What the workloads ask of the graphs is reckoned here, once (`graph_needs`): every decode batch a load
point runs and every workload's longest prefill. The decode batch is what the load point's rounds keep in
flight (`Workload.round_plan`, the plan the meter sends by), not its concurrency taken on trust.
Preflight's coverage verdict, the flags a request for a graph adds, the live tier's evidence and the
measured rounds' check of what SGLang ran (`sglperf.judge.batch_evidence.judge_in_flight`) all read these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from sglperf.model.deployment import Deployment, Variant
from sglperf.model.prompts import Prompt, PromptError, load_prompts
from sglperf.model.resolution import Write
from sglperf.model.topology import batch_per_worker
from sglperf.model.workload import LoadPoint, RandomPrompts, SharedPrefixPrompts, Workload


@dataclass(frozen=True)
class CapturedSizes:
    """What a graph will be captured for, as one release resolves it."""

    sizes: tuple[int, ...]  # ascending
    source: str  # the effective field read, e.g. "cuda_graph_config.decode.bs"
    rule: Write | None = None  # the write that set the largest; None: the release's resolution did not say

    @property
    def largest(self) -> int:
        return self.sizes[-1]

    def covers(self, batch: int) -> bool:
        return batch <= self.largest


@dataclass(frozen=True)
class WorkloadBatch:
    """The largest decode batch one workload will run at one load point."""

    workload: str
    load: str  # the load point as the report names it: "concurrency 32", "0.5 req/s, at most 8 in flight"
    batch: int
    bounded_by: str = ""  # what caps it below the load, e.g. "max_running_requests = 16"
    tag: str = dataclasses.field(default="", compare=False)  # the load point's tag (c32, r0.5): which measurement it is

    def describe(self) -> str:
        return f"{self.workload} at {self.load}" + (
            f" (batch {self.batch}: {self.bounded_by})" if self.bounded_by else ""
        )

    def shared(self, workers: int) -> WorkloadBatch:
        """This batch as one of ``workers`` schedulers behind a balanced router runs it."""
        if workers <= 1:
            return self
        each = batch_per_worker(self.batch, workers)
        return replace(self, batch=each, bounded_by=f"{self.batch} in flight over {workers} workers")

    def capped(self, max_running: int | None, field: str = "") -> WorkloadBatch:
        """This batch capped by the server's most running requests where that is known (``field``: the
        setting that caps it, as the report names it)."""
        if max_running is None or max_running >= self.batch:
            return self
        return replace(self, batch=max_running, bounded_by=f"{field} = {max_running}")


@dataclass(frozen=True)
class CoverageGap:
    """A workload whose decode batches outgrow the captured sizes: they run eager."""

    need: WorkloadBatch
    captured: CapturedSizes


@dataclass(frozen=True)
class WorkloadPrefill:
    """The longest prefill one workload runs once its round is under way, in tokens: one prompt (the
    requests a closed loop sends together at a round's start are its ramp, which may run eager), cut to
    the chunked prefill size where SGLang splits it."""

    workload: str
    tokens: int
    exact: bool  # False: an upper bound (prompt files counted in bytes, with no tokenizer at hand)
    how: str  # where the number comes from, e.g. "random prompts of up to 600 tokens"

    def describe(self) -> str:
        return f"{self.workload}'s prefills of {'' if self.exact else 'up to '}{self.tokens} tokens ({self.how})"


def _prompt_file(deployment: Deployment, workload: Workload) -> Sequence[Prompt] | None:
    """The prompts a workload's rounds draw from its file (max_prompts applied); None for synthetic prompts
    or a file that cannot be read (measuring it fails with the file's own error)."""
    if workload.prompts is None:
        return None
    try:
        prompts = load_prompts(deployment.path.parent / workload.prompts).prompts
    except PromptError:
        return None
    return prompts[: workload.max_prompts]


def _workload_prefill(workload: Workload, prompts: Sequence[Prompt] | None) -> WorkloadPrefill | None:
    """A workload's longest prompt in tokens: exact for synthetic prompts (made in the server's own tokens),
    bounded by bytes for a prompt file (`Prompt.token_bound`); None when its file cannot be read."""
    synthetic = workload.synthetic
    if isinstance(synthetic, RandomPrompts):
        high = synthetic.length_range()[1]
        return WorkloadPrefill(workload.id, high, True, f"random prompts of up to {high} tokens")
    if isinstance(synthetic, SharedPrefixPrompts):
        # The radix cache serves a prefix from its second request on: a prefill is the suffix.
        how = f"suffixes of {synthetic.input_len} tokens after a cached prefix"
        return WorkloadPrefill(workload.id, synthetic.input_len, True, how)
    if not prompts or workload.prompts is None:
        return None
    how = f"{Path(workload.prompts).name} counted in bytes, no tokenizer at hand"
    return WorkloadPrefill(workload.id, max(p.token_bound for p in prompts), False, how)


def load_batch(workload: Workload, load: LoadPoint, prompts: int | None) -> WorkloadBatch | None:
    """The largest decode batch ``workload`` runs at ``load`` over ``prompts`` prompts (the set after
    max_prompts; None: not known, the load's own bound stands): what its rounds keep in flight
    (`Workload.round_plan`). None for an open loop without max_concurrency: nothing bounds it."""
    if load.concurrency is None:
        return None
    batch = load.concurrency if prompts is None else workload.round_plan(load, prompts).in_flight
    return WorkloadBatch(workload.id, load.describe(), batch or load.concurrency, tag=load.tag)


@dataclass(frozen=True)
class GraphNeeds:
    """What a deployment's workloads ask of the decode and prefill graphs."""

    # The largest decode batch at every load point with a bound (a closed loop's concurrency, an open
    # loop's max_concurrency; an open loop without one has no bound to hold a graph against).
    batches: tuple[WorkloadBatch, ...]
    prefills: tuple[WorkloadPrefill, ...]  # every workload's longest prompt

    def largest_in_flight(self) -> int | None:
        """The most requests any workload keeps in flight; None when no workload bounds it."""
        return max((b.batch for b in self.batches), default=None)

    def decode_batches(self, max_running: int | None = None, field: str = "") -> list[WorkloadBatch]:
        """The batches, capped by the server's most running requests where that is known (``field``: the
        setting that caps them, as the report names it)."""
        return [b.capped(max_running, field) for b in self.batches]

    def prefills_in_chunks(self, chunk: int | None = None, field: str = "") -> list[WorkloadPrefill]:
        """Each workload's longest prefill, cut to the chunked prefill size: SGLang prefills a longer prompt
        in chunks of that many tokens, so no prefill batch holds more."""
        if chunk is None:
            return list(self.prefills)
        return [
            replace(n, tokens=chunk, how=f"{n.how}, prefilled in chunks of {field} = {chunk}")
            if n.tokens > chunk
            else n
            for n in self.prefills
        ]

    def prefill_capture_need(self) -> int | None:
        """The tokens a request for the prefill graph captures it up to: the longest prompt of any workload,
        when every workload's is known in tokens (synthetic prompts). A prompt file is counted in bytes only,
        a bound that can be far above what it needs: then SGLang's own size stands (and coverage is judged
        from the measured rounds' batch lines)."""
        if not self.prefills or not all(n.exact for n in self.prefills):
            return None
        return max(n.tokens for n in self.prefills)


def graph_needs(deployment: Deployment, variant: Variant | None = None) -> GraphNeeds:
    """What every workload of ``deployment`` asks of the graphs of one server of ``variant``: in a topology, a
    replica's (or a decode server's) share of the batch the router spreads over the role's workers."""
    workers = deployment.decode_workers(variant) if variant is not None else 1
    batches: list[WorkloadBatch] = []
    prefills: list[WorkloadPrefill] = []
    for workload in deployment.workloads:
        prompts = _prompt_file(deployment, workload)
        if workload.synthetic is not None:
            count: int | None = workload.prompts_used(workload.synthetic.prompt_count())
        else:
            count = len(prompts) if prompts else None
        batches += [
            b.shared(workers) for load in workload.load_points() if (b := load_batch(workload, load, count)) is not None
        ]
        if (prefill := _workload_prefill(workload, prompts)) is not None:
            prefills.append(prefill)
    return GraphNeeds(tuple(batches), tuple(prefills))
