"""Graph coverage records: the batch sizes a decode graph is captured for, against the batches a
deployment's workloads will run.

A decode graph replays only for a batch no larger than the largest size it was captured for; a larger
batch runs eager, every step, while the graph reads "on". SGLang picks the largest size by rules that
change with the release, the GPU's memory and the parallelism; the rule that picked it travels with the
sizes so a failure can quote it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglperf.model.resolution import describe_rule


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
