"""Preflight tier: SGLang's own argument resolution, on the CPU, with the runner's GPUs simulated.

`resolver` runs SGLang in a worker (`probe`, under SGLang's interpreter) and caches what it says;
`check` turns a deployment into verdicts.
"""

from sglperf.preflight.check import VariantCheck, check
from sglperf.preflight.resolver import PreflightError, Release, Resolver

__all__ = ["PreflightError", "Release", "Resolver", "VariantCheck", "check"]
