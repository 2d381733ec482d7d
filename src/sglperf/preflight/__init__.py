"""Preflight tier: SGLang's own argument resolution, on the CPU, with the runner's GPUs simulated.

`resolver` runs SGLang in a worker (`probe`, under SGLang's interpreter) and caches what it says;
`resolve` asks it for each variant of a deployment; `check` judges what it resolved; `explain` reads it.
"""

from sglperf.preflight.check import VariantCheck, check
from sglperf.preflight.resolve import ResolvedVariant, Resolves, resolve_variants
from sglperf.preflight.resolver import PreflightError, Resolver

__all__ = [
    "PreflightError",
    "ResolvedVariant",
    "Resolver",
    "Resolves",
    "VariantCheck",
    "check",
    "resolve_variants",
]
