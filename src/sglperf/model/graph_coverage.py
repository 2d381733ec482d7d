"""Graph coverage records: the batch sizes a decode graph is captured for (the token sizes, for the
prefill graph), against the batches a deployment's workloads will run.

A decode graph replays only for a batch no larger than the largest size it was captured for; a larger
batch runs eager, every step, while the graph reads "on"; the prefill graph is the same in tokens.
SGLang picks the largest size by rules that change with the release, the GPU's memory and the
parallelism; the rule that picked it travels with the sizes so a failure can quote it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sglperf.model.deployment import Deployment
from sglperf.model.prompts import PromptError, load_prompts
from sglperf.model.resolution import describe_rule
from sglperf.model.workload import RandomPrompts, SharedPrefixPrompts


@dataclass(frozen=True)
class CaptureRule:
    """The SGLang code that set the largest captured size: its function, file:line, the statement, the
    conditions it sits under and the comment SGLang wrote above it."""

    rule: str
    where: str = ""
    code: str = ""
    conditions: tuple[str, ...] = ()
    comment: str = ""

    def describe(self, comment_chars: int = 160) -> str:
        return describe_rule(self.rule, self.where, self.conditions, self.comment, comment_chars)


@dataclass(frozen=True)
class CapturedSizes:
    """What a graph will be captured for, as one release resolves it."""

    sizes: tuple[int, ...]  # ascending
    source: str  # the effective field read, e.g. "cuda_graph_config.decode.bs"
    rule: CaptureRule | None = None  # None: the release's resolution did not say which code set it

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

    def describe(self) -> str:
        return f"{self.workload} at {self.load}" + (
            f" (batch {self.batch}: {self.bounded_by})" if self.bounded_by else ""
        )


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


def workload_prefills(deployment: Deployment) -> list[WorkloadPrefill]:
    """Each workload's longest prompt in tokens: exact for synthetic prompts (made in the server's own
    tokens), bounded by bytes for a prompt file (`Prompt.token_bound`). A prompt file that cannot be
    read gives no number; measuring it fails with the file's own error."""
    needs = []
    for workload in deployment.workloads:
        synthetic = workload.synthetic
        if isinstance(synthetic, RandomPrompts):
            high = synthetic.length_range()[1]
            needs.append(WorkloadPrefill(workload.id, high, True, f"random prompts of up to {high} tokens"))
        elif isinstance(synthetic, SharedPrefixPrompts):
            # The radix cache serves a prefix from its second request on: a prefill is the suffix.
            how = f"suffixes of {synthetic.input_len} tokens after a cached prefix"
            needs.append(WorkloadPrefill(workload.id, synthetic.input_len, True, how))
        elif workload.prompts is not None:
            try:
                prompts = load_prompts(deployment.path.parent / workload.prompts).prompts
            except PromptError:
                continue
            longest = max(p.token_bound for p in prompts[: workload.max_prompts])
            how = f"{Path(workload.prompts).name} counted in bytes, no tokenizer at hand"
            needs.append(WorkloadPrefill(workload.id, longest, False, how))
    return needs
