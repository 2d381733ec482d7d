"""sglperf's public API: what users' own tests and plugins import.

Everything here is stable (changed only compatibly, pinned by tests/unit/test_public_api.py); every
other module is private and may change in any release. The names load on first use, so importing a
submodule (the CLI, the preflight worker, the emulator) does not pay for pytest and the fixtures.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _package_version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sglperf.baselines.store import BaselineError
    from sglperf.errors import SglperfError
    from sglperf.model.deployment import Deployment, Variant
    from sglperf.model.deployment_file import DeploymentError
    from sglperf.model.deployment_file import load as load_deployment
    from sglperf.model.measurement import MeasurementRecord
    from sglperf.model.verdict import Status, Verdict
    from sglperf.model.workload import Workload
    from sglperf.plugin.user_tests import Measure, assert_baseline
    from sglperf.session.handles import EffectiveArgsView, ServerHandle, VariantRef

# public name -> (module, name in that module)
_EXPORTS: dict[str, tuple[str, str]] = {
    # deployments
    "Deployment": ("sglperf.model.deployment", "Deployment"),
    "Variant": ("sglperf.model.deployment", "Variant"),
    "Workload": ("sglperf.model.workload", "Workload"),
    "load_deployment": ("sglperf.model.deployment_file", "load"),
    # users' own tests on the fixtures
    "VariantRef": ("sglperf.session.handles", "VariantRef"),
    "ServerHandle": ("sglperf.session.handles", "ServerHandle"),
    "EffectiveArgsView": ("sglperf.session.handles", "EffectiveArgsView"),
    "Measure": ("sglperf.plugin.user_tests", "Measure"),
    "assert_baseline": ("sglperf.plugin.user_tests", "assert_baseline"),
    # results
    "MeasurementRecord": ("sglperf.model.measurement", "MeasurementRecord"),
    "Verdict": ("sglperf.model.verdict", "Verdict"),
    "Status": ("sglperf.model.verdict", "Status"),
    # errors
    "SglperfError": ("sglperf.errors", "SglperfError"),
    "DeploymentError": ("sglperf.model.deployment_file", "DeploymentError"),
    "BaselineError": ("sglperf.baselines.store", "BaselineError"),
}

__all__ = [
    "BaselineError",
    "Deployment",
    "DeploymentError",
    "EffectiveArgsView",
    "Measure",
    "MeasurementRecord",
    "ServerHandle",
    "SglperfError",
    "Status",
    "Variant",
    "VariantRef",
    "Verdict",
    "Workload",
    "__version__",
    "assert_baseline",
    "load_deployment",
]

try:
    __version__ = _package_version("sglperf")
except PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _EXPORTS[name]
    except KeyError:
        # An AttributeError lets `from sglperf import preflight` fall back to importing the subpackage.
        raise AttributeError(f"module 'sglperf' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
