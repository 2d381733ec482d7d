"""Workloads (a deployment's ``[[workloads]]``): the prompts, the load points they are measured at (closed
loop at a concurrency, open loop at a rate, a capacity search over rates), the SLO and the rounds.

The stated load is the measured load (`Workload.round_plan`). A closed-loop round at concurrency C sends
C x ceil(N / C) requests over its N prompts, request i with prompt i mod N: C in flight from its first
request until its last wave, where equal answers (every request decodes ``output_len`` tokens) end
together. N < C cycles the prompts (8 requests over 4 prompts, each twice), and so does an N that is
not a multiple of C (12 prompts at 8: 16 requests, the first 4 prompts twice), whose last wave would
otherwise run N mod C in flight. Cycling is the default: every round still sends the same prompts in
the same order, and the record says it cycled. A workload that must not send a prompt twice in a round
(``cycle_prompts = false``: a repeat may prefill from the radix cache) is refused at load where its
prompts cannot hold a concurrency. An open loop's ``max_concurrency`` is a cap, not a target: its
round must send at least that many requests, or it is refused at load (cycling there is ``requests``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from sglperf.model.deployment_fields import Deadline, FilePath, Slug, StrictTable, check_thresholds


class Slo(StrictTable):
    """Targets a request must meet, every one of them, to count toward goodput (per-request TTFT, its
    ITL over the decode window, its end-to-end time; `sglperf.measure.samples`)."""

    ttft_s: Deadline | None = None
    itl_s: Deadline | None = None
    e2e_s: Deadline | None = None

    @model_validator(mode="after")
    def _some_target(self) -> Slo:
        if self.ttft_s is None and self.itl_s is None and self.e2e_s is None:
            raise ValueError("an slo needs at least one of ttft_s, itl_s, e2e_s")
        return self

    def describe(self) -> str:
        return ", ".join(
            f"{name} <= {value:g}"
            for name, value in (("ttft_s", self.ttft_s), ("itl_s", self.itl_s), ("e2e_s", self.e2e_s))
            if value is not None
        )


# The fewest rounds at which the capacity's sign test can say "meets" or "misses" at all
# (`sglperf.baselines.capacity`: seven rounds on one side of the target, p = 1/128 < 0.01).
CAPACITY_MIN_ROUNDS = 7


class Capacity(StrictTable):
    """A search for the highest of these rates at which the workload keeps its SLO (`sglperf.baselines.capacity`)."""

    rates: list[Annotated[float, Field(gt=0, le=10_000)]] = Field(
        min_length=2, description="requests per second, measured lowest first; the search stops at the first missed"
    )
    goodput: float = Field(
        default=0.9, gt=0, le=1, description="the goodput share a round must keep for its rate to meet the SLO"
    )

    @field_validator("rates")
    @classmethod
    def _ascending(cls, value: list[float]) -> list[float]:
        if any(b <= a for a, b in itertools.pairwise(value)):
            raise ValueError(f"capacity rates must rise, each once (got {value})")
        for a, b in itertools.pairwise(value):
            if (tag := LoadPoint(None, a).tag) == LoadPoint(None, b).tag:
                raise ValueError(
                    f"capacity rates {a!r} and {b!r} are one load point to sglperf ({tag}: rates keep 6 significant "
                    "digits in test ids and baseline keys), so they would share one baseline entry, the later "
                    "overwriting the earlier; remove one or set them further apart"
                )
        return value


class RoundPlan(StrictTable):
    """What every measured round of one load point sends (`Workload.round_plan`): ``requests`` requests,
    the i-th with prompt i mod ``prompts`` of the set, at most ``in_flight`` at once."""

    requests: int = Field(ge=1)
    prompts: int = Field(ge=1, description="the prompts a round draws from (the set after max_prompts)")
    in_flight: int | None = Field(
        default=None, ge=1, description="the most a round keeps in flight; None: an open loop without a cap"
    )

    @property
    def cycled(self) -> bool:
        """Whether a round sends some prompt more than once."""
        return self.requests > self.prompts

    def describe(self) -> str:
        """What a round sends, in words: "32 requests cycling 4 prompts, 32 in flight"."""
        flight = f", {self.in_flight} in flight" if self.in_flight is not None else ""
        if self.cycled:
            return f"{self.requests} requests cycling {self.prompts} prompts{flight}"
        return f"{self.requests} requests, one per prompt{flight}"


def measurement_key(deployment: str, variant: str, workload: str, load_tag: str) -> str:
    """A measurement's name: its record's file stem, its item's name (`pytest -k KEY`), its history series.
    Ids hold hyphens, so two measurements can meet on one key: a deployment file is refused when they do."""
    return f"{deployment}-{variant}-{workload}-{load_tag}"


@dataclass(frozen=True)
class LoadPoint:
    """One load a workload is measured at: ``concurrency`` requests in flight (closed loop), or requests
    sent at ``rate`` per second whatever the server does (open loop; ``concurrency`` is then the most
    in flight, None for no cap)."""

    concurrency: int | None
    rate: float | None = None

    @property
    def tag(self) -> str:
        """In measurement keys, test ids and baseline entry keys: c8, r2.5."""
        return f"r{self.rate:g}" if self.rate is not None else f"c{self.concurrency}"

    def describe(self) -> str:
        if self.rate is None:
            return f"concurrency {self.concurrency}"
        return f"{self.rate:g} req/s" + (f", at most {self.concurrency} in flight" if self.concurrency else "")


# Fields that only an open-loop (rate) workload reads.
OPEN_LOOP_FIELDS = ("arrival", "burstiness", "seed", "requests", "duration_s", "max_concurrency")

# Synthetic prompt sets (sglperf.measure.synthetic) are read back as prompt files, which are read up to
# 64 MiB (model.files.INPUT_LIMIT_BYTES): a token takes at most ~16 bytes of JSON, usually far fewer.
MAX_PROMPT_TOKENS = 1_048_576
MAX_SYNTHETIC_PROMPTS = 100_000
MAX_SYNTHETIC_TOKENS = 4_000_000
Seed = Annotated[int, Field(ge=0, le=2**63 - 1, description="the generator's seed: the same seed, the same prompts")]


class RandomPrompts(StrictTable):
    """``count`` prompts of random tokens, each of a length drawn uniformly from
    [input_len * (1 - input_range), input_len * (1 + input_range)] tokens of the server's tokenizer."""

    kind: Literal["random"]
    count: int = Field(ge=1, le=MAX_SYNTHETIC_PROMPTS, description="how many prompts")
    input_len: int = Field(ge=1, le=MAX_PROMPT_TOKENS, description="prompt length in tokens (the middle of the range)")
    input_range: float = Field(
        default=0.0, ge=0, lt=1, allow_inf_nan=False, description="relative spread of the lengths: 0.25 is +-25%"
    )
    seed: Seed = 0

    @field_validator("input_range")
    @classmethod
    def _one_zero(cls, value: float) -> float:
        return value + 0.0  # -0.0 is 0.0: one spelling, so one cache key (sglperf.measure.synthetic)

    @model_validator(mode="after")
    def _bounded(self) -> RandomPrompts:
        _, high = self.length_range()
        if high > MAX_PROMPT_TOKENS:
            raise ValueError(
                f"input_len: {self.input_len} x (1 + input_range {self.input_range:g}) reaches {high} tokens, over "
                f"{MAX_PROMPT_TOKENS}; lower input_len or input_range"
            )
        if self.count * high > MAX_SYNTHETIC_TOKENS:
            raise ValueError(
                f"count: {self.count} prompts of up to {high} tokens exceed {MAX_SYNTHETIC_TOKENS} tokens in all; "
                "lower count or input_len"
            )
        return self

    def length_range(self) -> tuple[int, int]:
        """The fewest and most tokens a prompt may have (both included)."""
        spread = self.input_len * self.input_range
        return max(1, math.floor(self.input_len - spread)), math.ceil(self.input_len + spread)

    def prompt_count(self) -> int:
        return self.count

    def describe(self) -> str:
        spread = f"±{self.input_range * 100:g}%" if self.input_range else ""
        return f"random, {self.input_len}{spread} tokens"


