"""What the rest of the machine took while a round was measured: other processes, and the hypervisor.

A busy neighbour slows a server in ways SGLang is not to blame for: a CPU server directly, a GPU
server through its scheduler and tokenizer processes, which run on the host's CPU. A round is
measured only while sglperf also counts (`sglperf.runtime.host_probe`):

* foreign CPU: CPU time the machine spent on processes outside this test process and its
  descendants (the server it launched, the server's workers, the meter itself are ours);
* steal: CPU time the hypervisor gave to other virtual machines (Linux's ``steal``).

Both as a share of the machine's capacity over the round (CPUs x wall time). A round is *disturbed*
when that share exceeds the limit by more than the counters' rounding can explain: Linux counts in
clock ticks, each counter read is short by up to one tick, so ``slack_cpu_s`` (two standard
deviations of the summed rounding; the probe says why two) is subtracted first, and a short round
on a quiet machine rarely reads as busy.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# How a measurement refused for a busy host reads (sglperf.measure.meter): tests look for it.
HOST_STAYED_BUSY = "the host stayed busy"
DEFAULT_MAX_HOST_LOAD = 0.10  # of the machine's CPU capacity: one busy core of a 2-core runner is 50%


@dataclass(frozen=True)
class HostLoad:
    """CPU time the rest of the machine took during one round, in CPU seconds."""

    wall_s: float
    cpus: int
    foreign_cpu_s: float
    steal_cpu_s: float
    slack_cpu_s: float  # rounding bound of the tick counters (see the module docstring)

    @property
    def capacity_cpu_s(self) -> float:
        return self.wall_s * self.cpus

    @property
    def share(self) -> float:
        """Foreign plus stolen CPU as a share of the machine's capacity over the round (may read < 0)."""
        if self.capacity_cpu_s <= 0:
            return 0.0
        return (self.foreign_cpu_s + self.steal_cpu_s) / self.capacity_cpu_s

    def disturbed(self, limit: float) -> bool:
        """Above ``limit`` (a share of capacity) by more than the counters' rounding."""
        taken = self.foreign_cpu_s + self.steal_cpu_s - self.slack_cpu_s
        return self.capacity_cpu_s > 0 and taken > limit * self.capacity_cpu_s

    def describe(self) -> str:
        return (
            f"{self.share:.0%} of {self.cpus} CPUs (other processes {self.foreign_cpu_s:.2f} s, "
            f"steal {self.steal_cpu_s:.2f} s, in {self.wall_s:.2f} s)"
        )


@dataclass(frozen=True)
class HostLoadSummary:
    """The host over one measurement: measured rounds, and rounds dropped because it was busy."""

    limit: float
    median_share: float  # over the measured rounds
    max_share: float
    dropped_rounds: int
    worst_dropped: str = ""  # HostLoad.describe() of the busiest dropped round

    @classmethod
    def of(cls, limit: float, kept: Sequence[HostLoad], dropped: Sequence[HostLoad]) -> HostLoadSummary | None:
        shares = [h.share for h in kept]
        if not shares and not dropped:
            return None
        worst = max(dropped, key=lambda h: h.share).describe() if dropped else ""
        return cls(
            limit=limit,
            median_share=statistics.median(shares) if shares else float("nan"),
            max_share=max(shares) if shares else float("nan"),
            dropped_rounds=len(dropped),
            worst_dropped=worst,
        )

    def note(self) -> str | None:
        """A line for the record's notes when rounds were dropped."""
        if not self.dropped_rounds:
            return None
        return (
            f"{self.dropped_rounds} round(s) dropped and measured again: the host was busy "
            f"(limit {self.limit:.0%} of its CPU; busiest: {self.worst_dropped})"
        )
