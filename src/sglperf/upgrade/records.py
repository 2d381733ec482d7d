"""What an upgrade check finds: flag, intent, warning and field changes between two releases, and the
transitions a walk through the releases in between locates."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sglperf.model.resolution import FieldChange
from sglperf.model.verdict import Status
from sglperf.preflight import VariantCheck
from sglperf.sglang.argv import ParserInfo
from sglperf.sglang.deprecations import Deprecation


@dataclass(frozen=True)
class FlagChange:
    flag: str
    change: str  # "removed", "deprecated", "renamed"
    used_by: tuple[str, ...]  # variants (or "intent <name>") that use it on the old release
    replacement: str | None
    # Where the replacement comes from (sglperf.sglang.deprecations.Replacement.source): "SGLang X's parser"
    # (the new release's own deprecation), "SGLang X-Y's deprecation" (what the releases said, followed to a
    # spelling the new release takes) or "intent" (how sglperf spells the intent on the new release).
    source: str | None = None
    release_says: str | None = None  # the deprecation message in the releases' own words


@dataclass(frozen=True)
class IntentChange:
    deployment: str
    variant: str
    intent: str
    before: str | None
    after: str | None
    status_before: str
    status_after: str
    detail_after: str
    requested: bool = False  # False: the value is SGLang's default for this variant

    @property
    def changed(self) -> bool:
        return self.before != self.after or self.status_before != self.status_after

    @property
    def breaks(self) -> bool:
        """The upgrade makes it fail: it fails after and did not fail alike before."""
        return Status(self.status_after).failed and self.changed

    @property
    def standing(self) -> bool:
        """It fails on both releases alike: not the upgrade's doing, but still a failure to fix."""
        return Status(self.status_after).failed and not self.changed


@dataclass(frozen=True)
class WarningChange:
    deployment: str
    variant: str
    appeared: tuple[str, ...]
    vanished: tuple[str, ...]


@dataclass(frozen=True)
class FieldChanges:
    """A variant's performance-relevant effective fields that differ between the two releases."""

    deployment: str
    variant: str
    changes: tuple[FieldChange, ...]
    # Fields only one release has that no rule of it set (new or retired options left at their default):
    # counted, not listed.
    one_sided: int = 0
    # Settings that cannot act on this model or traffic (a mamba cache on a dense model, HiCache when it is
    # off, multimodal inputs on a text path): named, not listed with the changes.
    out_of_scope: tuple[str, ...] = ()


@dataclass
class UpgradeReport:
    from_version: str
    to_version: str
    flags: list[FlagChange] = field(default_factory=list)
    intents: list[IntentChange] = field(default_factory=list)  # every intent, changed or not
    warnings: list[WarningChange] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # variants the new release refuses
    fields: list[FieldChanges] = field(default_factory=list)

    @property
    def breaking(self) -> list[IntentChange]:
        return [c for c in self.intents if c.breaks]

    @property
    def standing(self) -> list[IntentChange]:
        return [c for c in self.intents if c.standing]

    @property
    def changed(self) -> list[IntentChange]:
        return [c for c in self.intents if c.changed]

    def to_record(self) -> dict[str, Any]:
        return {
            "from": self.from_version,
            "to": self.to_version,
            "breaking": len(self.breaking),
            "standing": len(self.standing),
            "flags": [asdict(f) for f in self.flags],
            "intents": [asdict(c) for c in self.intents],
            "warnings": [asdict(w) for w in self.warnings],
            "errors": self.errors,
            "fields": [asdict(f) for f in self.fields],
        }


@dataclass(frozen=True)
class ReleaseStep:
    """One release of a walk, as it resolved the deployments (or why it could not)."""

    version: str
    parser: ParserInfo | None
    checks: tuple[VariantCheck, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class Transition:
    """A value that changed from one walked release to the next, and the rule that set it there."""

    deployment: str
    variant: str
    what: str  # "intent prefill_cuda_graph", a field path, WARNING or MODEL_BUILD
    release: str  # the first release seen with the new value
    before: str
    after: str
    rule: str = ""
    rule_release: str = ""  # the release whose code ``rule`` quotes
    # Releases just before ``release`` where the value is not known (not resolved, or the model class not
    # built there): the change may have come in any of them.
    unsure: tuple[str, ...] = ()


# Transition.what of a warning SGLang starts or stops printing, and of a model class that was not built.
WARNING = "SGLang warning"
MODEL_BUILD = "model class"


@dataclass
class WalkReport:
    from_version: str
    to_version: str
    releases: list[str] = field(default_factory=list)  # every release of the walk, resolved or not, in order
    walked: list[str] = field(default_factory=list)  # every release resolved, in order
    unresolved: list[str] = field(default_factory=list)  # "0.5.17: why"
    transitions: list[Transition] = field(default_factory=list)
    # A flag the target lacks -> what the walked releases' own parsers said of it, link by link.
    chains: dict[str, list[Deprecation]] = field(default_factory=dict)
    chain_ends_accepted: dict[str, bool] = field(default_factory=dict)  # does the target accept the chain's end

    def to_record(self) -> dict[str, Any]:
        return {
            "from": self.from_version,
            "to": self.to_version,
            "walked": self.walked,
            "unresolved": self.unresolved,
            "transitions": [asdict(t) for t in self.transitions],
            "chains": {flag: [asdict(link) for link in links] for flag, links in self.chains.items()},
            "chain_ends_accepted": self.chain_ends_accepted,
        }