class SharedPrefixPrompts(StrictTable):
    """``prefixes`` x ``suffixes`` prompts: each is one of ``prefixes`` shared prefixes of ``prefix_len``
    tokens followed by a suffix of its own of ``input_len`` tokens (the radix cache serves the prefixes)."""

    kind: Literal["shared-prefix"]
    prefixes: int = Field(ge=1, le=10_000, description="how many distinct shared prefixes")
    suffixes: int = Field(ge=1, le=MAX_SYNTHETIC_PROMPTS, description="prompts per prefix, each with its own suffix")
    prefix_len: int = Field(ge=1, le=MAX_PROMPT_TOKENS, description="shared prefix length in tokens")
    input_len: int = Field(ge=1, le=MAX_PROMPT_TOKENS, description="each prompt's own suffix length in tokens")
    seed: Seed = 0

    @model_validator(mode="after")
    def _bounded(self) -> SharedPrefixPrompts:
        count, length = self.prefixes * self.suffixes, self.prefix_len + self.input_len
        if count > MAX_SYNTHETIC_PROMPTS:
            raise ValueError(
                f"suffixes: {self.prefixes} prefixes x {self.suffixes} suffixes make {count} prompts, over "
                f"{MAX_SYNTHETIC_PROMPTS}; lower prefixes or suffixes"
            )
        if length > MAX_PROMPT_TOKENS:
            raise ValueError(
                f"input_len: prefix_len + input_len is {length} tokens, over {MAX_PROMPT_TOKENS}; lower one of them"
            )
        if count * length > MAX_SYNTHETIC_TOKENS:
            raise ValueError(
                f"suffixes: {count} prompts of {length} tokens exceed {MAX_SYNTHETIC_TOKENS} tokens in all; "
                "lower prefixes, suffixes or the lengths"
            )
        return self

    def prompt_count(self) -> int:
        return self.prefixes * self.suffixes

    def describe(self) -> str:
        return (
            f"shared-prefix, {self.prefixes} prefixes of {self.prefix_len} tokens x {self.suffixes} suffixes of "
            f"{self.input_len} tokens"
        )


