"""What a variant's flags bought on this run's machine: one metric of one variant against the reference
variant of the same deployment, workload and load point, from samples of the same run.

Computed in `sglperf.baselines.variant_effects` (the same rank test, Hodges-Lehmann interval and
practical floor as a baseline verdict); rendered by the console, the markdown report, the forest plot
and `sglperf compare --variants`, all from these records.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

from pydantic import BaseModel, ConfigDict

from sglperf.model.metrics import Direction, format_level

# What a deployment's expect_effect states: the value's way, or "none": no effect beyond the floor (a flag
# that must not cost anything, an A/A pair).
ExpectedEffect = Literal["lower", "higher", "none"]
# "none" expected and the test decided nothing: neither met nor missed. An effect's line says it in full,
# the console in capitals, as it says every expectation.
UNDECIDED_NONE = "expected no effect: not decided"


class EffectVerdict(str, Enum):
    BETTER = "better"  # beyond the floor in the better direction, significant at the test's level
    WORSE = "worse"
    NO_EFFECT = "no effect"  # the whole interval inside +/- floor: whatever it does is below the floor
    UNDECIDED = "undecided"  # the interval reaches past the floor, the test does not decide: more samples
    NOT_JUDGED = "not judged"  # too few samples on a side for the test to reach its level

    @property
    def moved(self) -> bool:
        return self in (EffectVerdict.BETTER, EffectVerdict.WORSE)


class EffectSession(BaseModel):
    """One session of a counterbalanced comparison beyond the measurement item's: a variant's rounds at one
    point, on a server started for it (`sglperf.session.live_session`)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    deployment: str
    variant: str
    workload: str
    load: str
    index: int  # 0 is the measurement item's own session; 1, 2, ... ran in mirrored order after it
    started_at: str | None
    samples: dict[str, list[float]]  # metric -> one value per round, in time order


class VariantEffect(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    deployment: str
    reference: str  # the variant compared against
    variant: str
    workload: str
    load: str  # the load point's tag: "c8", "r4"
    metric: str
    direction: Direction
    reference_median: float
    variant_median: float
    ratio: float  # variant / reference, of the medians
    ci_low: float  # Hodges-Lehmann interval of the shift ratio, at `level`
    ci_high: float
    p_value: float
    level: float
    floor: float  # the practical floor: the metric's regression threshold for this workload
    verdict: EffectVerdict
    n_reference: int
    n_variant: int
    expected: ExpectedEffect | None = None  # the variant's expect_effect for this workload and metric
    apart_s: float | None = None  # from the reference's first round to the variant's (None: not recorded)
    # 1: one session each, one after the other (the sequential design: a drifting machine reads as an effect);
    # more: this many counterbalanced sessions per side (A B B A), judged on paired rounds (n_* count pairs).
    sessions: int = 1

    @property
    def design(self) -> str:
        """How the two sides' rounds met, in the words every surface uses."""
        if self.sessions <= 1:
            return "sequential"
        return f"counterbalanced, {self.sessions} sessions each, {self.n_variant} paired rounds"

    @property
    def where(self) -> str:
        return f"{self.deployment}/{self.variant} vs {self.reference}, {self.workload}@{self.load}"

    @property
    def expectation_met(self) -> bool | None:
        """None: nothing expected. A move is met only when the test detected it the stated way beyond the
        floor; "none" only when the whole interval is inside the floor."""
        if self.expected is None:
            return None
        if self.expected == "none":
            # Undecided is neither: noise wide enough to hide an effect proves no effect and no move.
            return True if self.verdict is EffectVerdict.NO_EFFECT else False if self.verdict.moved else None
        way = "higher" if self.ratio > 1 else "lower"
        return self.verdict.moved and way == self.expected

    @property
    def expectation_undecided(self) -> bool:
        """ "none" was expected and the test decided nothing (more rounds would): not a failure, not a pass."""
        return self.expected == "none" and self.expectation_met is None

    def interval(self) -> str:
        return f"[{self.ci_low - 1:+.1%}, {self.ci_high - 1:+.1%}]"

    def describe(self) -> str:
        """The effect in one clause: the value's change with its interval, and what that means."""
        if self.verdict is EffectVerdict.NOT_JUDGED:
            return f"not judged: too few samples (n={self.n_reference}/{self.n_variant})"
        if self.verdict.moved:
            return f"{self.ratio - 1:+.1%} {self.interval()} ({self.verdict.value})"
        within = max(abs(self.ci_low - 1), abs(self.ci_high - 1))
        if self.verdict is EffectVerdict.NO_EFFECT:
            return f"no effect detected: within +/-{within:.1%} (floor {self.floor:.0%})"
        return f"{self.ratio - 1:+.1%} {self.interval()}: not decided at the floor of {self.floor:.0%} (more rounds)"

    def line(self) -> str:
        said = f"{self.where}: {self.metric} {self.describe()}"
        if self.expectation_met is False:
            evidence = f"(change {self.ratio - 1:+.1%}, interval {self.interval()}, floor {self.floor:.0%})"
            level = format_level(self.level)
            if self.expected == "none":
                said += f"; expected no effect, but it is {self.verdict.value} at {level} {evidence}"
            else:
                said += f"; expected {self.metric} {self.expected}, not detected at {level} {evidence}"
        elif self.expectation_undecided:
            said += f"; {UNDECIDED_NONE} either way (more rounds)"
        return said
