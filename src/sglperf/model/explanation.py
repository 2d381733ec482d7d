"""What `sglperf explain` says about a variant: SGLang's decisions, and what differs from another variant."""

from __future__ import annotations

from dataclasses import dataclass

from sglperf.model.resolution import Decision, FieldChange


@dataclass(frozen=True)
class FlagEffect:
    """What one flag of a variant changes: the variant resolved without it, against the variant."""

    flag: str  # as the argv spells it, with its value: "--chunked-prefill-size 8192"
    field: str  # the field the flag writes (argparse's dest)
    changes: tuple[FieldChange, ...]  # without the flag -> with it
    error: str | None = None  # SGLang refused the variant without it

    @property
    def only_its_own_field(self) -> bool:
        """Accepted, and nothing changed but the field the flag writes: SGLang resolves the same config."""
        return self.error is None and all(c.field == self.field for c in self.changes)


@dataclass(frozen=True)
class VariantComparison:
    reference: str
    changes: tuple[FieldChange, ...]  # the reference variant's effective config -> this variant's
    flags: tuple[FlagEffect, ...]  # the flags this variant has and the reference has not


@dataclass(frozen=True)
class Explanation:
    """One variant as one SGLang release resolves it."""

    deployment: str
    variant: str
    sglang_version: str
    argv: tuple[str, ...]
    decisions: tuple[Decision, ...]
    error: str | None = None  # the flags could not be planned, or SGLang refused them
    comparison: VariantComparison | None = None
    # Decisions (and differences) on settings that cannot act on this model or its text traffic (a mamba
    # cache on a dense model, HiCache when it is off): named, not explained.
    out_of_scope: tuple[str, ...] = ()