# A synthetic prompt set, told apart by its `kind`.
SyntheticPrompts = Annotated[RandomPrompts | SharedPrefixPrompts, Field(discriminator="kind")]


class Workload(StrictTable):
    id: Slug
    prompts: FilePath | None = Field(
        default=None, description="JSONL prompt set, relative to the deployment file (or synthetic)"
    )
    synthetic: SyntheticPrompts | None = Field(
        default=None, description="prompts generated in tokens of the server's own tokenizer (or prompts)"
    )
    max_prompts: int | None = Field(default=None, ge=1, description="use only the first N prompts of the set")
    cycle_prompts: bool = Field(
        default=True,
        description="closed loop: send prompts again, in turn, to keep the concurrency in flight for the whole "
        "round; false: each prompt at most once a round (a concurrency its prompts cannot hold is refused)",
    )
    output_len: int = Field(default=256, ge=1)
    concurrency: list[int] = Field(default_factory=lambda: [1])
    rate: float | None = Field(
        default=None, gt=0, le=10_000, description="open loop: requests per second, sent on schedule (not concurrency)"
    )
    arrival: Literal["poisson", "constant"] = Field(default="poisson", description="open loop: the gaps between sends")
    burstiness: float = Field(
        default=1.0, gt=0, le=100, description="open loop, poisson: gamma shape of the gaps (1: Poisson; < 1 burstier)"
    )
    seed: int = Field(default=0, ge=0, description="open loop: the schedule's seed (every round sends on the same one)")
    requests: int | None = Field(
        default=None, ge=1, le=100_000, description="open loop: requests per round (default: one per prompt)"
    )
    duration_s: float | None = Field(
        default=None,
        gt=0,
        le=3600,
        description="open loop: send for this long per round (every request the schedule puts before it), "
        "instead of a number of requests; the round then waits for the last answer",
    )
    max_concurrency: int | None = Field(default=None, ge=1, description="open loop: the most requests in flight")
    slo: Slo | None = Field(default=None, description="targets for goodput: the share of requests meeting them all")
    capacity: Capacity | None = Field(
        default=None, description="open loop at each of these rates instead of one: the highest that keeps the slo"
    )
    warmup: int = Field(default=2, ge=0)
    repeats: int = Field(
        default=12, ge=1, description="rounds over the prompt set; each round is one sample (the most a run measures)"
    )
    sequential: bool = Field(
        default=True, description="stop measuring once the verdict against the baseline is clear (baselines.sequential)"
    )
    min_repeats: int = Field(default=3, ge=2, description="rounds a sequential run measures at least")
    api: Literal["native", "openai-chat", "openai-completions"] = "native"
    reuse_prefix_cache: bool = False
    stall_timeout_s: Deadline = Field(default=60.0, description="silence between two chunks that counts as a stall")
    thresholds: dict[str, float] = Field(default_factory=dict, description="relative regression floors per metric")

    @model_validator(mode="after")
    def _one_prompt_set(self) -> Workload:
        if self.prompts is not None and self.synthetic is not None:
            raise ValueError("synthetic: a workload has one prompt set: remove prompts (a file) or synthetic")
        if self.prompts is None and self.synthetic is None:
            raise ValueError(
                'prompts: a workload needs a prompt set: prompts = "FILE.jsonl" or synthetic = { kind = "random", '
                "count = 32, input_len = 512 } (docs/deployments.md)"
            )
        return self

    @model_validator(mode="after")
    def _rounds(self) -> Workload:
        # The default min_repeats yields to a smaller repeats (such a run simply never stops early).
        if self.sequential and "min_repeats" in self.model_fields_set and self.min_repeats > self.repeats:
            raise ValueError(
                f"min_repeats: {self.min_repeats} exceeds repeats {self.repeats} (repeats is the most rounds a "
                "sequential run measures, min_repeats the fewest); lower min_repeats or set sequential = false"
            )
        return self

    @model_validator(mode="after")
    def _capacity(self) -> Workload:
        if self.capacity is None:
            return self
        if self.slo is None:
            raise ValueError("capacity: a capacity search needs an slo (what a rate must keep); add slo")
        if self.rate is not None:
            raise ValueError("rate, capacity: a capacity search measures each of its rates; remove rate")
        if self.repeats < CAPACITY_MIN_ROUNDS:
            raise ValueError(
                f"repeats: a capacity search needs at least {CAPACITY_MIN_ROUNDS} rounds per rate (fewer can never "
                f"tell meeting the slo from missing it at p < 0.01); got {self.repeats}"
            )
        return self

    @model_validator(mode="after")
    def _one_loop(self) -> Workload:
        if self.rate is not None or self.capacity is not None:
            if "concurrency" in self.model_fields_set:
                raise ValueError(
                    "concurrency: a workload with a rate sends on its schedule, not with a fixed number in flight; "
                    "remove concurrency (max_concurrency caps what is in flight) or remove rate"
                )
            if self.requests is not None and self.duration_s is not None:
                raise ValueError(
                    "requests, duration_s: a round is bounded by a number of requests or by a duration, not both; "
                    "remove one"
                )
            return self
        if stray := [f for f in OPEN_LOOP_FIELDS if f in self.model_fields_set]:
            raise ValueError(
                f"{', '.join(stray)}: only for a workload with a rate (open loop); add rate or remove them"
            )
        return self

    def load_points(self) -> list[LoadPoint]:
        """What the workload is measured at, in order: each concurrency, or its one rate."""
        if self.capacity is not None:
            return [LoadPoint(self.max_concurrency, rate) for rate in self.capacity.rates]
        if self.rate is None:
            return [LoadPoint(c) for c in self.concurrency]
        return [LoadPoint(self.max_concurrency, self.rate)]

    def prompts_used(self, in_set: int) -> int:
        """How many prompts of a set of ``in_set`` the rounds draw from (the first ``max_prompts``)."""
        return min(in_set, self.max_prompts or in_set)

    def round_plan(self, load: LoadPoint, prompts: int, scheduled: int | None = None) -> RoundPlan:
        """What every round at ``load`` sends over ``prompts`` prompts (the set after max_prompts; see the
        module docstring). ``scheduled``: an open loop bounded by ``duration_s``, the sends its schedule puts
        in a round (`sglperf.measure.arrivals`); without it, rate x duration_s. A plan that cannot hold the
        load says so in `unheld`; ``in_flight`` is then the most it reaches."""
        if load.rate is None:
            concurrency = load.concurrency or 1
            waves = -(-prompts // concurrency)  # ceil: the last wave full too
            requests = concurrency * waves if self.cycle_prompts else prompts
            return RoundPlan(requests=requests, prompts=prompts, in_flight=min(concurrency, requests))
        if self.duration_s is not None:
            requests = scheduled if scheduled is not None else max(1, math.ceil(load.rate * self.duration_s))
        else:
            requests = self.requests or prompts
        cap = None if load.concurrency is None else min(load.concurrency, requests)
        return RoundPlan(requests=requests, prompts=prompts, in_flight=cap)

    def unheld(self, load: LoadPoint, prompts: int, scheduled: int | None = None) -> tuple[str, str] | None:
        """(the field to change, one line saying why and what to change) when rounds at ``load`` over
        ``prompts`` prompts cannot hold it (`round_plan`); None when they do."""
        plan = self.round_plan(load, prompts, scheduled)
        if load.rate is None:
            concurrency = load.concurrency or 1
            if plan.requests % concurrency == 0:
                return None
            # cycle_prompts = false (cycling always fills the last wave)
            if prompts < concurrency:
                held, fix = f"at most {prompts} are ever in flight", ""
            else:
                held = f"its last {prompts % concurrency} requests run with fewer than {concurrency} in flight"
                # A max_prompts that holds every concurrency it can, else this one.
                multiple = math.lcm(concurrency, *(c for c in self.concurrency if c <= prompts))
                multiple = multiple if multiple <= prompts else concurrency
                fix = f"set max_prompts = {prompts - prompts % multiple}, "
            return "cycle_prompts", (
                f"concurrency {concurrency} is not held: with cycle_prompts = false a round sends each of its "
                f"{prompts} prompts once, so {held}; {fix}remove cycle_prompts = false (prompts sent again, in "
                f"turn), add prompts, or lower the concurrency"
            )
        if load.concurrency is None or plan.requests >= load.concurrency:
            return None
        at = f" at {load.rate:g} req/s" if self.capacity is not None else ""
        if self.duration_s is not None:
            about = "about " if scheduled is None else ""
            sends = f"{about}{plan.requests} requests (duration_s {self.duration_s:g} at {load.rate:g} req/s)"
            fix = f"lengthen duration_s to at least {math.ceil(load.concurrency / load.rate):g} s"
        elif self.requests is not None:
            sends, fix = f"requests = {self.requests}", f"set requests = {load.concurrency} or more"
        else:
            sends = f"{prompts} requests, one per prompt"
            fix = f"set requests = {load.concurrency} or more (the prompts are taken in turn)"
        return "max_concurrency", (
            f"max_concurrency {load.concurrency} is never reached{at}: a round sends {sends}; {fix}, or lower "
            "max_concurrency"
        )

    def at(self, load: LoadPoint) -> Workload:
        """The workload as measured at one of its load points: a capacity search's step is an open-loop
        workload at that rate, run for all its rounds (its sign test needs them, not a sequential stop)."""
        if self.capacity is None or load.rate is None:
            return self
        return self.model_copy(update={"rate": load.rate, "sequential": False})

    def schedule(self, plan: RoundPlan | None = None) -> str:
        """What must match for a baseline to be comparable: everything that shapes the sends. Closed loop:
        nothing beyond the prompts (their digest) and the concurrency, unless the rounds cycle the prompts
        (``plan``), which a round that sent each prompt once did not."""
        if self.rate is None:
            return plan.describe() if plan is not None and plan.cycled else ""
        cap = self.max_concurrency or "none"
        burst = f" burstiness={self.burstiness:g}" if self.arrival == "poisson" else ""
        bound = f"requests={self.requests or 'prompts'}"
        if self.duration_s is not None:
            bound = f"duration={self.duration_s:g}s"
        return f"rate={self.rate:g} {self.arrival}{burst} seed={self.seed} {bound} cap={cap}"

    @field_validator("concurrency")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if not value or any(c < 1 for c in value):
            raise ValueError("concurrency must be a non-empty list of integers >= 1")
        if twice := sorted({c for c in value if value.count(c) > 1}):
            raise ValueError(
                f"concurrency {', '.join(map(str, twice))} is listed twice: one load point, one test id and one "
                "baseline entry, which the second measurement would overwrite; list each concurrency once"
            )
        return value

    @field_validator("thresholds")
    @classmethod
    def _known_metrics(cls, value: dict[str, float]) -> dict[str, float]:
        return check_thresholds(value)
