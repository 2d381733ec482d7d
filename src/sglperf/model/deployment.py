"""Deployments (`deployments/<key>.toml`): what runs where, which flag combinations, what to expect.

The schema of the file's model, launch and variant tables, and of the deployment as a whole: how a
variant's speculative settings merge with the launch's, which intents each variant is checked on, and
which floors each workload is held to. Reading a file into it: `sglperf.model.deployment_file`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import Field, StrictBool, ValidationError, field_validator, model_validator

from sglperf.model.checkpoint import CheckpointFacts
from sglperf.model.deployment_fields import Deadline, EnvVars, FilePath, Flags, Slug, StrictTable, did_you_mean
from sglperf.model.intent_names import INTENT_NAMES, SPECULATIVE
from sglperf.model.metrics import METRICS, with_inherited_floors
from sglperf.model.runner_profile import RunnerProfile
from sglperf.model.topology import Role, Topology, role_variant_id
from sglperf.model.variant_effect import ExpectedEffect
from sglperf.model.workload import Workload, measurement_key

# Where a deployment's expected effects (variants' expect_effect) are collected, beside its variants: a node
# of the test tree and an xdist scope, so no variant may take the name.
EFFECTS = "effects"


class Model(StrictTable):
    key: Slug
    served_path: str = Field(description="checkpoint path on GPU runners (override: --model-path)")
    config: FilePath = Field(description="config.json used by preflight, relative to the deployment file")


class DraftModel(StrictTable):
    """A separate draft model (EAGLE, EAGLE3, a small standalone model): where the runner keeps it, and
    its config.json here, which preflight reads (as it reads the target's ``model.config``)."""

    served_path: str = Field(description="the draft checkpoint on GPU runners (may name ${ENV} variables)")
    config: FilePath = Field(description="the draft's config.json used by preflight, relative to the deployment file")


class Speculative(StrictTable):
    algorithm: str = Field(min_length=1)
    num_steps: int = Field(ge=1)
    num_draft_tokens: int = Field(ge=1)
    eagle_topk: int = Field(default=1, ge=1)
    draft_model: DraftModel | None = None  # None: the target carries its own (MTP/NEXTN)


class SpeculativeOverride(StrictTable):
    algorithm: str | None = None
    num_steps: int | None = Field(default=None, ge=1)
    num_draft_tokens: int | None = Field(default=None, ge=1)
    eagle_topk: int | None = Field(default=None, ge=1)
    draft_model: DraftModel | None = None


def _check_intents(value: dict[str, Any]) -> dict[str, Any]:
    for name in value:
        if name not in INTENT_NAMES:
            close = did_you_mean(name, INTENT_NAMES)
            raise ValueError(f"unknown intent {name!r}; allowed: {', '.join(sorted(INTENT_NAMES))}{close}")
        if name == SPECULATIVE:
            raise ValueError(f"{name!r} is set through [launch.speculative] or a variant's speculative table")
    return value


class VersionRule(StrictTable):
    """Flags and environment that only some SGLang releases need (their spelling changes)."""

    sglang: str = Field(description="PEP 440 version specifier, e.g. '<0.5.20'")
    flags: Flags = Field(default_factory=list)
    env: EnvVars = Field(default_factory=dict)
    reason: str = ""

    @field_validator("sglang")
    @classmethod
    def _specifier(cls, value: str) -> str:
        try:
            SpecifierSet(value)
        except InvalidSpecifier:
            raise ValueError(f"{value!r} is not a version specifier such as '<0.5.20' or '>=0.5.14,<0.5.20'") from None
        return value


class Launch(StrictTable):
    tp_size: int = Field(ge=1)
    speculative: Speculative | None = None
    extra_flags: Flags = Field(default_factory=list)
    env: EnvVars = Field(default_factory=dict)
    when: list[VersionRule] = Field(default_factory=list)
    startup_timeout_s: Deadline = 1800
    # --enable-metrics on every launch, so each round's server metrics are read; false leaves it to the flags.
    server_metrics: bool = True


class Variant(StrictTable):
    id: Slug
    description: str = ""
    flags: Flags = Field(default_factory=list, description="raw SGLang flags, checked against the installed parser")
    request: dict[str, StrictBool] = Field(default_factory=dict, description="intents the suite translates to flags")
    expect: dict[str, StrictBool] = Field(default_factory=dict, description="intents checked in the effective args")
    speculative: SpeculativeOverride | None = None
    env: EnvVars = Field(default_factory=dict)
    # The effect this variant exists for, held against the deployment's reference variant in the same run
    # (`sglperf.baselines.variant_effects`): workload id -> metric -> "lower", "higher" or "none" (nothing
    # beyond the floor). Not detected at the test's level, it fails that workload's effect item.
    expect_effect: dict[Slug, dict[str, ExpectedEffect]] = Field(default_factory=dict)
    # Set by [topology], never by the file: the role this variant's servers play, and the variant it was made
    # from ("plain" for "plain.prefill").
    role: Slug | None = None
    base: Slug | None = None

    @field_validator("expect_effect")
    @classmethod
    def _effect_metrics_known(cls, value: dict[str, dict[str, ExpectedEffect]]) -> dict[str, dict[str, ExpectedEffect]]:
        for workload, metrics in value.items():
            unknown = sorted(set(metrics) - set(METRICS))
            if unknown:
                raise ValueError(
                    f"{workload}: unknown metric(s) {', '.join(unknown)}; known: {', '.join(sorted(METRICS))}"
                )
        return value

    @field_validator("request", "expect")
    @classmethod
    def _intents_known(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _check_intents(value)


class Counterbalance(StrictTable):
    """How variant effects are measured: in counterbalanced sessions, each with its own server and warm-up.

    The measurement items are every variant's first session (A, then B, ...); each further session runs the
    same points in mirrored order (B, then A; then A, B again), so a machine drifting steadily through the run
    cancels out of each A B B A quartet (`sglperf.baselines.paired`)."""

    # Sessions per variant and point: 2 is A B B A (one more server start per variant); 1 is the sequential
    # design (all of A's rounds, then B's), where a drifting machine reads as an effect.
    sessions: int = Field(default=2, ge=1, le=8)
    # Not yet known after ``sessions``: two more at a time (A B, then B A), up to this many.
    max_sessions: int = Field(default=4, ge=1, le=16)

    @model_validator(mode="after")
    def _budget_covers_sessions(self) -> Counterbalance:
        if self.sessions > 1 and self.sessions % 2:
            raise ValueError(f"sessions: {self.sessions} is odd; quartets need an even number (or 1: sequential)")
        if self.max_sessions < self.sessions:
            raise ValueError(f"max_sessions: {self.max_sessions} is fewer than sessions ({self.sessions})")
        return self


class Deployment(StrictTable):
    key: Slug
    path: Path
    description: str = ""
    model: Model
    runner: RunnerProfile
    launch: Launch
    expect: dict[str, StrictBool] = Field(default_factory=dict, description="expectations shared by every variant")
    variants: list[Variant] = Field(min_length=1)
    workloads: list[Workload] = Field(default_factory=list)
    # The variant every other is measured against in the same run (variant effects); default the first.
    reference_variant: Slug | None = None
    counterbalance: Counterbalance = Field(default_factory=Counterbalance)
    # Several servers behind SGLang's router (sglperf.model.topology); None: one server per variant.
    topology: Topology | None = None

    @field_validator("expect")
    @classmethod
    def _intents_known(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _check_intents(value)

    @model_validator(mode="after")
    def _consistent(self) -> Deployment:
        if self.topology is not None and any(v.role is None for v in self.variants):
            self._expand_roles(self.topology)
        seen: set[str] = set()
        for i, variant in enumerate(self.variants):
            if variant.id in seen:
                raise ValueError(f"variants[{i}].id: duplicate variant id {variant.id!r}")
            seen.add(variant.id)
            if variant.speculative and not self.launch.speculative and not variant.speculative.algorithm:
                raise ValueError(f"variants[{i}].speculative: no algorithm here nor in [launch.speculative]")
            if variant.speculative:
                try:
                    self.speculative_for(variant)
                except ValidationError as exc:
                    problems = "; ".join(
                        f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False)
                    )
                    raise ValueError(
                        f"variants[{i}].speculative: merged with [launch.speculative] it is incomplete: {problems}"
                    ) from None
        self._check_workload_ids()
        self._check_effects()
        fit = self.topology.fit_problems(self.runner, self.launch.tp_size) if self.topology else []
        if fit:
            raise ValueError("; ".join(f"topology.{line}" if line.startswith("roles") else line for line in fit))
        if self.runner.is_cpu and self.launch.tp_size != 1:
            raise ValueError(f"launch.tp_size: a CPU runner serves with tp_size 1, not {self.launch.tp_size}")
        if not self.runner.is_cpu and self.launch.tp_size > self.runner.gpu_count:
            raise ValueError(f"launch.tp_size: {self.launch.tp_size} exceeds runner.gpu_count {self.runner.gpu_count}")
        return self

    def _expand_roles(self, topology: Topology) -> None:
        """One variant per variant and role ("plain.prefill"): each role is resolved and judged on its own
        flags; only the entry role's variant carries measurements and expected effects (taken through the
        router)."""
        entry = topology.entry_role.name
        expanded = [
            variant.model_copy(
                update={
                    "id": role_variant_id(variant.id, role.name),
                    "flags": [*variant.flags, *role.flags],
                    "role": role.name,
                    "base": variant.id,
                    "expect_effect": variant.expect_effect if role.name == entry else {},
                }
            )
            for variant in self.variants
            for role in topology.roles
        ]
        reference = self.reference_variant and role_variant_id(self.reference_variant, entry)
        # The model is frozen: the expansion is part of its validation, done once, before anything reads it.
        object.__setattr__(self, "variants", expanded)
        if self.reference_variant is not None:
            object.__setattr__(self, "reference_variant", reference)

    def _check_workload_ids(self) -> None:
        """One id, one workload: its id keys its test ids, results files and baseline entries, so two with one id
        would overwrite each other's (a load point listed twice is refused by the workload itself)."""
        first: dict[str, int] = {}
        for i, workload in enumerate(self.workloads):
            if (j := first.setdefault(workload.id, i)) != i:
                raise ValueError(
                    f"workloads[{i}].id: {workload.id!r} is also workloads[{j}].id: the two would share test ids, "
                    "results files and baseline entries, the later measurement overwriting the earlier; rename one"
                )
        # Ids hold hyphens: variant "mtp3" with workload "full-decode" and variant "mtp3-full" with workload
        # "decode" both measure into qwen36-mtp3-full-decode-c1, the later record overwriting the earlier.
        named: dict[str, tuple[str, str]] = {}
        for variant in self.variants:
            for workload in self.workloads:
                for load in workload.load_points():
                    key = measurement_key(self.key, variant.id, workload.id, load.tag)
                    other = named.setdefault(key, (variant.id, workload.id))
                    if other != (variant.id, workload.id):
                        raise ValueError(
                            f"variants, workloads: variant {variant.id!r} with workload {workload.id!r} and variant "
                            f"{other[0]!r} with workload {other[1]!r} both measure into {key!r} (ids joined by "
                            "hyphens): one would overwrite the other's results; rename a variant or a workload"
                        )

    def _check_effects(self) -> None:
        ids = [v.id for v in self.variants]
        if EFFECTS in ids and any(v.expect_effect for v in self.variants):
            raise ValueError(
                f"variants[{ids.index(EFFECTS)}].id: {EFFECTS!r} names the deployment's expected effects in test ids "
                "(pytest -k effects): give the variant another id"
            )
        if self.reference_variant is not None and self.reference_variant not in ids:
            raise ValueError(f"reference_variant: {self.reference_variant!r} is not a variant ({', '.join(ids)})")
        workloads = {w.id for w in self.workloads}
        for i, variant in enumerate(self.variants):
            if variant.expect_effect and variant.id == self.reference:
                raise ValueError(
                    f"variants[{i}].expect_effect: {variant.id!r} is the reference variant, which nothing is held "
                    "against; set reference_variant to the variant it should beat"
                )
            for workload in variant.expect_effect:
                if workload not in workloads:
                    known = ", ".join(sorted(workloads)) or "none"
                    raise ValueError(f"variants[{i}].expect_effect.{workload}: no such workload (workloads: {known})")

    @property
    def reference(self) -> str:
        """The variant the others' effects are measured against."""
        return self.reference_variant or self.variants[0].id

    @property
    def config_path(self) -> Path:
        return (self.path.parent / self.model.config).resolve()

    @property
    def architectures(self) -> tuple[str, ...]:
        return CheckpointFacts(self.hf_config()).architectures

    def hf_config(self) -> dict[str, Any]:
        """The model's config.json (checked readable and an object when the deployment was loaded)."""
        data: dict[str, Any] = json.loads(self.config_path.read_text())
        return data

    def with_launch_env(self, env: dict[str, str]) -> Deployment:
        """The same deployment with ``env`` over its launch environment (benches compare settings)."""
        launch = self.launch.model_copy(update={"env": {**self.launch.env, **env}})
        return self.model_copy(update={"launch": launch})

    def without_launch_flag(self, flag: str) -> Deployment:
        """The same deployment without ``flag`` and its value in ``launch.extra_flags`` (benches and tests
        compare settings); KeyError if the deployment does not pass it."""
        flags = list(self.launch.extra_flags)
        if flag not in flags:
            raise KeyError(f"{self.path}: launch.extra_flags has no {flag}")
        at = flags.index(flag)
        del flags[at : at + 2]
        return self.model_copy(update={"launch": self.launch.model_copy(update={"extra_flags": flags})})

    def role_of(self, variant: Variant) -> Role | None:
        """The role this variant's servers play in the topology; None without one."""
        if self.topology is None or variant.role is None:
            return None
        return self.topology.role(variant.role)

    def tp_size_for(self, variant: Variant) -> int:
        role = self.role_of(variant)
        return (role.tp_size if role else None) or self.launch.tp_size

    def decode_workers(self, variant: Variant) -> int:
        """How many schedulers share a workload's decode batch on this variant's servers (1: one server)."""
        role = self.role_of(variant)
        return self.topology.decode_workers(role) if self.topology and role else 1

    def measures(self, variant: Variant) -> bool:
        """Whether this variant's items measure workloads: every variant of a single-server deployment; in a
        topology, the entry role's (its workloads go through the router to every role)."""
        return self.topology is None or variant.role == self.topology.entry_role.name

    def variant(self, variant_id: str) -> Variant:
        for v in self.variants:
            if v.id == variant_id:
                return v
        raise KeyError(f"{self.path}: no variant {variant_id!r}; have {[v.id for v in self.variants]}")

    def speculative_for(self, variant: Variant) -> Speculative | None:
        base = self.launch.speculative
        if variant.speculative is None:
            return base
        override = variant.speculative.model_dump(exclude_none=True)
        merged = {**(base.model_dump() if base else {}), **override}
        return Speculative(**merged)

    def thresholds_for(self, workload: Workload) -> dict[str, float]:
        """Regression floors for a workload: its own over the runner's (the defaults fill the rest); a part
        of a metric takes the whole's floor unless set (verify steps/s that of decode tok/s)."""
        return with_inherited_floors({**self.runner.thresholds, **workload.thresholds})

    def expectations_for(self, variant: Variant) -> dict[str, Any]:
        """Every intent this variant is checked on: shared, then variant, then what it requests."""
        role = self.role_of(variant)
        expected: dict[str, Any] = {**self.expect, **(role.expect if role else {}), **variant.expect, **variant.request}
        spec = self.speculative_for(variant)
        if spec is not None:
            expected[SPECULATIVE] = spec
        return expected
